"""The ways a matmul becomes a kernel, in the order BOO tries them.

* ``default``: the export of the reference: ``op(A) @ op(B)`` accumulated in float32 (a
  16-bit contraction IREE maps to matrix instructions), then the epilogue.
* ``padded`` (CUDA): M, N and K padded with zeros to multiples of 16, the product of the
  padded operands, then the result cut back. The zeros add nothing to any sum, and the
  contraction is one IREE tiles without remainders.
* ``f32_compute`` (CUDA): the operands converted to float32 first, a float32 contraction.

On an H100 (sm_80 PTX, IREE 3.13; benchmarks/gpu_scan.py) ``default`` came out wrong for
16-bit *batched* matmuls whose M, N or K is not a multiple of 16, and only some of the
time: a kernel right on one call was wrong (inf, NaN) on the next, a race in the generated
code that one verification can miss. For that class ``padded`` (right in every run) comes
first. Elsewhere a wrong ``default`` gives way to the next formulation that verifies.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from boo_core import Formulation, Target

from .signature import MatmulSignature

#: Multiple the ``padded`` formulation rounds M, N and K up to.
PAD_TO = 16


def matmul_formulations(signature: MatmulSignature, target: Target) -> tuple[Formulation, ...]:
    default = Formulation("default")
    if target.backend != "cuda":
        return (default,)
    s = signature
    padded = Formulation("padded", computation=lambda *a: _padded(s, *a),
                         description=f"M, N, K padded with zeros to multiples of {PAD_TO}")
    in_float32 = Formulation("f32_compute", computation=lambda *a: s.reference(*(t.float() for t in a)).to(s.dtype),
                             description="the operands in float32, a float32 contraction")
    if racy_class(s):
        return (padded, default, in_float32)
    return (default, padded, in_float32)


def racy_class(signature: MatmulSignature) -> bool:
    """16-bit, batched, and M, N or K not a multiple of 16: IREE 3.13's CUDA kernel for these
    is wrong on some calls (module docstring)."""
    s = signature
    return s.dtype in (torch.float16, torch.bfloat16) and s.batch > 1 and any(d % PAD_TO for d in (s.m, s.n, s.k))


def _round_up(value: int) -> int:
    return -(-value // PAD_TO) * PAD_TO


def _padded(s: MatmulSignature, a: torch.Tensor, b: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
    """``padded``: the product of zero-padded logical operands, cut back, then the epilogue."""
    m, n, k = _round_up(s.m), _round_up(s.n), _round_up(s.k)
    left = F.pad(s._logical(a, s.trans_a), (0, k - s.k, 0, m - s.m))  # (.., M, K) -> (.., m, k)
    right = F.pad(s._logical(b, s.trans_b), (0, n - s.n, 0, k - s.k))  # (.., K, N) -> (.., k, n)
    accumulate = torch.promote_types(a.dtype, torch.float32)
    y = torch.matmul(left.to(accumulate), right.to(accumulate))[..., : s.m, : s.n]
    return s.epilogue(y, rest, accumulate).to(a.dtype)
