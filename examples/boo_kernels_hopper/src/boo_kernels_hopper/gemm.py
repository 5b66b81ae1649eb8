"""Which matmuls this library serves, with what tiles, which of IREE's executables the
kernel replaces, and its PTX.

Served (:func:`problem_of`): a BOO ``matmul`` signature in bf16 or f16, row-major, of any
M, N, K and batch, either operand transposed, with its whole epilogue (alpha, beta and C,
a bias vector, relu/gelu/silu). IREE 3.13's module for such a signature holds one
executable computing the whole op on the op's tensors (A, B, [C], [bias], out), except
where both operands are transposed: IREE then writes A transposed into a transient first
and the product reads that (:func:`plan` finds the product either way; the transpose stays
IREE's). Everything here but :func:`generate` runs without Triton or a GPU.

Split K (:func:`split_k_plan`): where the matmul op offers its ``split_k`` formulation (K long,
M x N too small to fill the GPU) for a product with A stored transposed and B not (a linear
layer's weight gradient), IREE's module is one batched product of views of the stored
operands, P slices of K each, into a float32 transient, then IREE's sum over the slices with
the epilogue. The library replaces the batched product: a batch of P products with A
transposed and a float32 output.

Two kernels (``_triton_gemm``): a program per output tile reading through ``cp.async``, and,
where every stored row of A and B is a multiple of 16 bytes and there is one batch
(:func:`tma_serves`), a persistent kernel reading through tensor maps it builds on the device
(their memory: :mod:`.descriptor_scratch`). Each tile configuration of either is its own
candidate (:func:`configs_for`).

Stream-K (:func:`stream_k_serves`): where one program per tile would leave a round's SMs
idle (6,304 × 768 is 300 tiles of 128 × 128: 2.27 rounds on 132 SMs; a weight gradient's
3,072 × 768 is 144, 1.09), the TMA kernel with every tile's K steps shared out evenly
between 132 programs, split tiles added by the last of their programs to arrive. It needs
counters zeroed before each launch and memory for the split tiles' parts, which no module of
the matmul op has: its candidate brings its own module (:func:`stream_k_module`, a
``hal.dispatch.extern`` of the kernel).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

import torch

from .ptx import Kernel, bindings_of, compile_for_iree

#: The element types served, as IREE's tensor types name them.
DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
#: Triton's pointer type of each of IREE's element types the kernel reads or writes.
POINTER_TYPES = {"bf16": "*bf16", "f16": "*fp16", "f32": "*fp32"}
#: Streaming multiprocessors of an H100 SXM: one wave of programs.
SMS = 132


@dataclass(frozen=True)
class GemmConfig:
    """A tile configuration: block sizes, ``GROUP`` rows of tiles per L2 group, Triton's
    warps per program and software-pipelining depth."""

    bm: int = 128
    bn: int = 256
    bk: int = 64
    group: int = 8
    num_warps: int = 8
    num_stages: int = 4
    tma: bool = False  # the persistent kernel reading A and B through tensor maps (tma_serves)
    split_tail: bool = False  # the TMA kernel: the last round's tiles in pieces, where they fill it (tail_pieces)
    stream_k: bool = False  # the TMA kernel with the K steps shared out evenly (stream_k_serves)

    def __str__(self) -> str:
        return (f"{self.bm}x{self.bn}x{self.bk} group {self.group} warps {self.num_warps} "
                f"stages {self.num_stages}{' tma' if self.tma else ''}{' split tail' if self.split_tail else ''}"
                f"{' stream-K' if self.stream_k else ''}")

    @property
    def label(self) -> str:
        """The name its candidate carries: ``hopper_gemm_<label>``."""
        kind = "stream_k_" if self.stream_k else "tma_" if self.tma else ""
        return f"{kind}{self.bm}x{self.bn}"


#: The best of five configurations swept on an H100 for the three large benchmark shapes
#: (README.md), then smaller tiles for problems that would leave SMs idle with it.
DEFAULT = GemmConfig()
CONFIGS = (DEFAULT, GemmConfig(bm=128, bn=128), GemmConfig(bm=64, bn=128, num_warps=4),
           GemmConfig(bm=64, bn=64, num_warps=4))
#: Whether to offer the TMA kernel at all (bench.py --any-shape measures without it too).
OFFER_TMA = True
#: The persistent TMA kernel's tiles, each tried beside the same tiles of the other kernel: the
#: best of sweeps on an H200 and an H100 over ViT-B/16's and a decoder block's products
#: (docs/gpu.md; 128 × 256 four stages deep: 229,408 bytes of shared memory, 1-6% faster than
#: three on an H100 where its tiles fill whole rounds).
TMA_CONFIGS = {(128, 256): GemmConfig(num_stages=4, tma=True, split_tail=True),
               (128, 128): GemmConfig(bm=128, bn=128, num_stages=5, tma=True, split_tail=True)}
#: Throughput of one SM on a tile of each size, relative to 128×256 (larger tiles reuse each
#: loaded element more): rounded from sweeps (``bench.py --sweep``, docs/gpu.md); the TMA
#: kernel's 128×128 tiles, five stages deep, ran at 0.98 of its 128×256 ones (three stages) on
#: an H200 and at 0.89-0.91 of them (four stages) on an H100, on one to three whole rounds.
#: Only ranks the configurations, the tuner measures them.
_TILE_EFFICIENCY = {(128, 256): 1.0, (128, 128): 0.85, (64, 128): 0.7, (64, 64): 0.55}
_TMA_TILE_EFFICIENCY = {(128, 256): 1.0, (128, 128): 0.9}
#: A last round of pieces (:func:`tail_pieces`) in whole rounds of the tile's time, by tile and
#: pieces: the pieces, one round of them alone on an H100 (672 × 768 × 3,072, docs/gpu.md),
#: against one round of whole tiles (5,632 × 768 × 3,072): 64 × 256 halves 23.0 µs and 64 × 128
#: quarters 18.6 against 128 × 256's 41.0; 64 × 128 halves against 128 × 128's 22.6.
_TAIL_ROUND = {(128, 256, 2): 0.56, (128, 256, 4): 0.45, (128, 128, 2): 0.82}


@dataclass(frozen=True)
class GemmProblem:
    """The part of a matmul signature the kernel depends on."""

    m: int
    n: int
    k: int
    trans_b: bool
    bias: bool
    batch: int = 1
    trans_a: bool = False
    alpha: float = 1.0
    beta: float = 0.0
    activation: str | None = None
    dtype: str = "bf16"
    out_dtype: str = ""  # the output's type where it is not ``dtype``: "f32" for split-K's partial products

    @property
    def has_c(self) -> bool:
        return self.beta != 0.0

    def tiles(self, config: GemmConfig) -> int:
        """Programs per batch."""
        return math.ceil(self.m / config.bm) * math.ceil(self.n / config.bn)

    def bindings(self) -> list[str]:
        """The tensor types of the product's executable, in binding order: A and B as stored,
        [C], [bias], out (2-D for one batch, batch first otherwise). IREE binds the bias of a
        one-row product as a row (``1 x N``: a classifier's at batch 1)."""
        lead = (self.batch,) if self.batch > 1 else ()
        shapes = [lead + ((self.k, self.m) if self.trans_a else (self.m, self.k)),
                  lead + ((self.n, self.k) if self.trans_b else (self.k, self.n))]
        shapes += [lead + (self.m, self.n)] if self.has_c else []
        shapes += [(1, self.n) if self.m == 1 and not lead else (self.n,)] if self.bias else []
        types = [self.dtype] * len(shapes) + [self.out_dtype or self.dtype]
        shapes += [lead + (self.m, self.n)]
        return [f"tensor<{'x'.join(map(str, s))}x{t}>" for s, t in zip(shapes, types, strict=True)]


def problem_of(signature: Any) -> GemmProblem | None:
    """The problem for a BOO ``matmul`` signature this library serves (module docstring),
    else None. Duck-typed so that the library needs no op package."""
    if getattr(signature, "op_name", None) != "matmul":
        return None
    fields = ("m", "n", "k", "batch", "trans_a", "trans_b", "alpha", "beta", "col_major", "bias", "activation",
              "dtype")
    if not all(hasattr(signature, f) for f in fields):
        return None
    s = signature
    if s.dtype not in DTYPES or s.col_major or s.activation not in (None, "relu", "gelu", "silu"):
        return None
    return GemmProblem(s.m, s.n, s.k, bool(s.trans_b), bool(s.bias), batch=s.batch, trans_a=bool(s.trans_a),
                       alpha=float(s.alpha), beta=float(s.beta), activation=s.activation, dtype=DTYPES[s.dtype])


def configs_for(problem: GemmProblem) -> list[GemmConfig]:
    """Every configuration, the likely fastest first: the fewest waves of programs over the
    SMs, weighted by the guessed speed of a tile (a 768×768 product takes 64×128 tiles: 72
    programs instead of 18). BOO uses the first; ``boo tune`` times them all."""
    # With A stored transposed (a weight gradient's long K) the sweep found the TMA kernel no
    # faster than the same tiles' cp.async kernel: it ranks as those tiles do, behind them.
    tma_first = not problem.trans_a

    def cost(config: GemmConfig) -> float:
        waves: float = math.ceil(problem.tiles(config) * problem.batch / SMS)
        pieces = tail_pieces(problem, config)
        if pieces:  # the last round is one of pieces
            waves += _TAIL_ROUND[(config.bm, config.bn, pieces)] - 1
        efficiency = _TMA_TILE_EFFICIENCY if config.tma and tma_first else _TILE_EFFICIENCY
        return waves * config.bm * config.bn / efficiency[(config.bm, config.bn)]

    candidates = list(CONFIGS) + (list(TMA_CONFIGS.values()) if OFFER_TMA and tma_serves(problem) else [])
    position = [(c.bm, c.bn) for c in CONFIGS]
    ranked = sorted(candidates, key=lambda c: (cost(c), c.tma != tma_first, position.index((c.bm, c.bn))))
    # A reduction shorter than the pipeline needs fewer stages (less shared memory, same work).
    steps = math.ceil(problem.k / DEFAULT.bk)
    return [replace(c, num_stages=max(2, min(c.num_stages, steps))) for c in ranked]


def tma_serves(problem: GemmProblem) -> bool:
    """Whether the persistent TMA kernel computes ``problem``: one batch, and every stored
    row of A and B a multiple of 16 bytes (what a tensor map's strides must be)."""
    rows = [problem.m if problem.trans_a else problem.k, problem.k if problem.trans_b else problem.n]
    return problem.batch == 1 and all(length * 2 % 16 == 0 for length in rows)


#: The shortest reduction whose last round of tiles the TMA kernel cuts in pieces: on an H200
#: (``bench.py --sweep``, docs/gpu.md) halves gained 2-12% with K of 2,304 and 3,072, and with
#: K = 768, where a program's fixed costs weigh more, lost up to 5% on 128 × 128 tiles.
SPLIT_TAIL_FROM_K = 2048


def tail_pieces(problem: GemmProblem, config: GemmConfig) -> int:
    """Into how many pieces the TMA kernel with ``config`` cuts each tile of its last round (0:
    it does not): where it splits tails, K is long (:data:`SPLIT_TAIL_FROM_K`) and there is
    more than one round, into quarters (BM / 2 × BN / 2) where the tiles are 256 wide and the
    quarters fit one round, else into halves (BM / 2 rows) where those fit one. A quarter of
    a 128 × 128 tile (64 × 64) runs at a third of its speed, so those tiles are only halved."""
    tiles = problem.tiles(config)
    tail = tiles % SMS
    if not (config.tma and config.split_tail and problem.k >= SPLIT_TAIL_FROM_K and tiles > SMS and tail):
        return 0
    if config.bn >= 256 and 4 * tail <= SMS:
        return 4
    return 2 if 2 * tail <= SMS else 0


def tma_schedule(problem: GemmProblem, config: GemmConfig) -> dict[str, int]:
    """The TMA kernel's launch constants after the problem's own, in its parameters' order:
    its programs (one an SM, or one a tile where there are fewer), the column slices it
    stores a tile in, and the pieces of its last round (:func:`tail_pieces`)."""
    return {"PROGRAMS": min(SMS, problem.tiles(config)), "SPLIT": 2 if config.bn > 128 else 1,
            "TAIL_PIECES": tail_pieces(problem, config)}


#: Whether to offer the stream-K kernel at all (bench.py --stream-k measures without it).
OFFER_STREAM_K = True
#: The stream-K kernel's tiles: the TMA kernel's 128 × 128 (a program that adds a split tile's
#: parts holds two tiles of float32 at once: 128 × 256 would spill).
STREAM_K = GemmConfig(bm=128, bn=128, num_stages=5, tma=True, stream_k=True)
#: The shortest K (in steps of ``bk``) the stream-K kernel is offered for; the share of their
#: rounds the TMA kernel's tiles must leave idle for it to be offered at all, and to be offered
#: first (else it comes after the first configuration, for ``boo tune`` to time). First
#: nowhere: on an H100 it was right but 1.0-1.6x slower than the TMA kernel on every product
#: timed (docs/gpu.md, 2026-12-07, a second session); ``STREAM_K_FIRST_BELOW = 0.8`` tries it
#: first where 128 × 128 tiles fill less than 80% of their rounds.
STREAM_K_FROM_STEPS = 8
STREAM_K_FIRST_BELOW = 0.0
STREAM_K_OFFERED_BELOW = 0.9
#: The most dynamic shared memory a kernel may take on a Hopper GPU (227 KiB): what the
#: stream-K module declares, as its kernel's exact need is known only once Triton built it.
MAX_SHARED_BYTES = 232448


def round_filling(problem: GemmProblem, config: GemmConfig = STREAM_K) -> float:
    """The share of the programs' rounds a kernel of one program per ``config`` tile keeps busy
    (300 tiles on 132 SMs: 300 / 396 = 0.76)."""
    tiles = problem.tiles(config) * problem.batch
    return tiles / (math.ceil(tiles / SMS) * SMS)


def stream_k_serves(problem: GemmProblem) -> bool:
    """Whether the stream-K kernel computes ``problem`` and may gain: what the TMA kernel reads
    (:func:`tma_serves`), enough K steps to share, and tiles that leave a round's SMs idle
    (:data:`STREAM_K_OFFERED_BELOW`)."""
    steps = math.ceil(problem.k / STREAM_K.bk)
    total = problem.tiles(STREAM_K) * steps
    return (OFFER_STREAM_K and tma_serves(problem) and not problem.out_dtype and steps >= STREAM_K_FROM_STEPS
            and total >= SMS and total * SMS < 2**31 and round_filling(problem) < STREAM_K_OFFERED_BELOW)


def stream_k_first(problem: GemmProblem) -> bool:
    """Whether the stream-K kernel is the candidate BOO tries first."""
    return stream_k_serves(problem) and round_filling(problem) < STREAM_K_FIRST_BELOW


def stream_k_programs(problem: GemmProblem, config: GemmConfig = STREAM_K) -> int:
    """The stream-K kernel's programs: one an SM, or one a K step where there are fewer."""
    return min(SMS, problem.tiles(config) * math.ceil(problem.k / config.bk))


def stream_k_buffers(problem: GemmProblem, config: GemmConfig = STREAM_K) -> tuple[int, int]:
    """The stream-K kernel's counters (one 32-bit word a tile) and its partial tiles' bytes
    (two float32 tiles a program)."""
    return problem.tiles(config), 2 * stream_k_programs(problem, config) * config.bm * config.bn * 4


def stream_k_module(signature: Any, problem: GemmProblem, config: GemmConfig, export: str, obj: str) -> str:
    """The stream-K kernel's own module (``boo_core.plugin.extern_module``): one launch of
    ``export`` from ``obj`` on A, B, [C], [bias], the counters (zeroed), the partial tiles and
    out."""
    from boo_core.plugin import extern_module

    counters, partials = stream_k_buffers(problem, config)
    return extern_module(signature, export, obj, workgroup_size=(config.num_warps * 32, 1, 1),
                         workgroup_count=(stream_k_programs(problem, config), 1, 1),
                         workgroup_local_memory=MAX_SHARED_BYTES, zeroed_words=(counters,), scratch_bytes=(partials,))


def choose_config(problem: GemmProblem) -> GemmConfig:
    """The configuration BOO tries first."""
    return configs_for(problem)[0]


def plan(problem: GemmProblem, executables: Any) -> Any:
    """The executable of IREE's module that computes the product (the one whose bindings
    are the problem's; where both operands are transposed, the one reading IREE's transient
    of A transposed; for one row, A transposed read as the row it is). ValueError for a
    module of any other shape."""
    wanted = [problem.bindings()]
    if problem.trans_a and (problem.trans_b or problem.m == 1):
        wanted.append(replace(problem, trans_a=False).bindings())
    found = []
    for executable in executables:
        if len(executable.exports) == 1 and not executable.exports[0].constants:
            tensors = [b.tensor for b in executable.exports[0].bindings]
            found += [(executable, tensors == expected) for expected in wanted]
    matching = [executable for executable, ok in found if ok]
    if len(matching) != 1:
        raise ValueError(f"expected one executable with bindings {wanted[0]}, found {bindings_of(executables)}")
    return matching[0]


def split_k_plan(problem: GemmProblem, executables: Any) -> tuple[Any, GemmProblem]:
    """The executable of the ``split_k`` formulation's module that makes the partial products
    (module docstring), and its problem: P products of K / P with A transposed, out in
    float32. ValueError for a module of any other shape."""
    if problem.batch != 1 or not problem.trans_a or problem.trans_b:
        raise ValueError(f"split-K is served for one product with A transposed and B not, not {problem}")
    for executable in executables:
        exports = executable.exports
        if len(exports) != 1 or exports[0].constants or len(exports[0].bindings) != 3:
            continue
        tensors = [b.tensor for b in exports[0].bindings]
        parts_and_slice = re.fullmatch(r"tensor<(\d+)x(\d+)x\d+x\w+>", tensors[0])
        if parts_and_slice is None:
            continue
        parts, length = map(int, parts_and_slice.groups())
        split = replace(problem, k=length, batch=parts, alpha=1.0, beta=0.0, bias=False, activation=None,
                        out_dtype="f32")
        if parts > 1 and parts * length >= problem.k and tensors == split.bindings():
            return executable, split
    raise ValueError(f"no batched product of slices of K into float32 for {problem}, found {bindings_of(executables)}")


def kernel_problem(problem: GemmProblem, executable: Any) -> GemmProblem:
    """The problem as the replaced executable sees it (A already transposed by IREE, where
    it transposed it)."""
    tensors = [b.tensor for b in executable.exports[0].bindings]
    return problem if tensors == problem.bindings() else replace(problem, trans_a=False)


ORDER = ["a", "b", "c", "bias", "out", "M", "N", "K", "TRANS_A", "TRANS_B", "ALPHA", "BETA", "HAS_C", "HAS_BIAS",
         "ACT", "BM", "BN", "BK", "GROUP"]
STREAM_K_ORDER = ORDER[:4] + ["counters", "partials"] + ORDER[4:] + ["PROGRAMS"]


def generate(problem: GemmProblem, config: GemmConfig, entry: str) -> Kernel:
    """Compile the kernel for ``problem`` to sm_90a PTX named ``entry``, taking one pointer
    per binding of :meth:`GemmProblem.bindings`."""
    from ._triton_gemm import boo_hopper_gemm, boo_hopper_gemm_tma

    p = problem
    constants: dict[str, Any] = {
        "M": p.m, "N": p.n, "K": p.k, "TRANS_A": p.trans_a, "TRANS_B": p.trans_b, "ALPHA": p.alpha,
        "BETA": p.beta, "HAS_C": p.has_c, "HAS_BIAS": p.bias, "ACT": p.activation or "", "BM": config.bm,
        "BN": config.bn, "BK": config.bk, "GROUP": config.group}
    pointers = ["a", "b"] + (["c"] if p.has_c else []) + (["bias"] if p.bias else []) + ["out"]
    constants.update({name: None for name in ("c", "bias") if name not in pointers})
    types = dict.fromkeys(pointers, POINTER_TYPES[p.dtype])
    types["out"] = POINTER_TYPES[p.out_dtype or p.dtype]
    if config.stream_k:
        if not tma_serves(p) or p.out_dtype:
            raise ValueError(f"the stream-K kernel cannot compute {p}")
        from ._triton_gemm import boo_hopper_gemm_stream_k

        programs = stream_k_programs(p, config)
        pointers = pointers[:-1] + ["counters", "partials", "out"]
        types.update(counters="*i32", partials="*fp32")
        constants["PROGRAMS"] = programs
        compiled, ptx = compile_for_iree(boo_hopper_gemm_stream_k, pointers, constants, STREAM_K_ORDER,
                                         config.num_warps, config.num_stages, entry, types=types)
        if compiled.metadata.shared > MAX_SHARED_BYTES:
            raise ValueError(f"the stream-K kernel takes {compiled.metadata.shared} bytes of shared memory, "
                             f"more than its module declares ({MAX_SHARED_BYTES})")
        return Kernel(ptx, compiled.metadata.num_warps * 32, (programs, 1, 1), MAX_SHARED_BYTES)
    if config.tma:
        if not tma_serves(p):
            raise ValueError(f"the TMA kernel cannot read the operands of {p}")
        schedule = tma_schedule(p, config)
        constants.update(schedule)
        compiled, ptx = compile_for_iree(boo_hopper_gemm_tma, pointers, constants, ORDER + list(schedule),
                                         config.num_warps, config.num_stages, entry, types=types)
        grid: tuple[int, int, int] = (schedule["PROGRAMS"], 1, 1)
    else:
        compiled, ptx = compile_for_iree(boo_hopper_gemm, pointers, constants, ORDER, config.num_warps,
                                         config.num_stages, entry, types=types)
        grid = (p.tiles(config), p.batch, 1)
    return Kernel(ptx, compiled.metadata.num_warps * 32, grid, int(compiled.metadata.shared))
