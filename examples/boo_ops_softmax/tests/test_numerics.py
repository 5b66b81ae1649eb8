"""Softmax kernels against float64 references, on fresh random inputs.

Each kernel is checked twice: by ``assert_numerics`` against the signature's own reference
(outputs poisoned with NaN first), and against PyTorch's softmax ops in float64, written
here apart from the plugin.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from boo_core.plugin import compare, get_launchable
from boo_core.testing import assert_numerics
from boo_ops_softmax import SoftmaxSignature as S

f16, bf16 = torch.float16, torch.bfloat16
aten = torch.ops.aten

SIGNATURES = [
    # Every algorithm, in both modes, forward and backward; odd sizes catch indexing errors.
    *(S(2, 7, 3, 5, algorithm, softmax_mode, mode=mode)
      for algorithm, softmax_mode, mode in itertools.product(("fast", "accurate", "log"), ("instance", "channel"),
                                                               ("fwd", "bwd"))),
    S(3, 17, 5, 1, "log", "instance", dtype=f16),
    S(4, 33, 2, 2, "accurate", "channel", dtype=bf16, mode="bwd"),
    # MIOpen's alpha and beta: the kernel also takes the prior output.
    S(2, 6, 2, 3, "fast", "channel", alpha=0.5, beta=0.25),
    S(2, 6, 2, 3, "log", "instance", alpha=2.0, beta=-1.0, mode="bwd"),
]


def torch_reference(signature: S, *args: torch.Tensor) -> torch.Tensor:
    """PyTorch's softmax (or its backward) in float64 over C, or over C*H*W per n for instance mode."""
    args64 = [t.to(torch.float64) for t in args]
    rows = (signature.n, -1, signature.h * signature.w) if signature.softmax_mode == "channel" else (signature.n, -1)
    log = signature.algorithm == "log"
    if signature.mode == "fwd":
        x, *prior = args64
        result = (torch.log_softmax if log else torch.softmax)(x.reshape(rows), 1)
    else:
        y, dy, *prior = args64
        backward = aten._log_softmax_backward_data if log else aten._softmax_backward_data
        result = backward(dy.reshape(rows), y.reshape(rows), 1, torch.float64)
    result = signature.alpha * result.reshape(signature.shape)
    return result + signature.beta * prior[0] if prior else result


@pytest.mark.parametrize("signature", SIGNATURES, ids=lambda s: s.func_name)
def test_kernel_matches_its_reference_and_pytorch(signature):
    launchable = get_launchable(signature)
    assert_numerics(launchable)
    args = signature.get_sample_args()
    result = compare(signature.output_specs()[0].name, launchable(*args), torch_reference(signature, *args),
                     accumulation_length=signature.accumulation_length)
    assert result.passed, str(result)


def test_fast_overflows_where_accurate_does_not_as_in_miopen():
    x = torch.tensor([[100.0, 0.0]]).reshape(1, 2, 1, 1)  # exp(100) is beyond float32's range
    fast = get_launchable(S(1, 2, algorithm="fast"))(x)
    accurate = get_launchable(S(1, 2))(x)
    assert not torch.isfinite(fast[0, 0]) and torch.equal(accurate.flatten(), torch.tensor([1.0, 0.0]))
