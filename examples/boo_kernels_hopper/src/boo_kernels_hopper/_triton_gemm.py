"""The Triton kernel (imported only where Triton is installed).

``out = act(alpha * op(a) @ op(b) + beta * c + bias)`` for 16-bit row-major operands of any
size, batched or not: ``a`` is M×K (K×M when ``TRANS_A``), ``b`` K×N (N×K when ``TRANS_B``),
``c`` and ``out`` M×N, each batch ``BATCH`` apart; float32 accumulation and epilogue, one
rounding. Every size and stride is a compile-time constant, so the kernel's only parameters
are the tensors' pointers (IREE's CUDA ABI: one pointer per binding). Edge tiles are masked
(rows and columns past M and N are neither read nor written, the K tail reads zeros;
sizes that are multiples of the tiles load without masks). One
program per output tile, visited in groups of ``GROUP`` rows of tiles so that neighbouring
programs share A and B in L2; the batch is the grid's second dimension. On sm_90 Triton turns
``tl.dot`` into wgmma and pipelines the loads ``num_stages`` deep.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._triton_shared import activation, grouped_tile


@triton.jit
def boo_hopper_gemm(a, b, c, bias, out, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                    TRANS_A: tl.constexpr, TRANS_B: tl.constexpr, ALPHA: tl.constexpr, BETA: tl.constexpr,
                    HAS_C: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, BM: tl.constexpr,
                    BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    tiles_m: tl.constexpr = (M + BM - 1) // BM
    tiles_n: tl.constexpr = (N + BN - 1) // BN
    batch = tl.program_id(1).to(tl.int64)
    pid_m, pid_n = grouped_tile(tl.program_id(0), tiles_m, tiles_n, GROUP)

    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    if TRANS_A:  # stored K×M
        a_tile = a + batch * (M * K) + offs_m[:, None] + offs_k[None, :] * M
        a_step: tl.constexpr = BK * M
    else:
        a_tile = a + batch * (M * K) + offs_m[:, None] * K + offs_k[None, :]
        a_step: tl.constexpr = BK
    if TRANS_B:  # stored N×K
        b_tile = b + batch * (K * N) + offs_n[None, :] * K + offs_k[:, None]
        b_step: tl.constexpr = BK
    else:
        b_tile = b + batch * (K * N) + offs_k[:, None] * N + offs_n[None, :]
        b_step: tl.constexpr = BK * N
    m_ok = offs_m < M
    n_ok = offs_n < N
    # Sizes that are multiples of the tiles need no masks (unmasked loads pipeline best).
    even_a: tl.constexpr = M % BM == 0 and K % BK == 0
    even_b: tl.constexpr = N % BN == 0 and K % BK == 0
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for step in range(0, (K + BK - 1) // BK):
        k_ok = offs_k < K - step * BK
        if even_a:
            a_values = tl.load(a_tile)
        else:
            a_values = tl.load(a_tile, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        if even_b:
            b_values = tl.load(b_tile)
        else:
            b_values = tl.load(b_tile, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a_values, b_values, acc)
        a_tile += a_step
        b_tile += b_step

    if ALPHA != 1.0:
        acc = acc * ALPHA
    mn_ok = m_ok[:, None] & n_ok[None, :]
    at = batch * (M * N) + offs_m[:, None] * N + offs_n[None, :]
    if HAS_C:
        acc += BETA * tl.load(c + at, mask=mn_ok, other=0.0).to(tl.float32)
    if HAS_BIAS:
        acc += tl.load(bias + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    acc = activation(acc, ACT)
    tl.store(out + at, acc.to(out.dtype.element_ty), mask=mn_ok)
