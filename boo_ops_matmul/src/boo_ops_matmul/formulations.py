"""The ways a matmul becomes a kernel, in the order BOO tries them.

* ``default``: the export of the reference: ``op(A) @ op(B)`` accumulated in float32 (a
  16-bit contraction IREE maps to matrix instructions), then the epilogue.
* ``padded`` (CUDA): M, N and K padded with zeros to multiples of 16, the product of the
  padded operands, then the result cut back. The zeros add nothing to any sum, and the
  contraction is one IREE tiles without remainders.
* ``f32_compute`` (CUDA): the operands converted to float32 first, a float32 contraction.
* ``split_k`` (CPU, float32, K long against M and N: :data:`SPLIT_K_FROM`, first there): the
  product as :data:`SPLIT_K_PARTS` products over slices of K (zero-padded to a multiple),
  summed. IREE's CPU kernel parallelizes over M and N only, so a long K with a small M x N
  (a linear layer's weight gradient, K = the tokens) leaves most of the machine idle.

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
#: ``split_k`` comes first on the CPU for float32 products with K at least this many times
#: max(M, N) and at least 2**30 multiply-adds. 2-core CPU, median ms of 5 calls, default ->
#: 4, 16, 64 parts (torch): A^T B of 192x768, K 25,088 269.6 -> 189.4, 96.0, 60.0 (26.8); 96x384,
#: K 100,352 314.4 -> 216.4, 134.5, 65.6 (30.8); 768x768, K 25,088 (data-tiled) 327.8 -> 224.0,
#: 214.6, 219.9 (96.6). Not K 6,304 at 768x768 (38.0 -> 44.0, 55.3, 107.1), nor a 64x64, K 4,096
#: product (0.4 -> 0.5), nor bf16 (data-tiled: 54.3 at 192x768, K 25,088 -> 56.0 with 16 parts).
SPLIT_K_FROM = 16
SPLIT_K_PARTS = 64


def matmul_formulations(signature: MatmulSignature, target: Target) -> tuple[Formulation, ...]:
    default = Formulation("default")
    if target.backend != "cuda":
        if splits_k_on_the_cpu(signature):
            return (Formulation("split_k", computation=lambda *a: _split_k(signature, SPLIT_K_PARTS, *a),
                                description=f"{SPLIT_K_PARTS} products over slices of K, summed"), default)
        return (default,)
    s = signature
    padded = Formulation("padded", computation=lambda *a: _padded(s, *a),
                         description=f"M, N, K padded with zeros to multiples of {PAD_TO}")
    in_float32 = Formulation("f32_compute", computation=lambda *a: s.reference(*(t.float() for t in a)).to(s.dtype),
                             description="the operands in float32, a float32 contraction")
    if racy_class(s):
        return (padded, default, in_float32)
    return (default, padded, in_float32)


def splits_k_on_the_cpu(signature: MatmulSignature) -> bool:
    """A float32 product whose K is long against M and N, and large (:data:`SPLIT_K_FROM`)."""
    s = signature
    return s.dtype == torch.float32 and s.k >= SPLIT_K_FROM * max(s.m, s.n) and s.m * s.n * s.k >= 2**30


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


def _split_k(s: MatmulSignature, parts: int, a: torch.Tensor, b: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
    """The product as ``parts`` products over slices of K (zero-padded to a multiple), summed."""
    accumulate = torch.promote_types(a.dtype, torch.float32)
    chunk = -(-s.k // parts)
    left = F.pad(s._logical(a, s.trans_a), (0, parts * chunk - s.k))  # (.., M, parts*chunk)
    right = F.pad(s._logical(b, s.trans_b), (0, 0, 0, parts * chunk - s.k))  # (.., parts*chunk, N)
    left = left.reshape(*left.shape[:-1], parts, chunk).movedim(-2, -3)  # (.., parts, M, chunk)
    right = right.reshape(*right.shape[:-2], parts, chunk, right.shape[-1])  # (.., parts, chunk, N)
    y = torch.matmul(left.to(accumulate), right.to(accumulate)).sum(-3)
    return s.epilogue(y, rest, accumulate).to(a.dtype)
