"""RMS-norm kernels, every formulation, against float64 references on fresh random inputs.

Each kernel is checked twice: by ``assert_numerics`` against the signature's own reference
(outputs poisoned with NaN first), and against PyTorch's ``rms_norm`` in float64 (its
autograd for the backward), written here apart from the plugin. Six kernels in all; the
eager tests reuse them.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from boo_core.plugin import compare, get_launchable
from boo_core.testing import assert_numerics
from boo_ops_rmsnorm import RMSNormSignature as S

bf16 = torch.bfloat16

#: (signature, formulation): both formulations in both modes (``staged`` needs 32 to divide
#: the summed dim: a row forward, a column backward), and a bfloat16 pair. Odd sizes where
#: the formulation allows, to catch indexing errors.
CASES = [
    (S(6, 96), "default"),
    (S(6, 96), "staged"),
    (S(64, 7, mode="bwd"), "default"),
    (S(64, 7, mode="bwd"), "staged"),
    (S(5, 33, dtype=bf16), "default"),
    (S(5, 33, dtype=bf16, mode="bwd"), "default"),
]


def sample_args(signature: S) -> tuple[torch.Tensor, ...]:
    """Random inputs with a row of zeros and a row of small values, whose rstd eps decides."""
    args = list(signature.get_sample_args())
    x = args[0 if signature.mode == "fwd" else 1]
    x[0] = 0
    x[1] *= 1e-3
    if signature.mode == "bwd":
        args[3] = pytorch_rstd(signature, x).float()
    return tuple(args)


def pytorch_rstd(signature: S, x: torch.Tensor) -> torch.Tensor:
    return torch.rsqrt(x.double().square().mean(-1) + signature.eps)


def pytorch(signature: S, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's rms_norm in float64: ``(y, rstd)``, or ``(dx, dweight)`` by its autograd
    (which recomputes x's statistic, where the kernel takes the saved one)."""
    if signature.mode == "fwd":
        x, weight = (t.double() for t in args)
        return F.rms_norm(x, (signature.size,), weight, signature.eps), pytorch_rstd(signature, x)
    dy, x, weight, _ = (t.double() for t in args)
    x.requires_grad_(), weight.requires_grad_()
    y = F.rms_norm(x, (signature.size,), weight, signature.eps)
    return torch.autograd.grad(y, (x, weight), dy)


@pytest.mark.parametrize("signature, formulation", CASES, ids=lambda c: getattr(c, "func_name", c))
def test_kernel_matches_its_reference_and_pytorch(signature, formulation):
    launchable = get_launchable(signature, formulation=None if formulation == "default" else formulation)
    assert launchable.formulation == formulation
    assert_numerics(launchable)
    args = sample_args(signature)
    outputs = launchable(*args)
    assert outputs[1].dtype == (torch.float32 if signature.mode == "fwd" else signature.dtype)
    for spec, actual, expected in zip(signature.output_specs(), outputs, pytorch(signature, *args)):
        result = compare(spec.name, actual, expected, accumulation_length=signature.accumulation_length)
        assert result.passed, str(result)


def test_the_backward_takes_the_saved_rstd_instead_of_recomputing_it():
    signature = S(64, 7, mode="bwd")
    dy, x, weight, rstd = signature.get_sample_args()
    backward = get_launchable(signature)
    _, dweight = backward(dy, x, weight, rstd)
    _, doubled = backward(dy, x, weight, 2 * rstd)  # dweight = sum(dy * x * rstd): linear in rstd
    torch.testing.assert_close(doubled, 2 * dweight)
