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
* ``split_k`` (CUDA, 16-bit, K long and M x N too small to fill the GPU:
  :func:`cuda_split_k_parts`, after ``default``): the same, float32 partial products of
  slices of K summed in a second dispatch. Where A is stored transposed and B is not (a
  linear layer's weight gradient), each slice is a view of the stored operands, so the
  partial products are one batched product of the inputs as they are: the module a kernel
  library's split-K kernel replaces (the Hopper library's ``split_k`` substitution).

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
#: On CUDA: output tiles (of :data:`CUDA_TILE` x :data:`CUDA_TILE`) a product must leave to
#: fewer than half of :data:`CUDA_SMS` streaming multiprocessors, and K at least
#: :data:`CUDA_SPLIT_K_FROM`, for ``split_k`` to be offered; each slice of K is at least
#: :data:`CUDA_MIN_SLICE` long, and a split in fewer than 4 slices leaves slices at least
#: :data:`CUDA_LONG_SLICE` long (an H100 SXM has 132 SMs). Weight gradients on an H100 with the
#: Hopper library's split-K kernel (examples/boo_kernels_hopper/bench.py --long-k), µs,
#: unsplit -> split (cuBLAS): 96x384, K 100,352, 49 slices 351.0 -> 43.2 (39.1); 192x768,
#: K 25,088, 8 slices 91.0 -> 27.5 (23.9); 1024x1024, K 32,768, 2 slices 138.8 -> 102.2 (93.8);
#: but 768x768, K 6,304, and 384x1536, K 6,272, in 2 slices 23.2 -> 23.5 and 21.5 -> 22.6.
CUDA_SMS = 132
CUDA_TILE = 128
CUDA_SPLIT_K_FROM = 4096
CUDA_MIN_SLICE = 512
CUDA_LONG_SLICE = 8192


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
    parts = cuda_split_k_parts(s)
    split = () if parts is None else (
        Formulation("split_k", computation=lambda *a: _split_k(s, parts, *a),
                    description=f"{parts} float32 products over slices of K, summed"),)
    if racy_class(s):
        return (padded, default, *split, in_float32)
    return (default, *split, padded, in_float32)


def cuda_split_k_parts(signature: MatmulSignature) -> int | None:
    """How many slices of K ``split_k`` cuts a 16-bit CUDA product into: enough that the
    output tiles of all slices fill the SMs about once, a divisor of K where one is near
    (no padded slice), each at least :data:`CUDA_MIN_SLICE` long; None where the tiles
    alone fill half the SMs, K is short (:data:`CUDA_SPLIT_K_FROM`), or fewer than 4 slices
    would be shorter than :data:`CUDA_LONG_SLICE` (the sum's dispatch then costs what the
    split gains)."""
    s = signature
    tiles = s.batch * -(-s.m // CUDA_TILE) * -(-s.n // CUDA_TILE)
    if s.dtype == torch.float32 or s.col_major or s.k < CUDA_SPLIT_K_FROM or 2 * tiles >= CUDA_SMS:
        return None
    wanted = max(2, min(CUDA_SMS // tiles, s.k // CUDA_MIN_SLICE))
    divisors = [p for p in range(2, s.k // CUDA_MIN_SLICE + 1) if s.k % p == 0 and wanted / 2 <= p <= 1.25 * wanted]
    parts = min(divisors, key=lambda p: abs(p - wanted)) if divisors else wanted
    return parts if parts >= 4 or s.k // parts >= CUDA_LONG_SLICE else None


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
    left, right = s._logical(a, s.trans_a), s._logical(b, s.trans_b)  # (.., M, K), (.., K, N)
    if parts * chunk != s.k:
        left = F.pad(left, (0, parts * chunk - s.k))
        right = F.pad(right, (0, 0, 0, parts * chunk - s.k))
    left = left.reshape(*left.shape[:-1], parts, chunk).movedim(-2, -3)  # (.., parts, M, chunk)
    right = right.reshape(*right.shape[:-2], parts, chunk, right.shape[-1])  # (.., parts, chunk, N)
    y = torch.matmul(left.to(accumulate), right.to(accumulate)).sum(-3)
    return s.epilogue(y, rest, accumulate).to(a.dtype)
