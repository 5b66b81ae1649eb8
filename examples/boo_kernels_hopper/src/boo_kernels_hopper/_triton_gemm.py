"""The Triton kernels (imported only where Triton is installed): ``boo_hopper_gemm``,
``boo_hopper_gemm_tma``, its persistent form fed by tensor maps for operands whose rows TMA
can read, and ``boo_hopper_gemm_stream_k``, that form with the tiles' K steps shared out
evenly between the programs (stream-K).

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

    store_tile(acc, c, bias, out, batch * (M * N), offs_m, offs_n, M, N, ALPHA, BETA, HAS_C, HAS_BIAS, ACT)


@triton.jit
def store_tile(acc, c, bias, out, first, offs_m, offs_n, M: tl.constexpr, N: tl.constexpr, ALPHA: tl.constexpr,
               BETA: tl.constexpr, HAS_C: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr):
    """The epilogue: ``act(ALPHA * acc + BETA * c + bias)`` stored at rows ``offs_m`` and
    columns ``offs_n`` of the M×N matrix ``first`` elements into ``out`` (and ``c``)."""
    m_ok = offs_m < M
    n_ok = offs_n < N
    if ALPHA != 1.0:
        acc = acc * ALPHA
    mn_ok = m_ok[:, None] & n_ok[None, :]
    at = first + offs_m[:, None] * N + offs_n[None, :]
    if HAS_C:
        acc += BETA * tl.load(c + at, mask=mn_ok, other=0.0).to(tl.float32)
    if HAS_BIAS:
        acc += tl.load(bias + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    acc = activation(acc, ACT)
    tl.store(out + at, acc.to(out.dtype.element_ty), mask=mn_ok)


@triton.jit
def boo_hopper_gemm_tma(a, b, c, bias, out, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                        TRANS_A: tl.constexpr, TRANS_B: tl.constexpr, ALPHA: tl.constexpr, BETA: tl.constexpr,
                        HAS_C: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, BM: tl.constexpr,
                        BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, PROGRAMS: tl.constexpr,
                        SPLIT: tl.constexpr, TAIL_PIECES: tl.constexpr):
    """The same product for one batch, persistent and fed by the Tensor Memory Accelerator:
    ``PROGRAMS`` programs take every ``PROGRAMS``-th output tile, A and B read through tensor
    maps built on the device (the edges filled with zeros by the hardware: no masks), the
    loop over tiles flattened so that the next tile's loads start under this tile's
    epilogue, which stores ``SPLIT`` column slices one after another. With ``TAIL_PIECES``
    (2 or 4), the tiles left over after the last whole round are each cut into that many
    pieces, one a program: halves of BM / 2 rows, or quarters of BM / 2 × BN / 2, so that the
    last round takes a piece's time (6,304 × 768 in 128 × 128 tiles: two rounds and 72
    halves, not three rounds; in 128 × 256 tiles one round and 72 quarters). The host makes
    sure the pieces fit one round (``gemm.tail_pieces``). The operands' rows must be 16-byte
    multiples (``gemm.tma_serves``)."""
    tiles_m: tl.constexpr = (M + BM - 1) // BM
    tiles_n: tl.constexpr = (N + BN - 1) // BN
    tiles: tl.constexpr = tiles_m * tiles_n
    tail: tl.constexpr = (tiles % PROGRAMS) * (TAIL_PIECES > 1)
    a_map = _a_map(a, M, K, BM, BK, TRANS_A)
    b_map = _b_map(b, N, K, BN, BK, TRANS_B)
    for tile in tl.range(tl.program_id(0), tiles - tail, PROGRAMS, flatten=True):
        pid_m, pid_n = grouped_tile(tile, tiles_m, tiles_n, GROUP)
        acc = _tile_product(a_map, b_map, pid_m * BM, pid_n * BN, K, BM, BN, BK, TRANS_A, TRANS_B)
        offs_m = pid_m * BM + tl.arange(0, BM)
        if SPLIT == 1:
            store_tile(acc, c, bias, out, 0, offs_m, pid_n * BN + tl.arange(0, BN), M, N, ALPHA, BETA, HAS_C,
                       HAS_BIAS, ACT)
        else:
            left, right = acc.reshape(BM, 2, BN // 2).permute(0, 2, 1).split()
            store_tile(left, c, bias, out, 0, offs_m, pid_n * BN + tl.arange(0, BN // 2), M, N, ALPHA, BETA,
                       HAS_C, HAS_BIAS, ACT)
            store_tile(right, c, bias, out, 0, offs_m, pid_n * BN + BN // 2 + tl.arange(0, BN // 2), M, N, ALPHA,
                       BETA, HAS_C, HAS_BIAS, ACT)
    if tail > 0:
        piece = tl.program_id(0)
        rows: tl.constexpr = BM // 2
        cols: tl.constexpr = BN // (TAIL_PIECES // 2)
        if piece < TAIL_PIECES * tail:
            pid_m, pid_n = grouped_tile(tiles - tail + piece // TAIL_PIECES, tiles_m, tiles_n, GROUP)
            row = pid_m * BM + (piece % 2) * rows
            col = pid_n * BN + ((piece % TAIL_PIECES) // 2) * cols
            if row < M:  # a piece wholly past the last row (its tile's lower half) has nothing to do
                piece_a = _a_map(a, M, K, rows, BK, TRANS_A)
                piece_b = _b_map(b, N, K, cols, BK, TRANS_B)
                acc = _tile_product(piece_a, piece_b, row, col, K, rows, cols, BK, TRANS_A, TRANS_B)
                store_tile(acc, c, bias, out, 0, row + tl.arange(0, rows), col + tl.arange(0, cols), M, N,
                           ALPHA, BETA, HAS_C, HAS_BIAS, ACT)


@triton.jit
def _a_map(a, M: tl.constexpr, K: tl.constexpr, ROWS: tl.constexpr, BK: tl.constexpr, TRANS_A: tl.constexpr):
    """A tensor map reading blocks of ROWS rows of op(A) (stored K×M where ``TRANS_A``)."""
    if TRANS_A:
        a_map = tl.make_tensor_descriptor(a, shape=[K, M], strides=[M, 1], block_shape=[BK, ROWS])
    else:
        a_map = tl.make_tensor_descriptor(a, shape=[M, K], strides=[K, 1], block_shape=[ROWS, BK])
    return a_map


@triton.jit
def _b_map(b, N: tl.constexpr, K: tl.constexpr, COLS: tl.constexpr, BK: tl.constexpr, TRANS_B: tl.constexpr):
    """A tensor map reading blocks of COLS columns of op(B) (stored N×K where ``TRANS_B``)."""
    if TRANS_B:
        b_map = tl.make_tensor_descriptor(b, shape=[N, K], strides=[K, 1], block_shape=[COLS, BK])
    else:
        b_map = tl.make_tensor_descriptor(b, shape=[K, N], strides=[N, 1], block_shape=[BK, COLS])
    return b_map


@triton.jit
def _tile_product(a_map, b_map, row, col, K: tl.constexpr, ROWS: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr, TRANS_A: tl.constexpr, TRANS_B: tl.constexpr):
    """The float32 ROWS × BN block of op(A) @ op(B) at (``row``, ``col``)."""
    return _steps_product(a_map, b_map, row, col, 0, (K + BK - 1) // BK, ROWS, BN, BK, TRANS_A, TRANS_B)

@triton.jit
def boo_hopper_gemm_stream_k(a, b, c, bias, counters, partials, out, M: tl.constexpr, N: tl.constexpr,
                             K: tl.constexpr, TRANS_A: tl.constexpr, TRANS_B: tl.constexpr, ALPHA: tl.constexpr,
                             BETA: tl.constexpr, HAS_C: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                             PROGRAMS: tl.constexpr):
    """The product of the TMA kernel shared out by K steps: the tiles' steps, all of them in a
    row, cut into ``PROGRAMS`` equal runs, one a program (every SM busy to the end, however
    few tiles there are or however they fall into waves). A tile a run covers whole is stored
    as the TMA kernel stores it. A tile split between runs: each of its programs writes its
    float32 part to its own area of ``partials`` (two a program: its run's first and last
    tile), then counts itself in ``counters`` (zeroed before the launch, one a tile); the
    program that arrives last adds the parts in the order of the runs (the same sum whoever
    arrives last) and stores the tile with the epilogue. No program waits for another."""
    tiles_m: tl.constexpr = (M + BM - 1) // BM
    tiles_n: tl.constexpr = (N + BN - 1) // BN
    steps: tl.constexpr = (K + BK - 1) // BK
    total: tl.constexpr = tiles_m * tiles_n * steps
    a_map = _a_map(a, M, K, BM, BK, TRANS_A)
    b_map = _b_map(b, N, K, BN, BK, TRANS_B)
    pid = tl.program_id(0)
    start = pid * total // PROGRAMS
    end = (pid + 1) * total // PROGRAMS
    cell = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    at = start
    while at < end:
        tile = at // steps
        first = at - tile * steps
        last = tl.minimum(steps, first + end - at)
        pid_m, pid_n = grouped_tile(tile, tiles_m, tiles_n, GROUP)
        acc = _steps_product(a_map, b_map, pid_m * BM, pid_n * BN, first, last, BM, BN, BK, TRANS_A, TRANS_B)
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_n = pid_n * BN + tl.arange(0, BN)
        if first == 0 and last == steps:
            store_tile(acc, c, bias, out, 0, offs_m, offs_n, M, N, ALPHA, BETA, HAS_C, HAS_BIAS, ACT)
        else:
            own = 2 * pid + (at != start).to(tl.int32)
            tl.store(partials + own.to(tl.int64) * (BM * BN) + cell, acc, cache_modifier=".cg")
            tl.debug_barrier()  # every thread's part written before the count says so
            arrived = tl.atomic_add(counters + tile, 1, sem="acq_rel", scope="gpu")
            first_run = _run_of(tile * steps, total, PROGRAMS)
            last_run = _run_of(tile * steps + steps - 1, total, PROGRAMS)
            if arrived == last_run - first_run:
                acc = tl.zeros((BM, BN), dtype=tl.float32)
                for run in range(first_run, last_run + 1):
                    area = 2 * run + ((run * total // PROGRAMS) // steps != tile).to(tl.int32)
                    acc += tl.load(partials + area.to(tl.int64) * (BM * BN) + cell, cache_modifier=".cg")
                store_tile(acc, c, bias, out, 0, offs_m, offs_n, M, N, ALPHA, BETA, HAS_C, HAS_BIAS, ACT)
        at += last - first


@triton.jit
def _run_of(step, TOTAL: tl.constexpr, PROGRAMS: tl.constexpr):
    """The run (program) holding ``step`` of the TOTAL steps cut into PROGRAMS runs, run p
    starting at ``p * TOTAL // PROGRAMS``."""
    return ((step + 1) * PROGRAMS - 1) // TOTAL


@triton.jit
def _steps_product(a_map, b_map, row, col, first, last, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                   TRANS_A: tl.constexpr, TRANS_B: tl.constexpr):
    """The float32 BM × BN block of op(A) @ op(B) at (``row``, ``col``) over K steps
    ``first`` to ``last`` (exclusive)."""
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for step in range(first, last):
        if TRANS_A:
            a_values = a_map.load([step * BK, row]).T
        else:
            a_values = a_map.load([row, step * BK])
        if TRANS_B:
            b_values = b_map.load([col, step * BK]).T
        else:
            b_values = b_map.load([step * BK, col])
        acc = tl.dot(a_values, b_values, acc)
    return acc
