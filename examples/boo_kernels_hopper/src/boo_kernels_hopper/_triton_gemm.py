"""The Triton kernel (imported only where Triton is installed).

``c = a @ b (+ bias)`` for bf16 row-major ``a`` (M×K) and ``b`` (K×N, or N×K when
``TRANS_B``), float32 accumulation, one rounding to bf16. Every size is a compile-time
constant and each dimension a multiple of its block, so the kernel's only parameters are
the tensors' pointers (IREE's CUDA ABI: one pointer per binding). Tiles are visited in
groups of ``GROUP`` rows of tiles so that neighbouring programs share A and B in L2.
On sm_90 Triton turns ``tl.dot`` into wgmma and pipelines the loads ``num_stages`` deep.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def boo_hopper_gemm(a, b, bias, c, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, TRANS_B: tl.constexpr,
                    HAS_BIAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                    GROUP: tl.constexpr):
    tiles_m: tl.constexpr = M // BM
    tiles_n: tl.constexpr = N // BN
    per_group: tl.constexpr = GROUP * tiles_n
    pid = tl.program_id(0)
    first_m = (pid // per_group) * GROUP
    rows = min(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % per_group) % rows
    pid_n = (pid % per_group) // rows

    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_tile = a + offs_m[:, None] * K + offs_k[None, :]
    if TRANS_B:
        b_tile = b + offs_n[None, :] * K + offs_k[:, None]
        b_step: tl.constexpr = BK
    else:
        b_tile = b + offs_k[:, None] * N + offs_n[None, :]
        b_step: tl.constexpr = BK * N
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(K // BK):
        acc = tl.dot(tl.load(a_tile), tl.load(b_tile), acc)
        a_tile += BK
        b_tile += b_step
    if HAS_BIAS:
        acc += tl.load(bias + offs_n).to(tl.float32)[None, :]
    tl.store(c + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.bfloat16))
