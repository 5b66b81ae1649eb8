"""The weight gradient (conv mode ``wrw``) of 1x1 convolutions: which it serves, how IREE's
module for it is replaced, and PTX.

A served weight gradient (:func:`problem_of`): bf16, 2-D, channels-last (NHWC x and dY, KRSC
filter), one group, no dilation, not transposed, a 1x1 window with no padding (any stride),
multiples of 64 input and output channels. Then ``dw[k, c] = sum over pixels m of dY[m, k] *
x'[m, c]``, x' the pixels the strided window reads: a GEMM with M = K, N = C and a long
reduction over N*P*Q pixels (up to 100352), whose output is small: the reduction is split
(split-K) into float32 partial sums, added and rounded once to bf16 by a second kernel.

The float32 workspace comes from IREE's module of the op's ``im2col_splitN`` formulation
(boo_ops_conv ``_im2col_weight_gradient``: ``parts`` products of ``rows`` pixels each, then
their sum), which on CUDA has, per ResNet row (cross-compiled with ``boo dump``):

* (strided rows only) a copy of the pixels the window reads, x (N, H, W, C) -> a transient
  (N, P, Q, C): replaced by ``boo_hopper_subsample``;
* the partial products: a batch matmul of dY (parts, rows, K) and x' (parts, rows, C) into a
  float32 (parts, K, C) transient: replaced by ``boo_hopper_wgrad``, which writes the first
  ``splits`` (at most ``parts``) of those slices;
* their sum, (parts, K*C) float32 -> (K*C) bf16: replaced by ``boo_hopper_sum`` over the
  ``splits`` slices written.

Where parts * rows exceeds the pixels, IREE copies dY and x' into a transient padded with
zero rows before the matmul (stream copies and fills, no executables); the kernel reads the
pixels only. :func:`formulation_of` names the split whose rows tile the pixels exactly where
one does, so that the matmul reads the op's own tensors. :func:`plan` matches what it finds
(binding sizes, offsets, the matmul's operand order) and raises ValueError on anything else
(BOO then passes the substitution over and IREE's kernels serve). Everything here but
:func:`generate` runs without Triton or a GPU.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from . import conv

SMS = 132  # an H100 SXM's multiprocessors
SPLITS = (32, 128)  # the op's im2col_splitN formulations


@dataclass(frozen=True)
class WgradProblem:
    """A served 1x1 weight gradient: x (n, h, w, c), dY (n, p, q, k), stride (u, v)."""

    n: int
    h: int
    w: int
    c: int
    k: int
    u: int
    v: int
    p: int
    q: int

    @property
    def pixels(self) -> int:
        return self.n * self.p * self.q

    @property
    def strided(self) -> bool:
        return (self.u, self.v) != (1, 1)


@dataclass(frozen=True)
class WgradConfig:
    """BM output channels (of dY) by BN input channels (of x) per program, BK pixels per
    step, Triton's warps and stages; ``splits``: at most this many partial sums."""

    bm: int
    bn: int
    bk: int
    num_warps: int
    num_stages: int
    splits: int

    def __str__(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk} warps {self.num_warps} stages {self.num_stages} splits {self.splits}"


def problem_of(signature: Any) -> WgradProblem | None:
    """The problem for a BOO ``conv`` signature this module serves (module docstring), else None."""
    if getattr(signature, "mode", None) != "wrw" or not conv.is_plain_channels_last(signature):
        return None
    s = signature
    try:
        n, c, h, w = s.input_shape
        k, _, r, t = s.kernel_shape
        p, q = s.output_spatial
        (u, v), padding = s.stride, s.padding
    except (AttributeError, TypeError, ValueError):
        return None
    if (r, t) != (1, 1) or any(padding) or c % 64 or k % 64:
        return None
    if (p - 1) * u >= h or (q - 1) * v >= w:
        return None
    return WgradProblem(n, h, w, c, k, u, v, p, q)


def _parts(pixels: int, splits: int) -> tuple[int, int]:
    """(parts, rows) of the op's im2col_splitN (boo_ops_conv ``_split``): rows a multiple of 64."""
    rows = max(64, -(-pixels // (splits * 64)) * 64)
    return -(-pixels // rows), rows


def formulation_of(problem: WgradProblem) -> str:
    """The im2col_splitN whose parts tile the pixels exactly (its matmul then reads dY itself),
    else im2col_split32."""
    for splits in SPLITS:
        parts, rows = _parts(problem.pixels, splits)
        if parts * rows == problem.pixels:
            return f"im2col_split{splits}"
    return "im2col_split32"


def choose_config(problem: WgradProblem) -> WgradConfig:
    """The tiles (the largest that, with as many splits as the workspace holds, fill the
    GPU) and the splits (about one wave of programs)."""
    parts = _parts(problem.pixels, int(formulation_of(problem).removeprefix("im2col_split")))[0]
    options = [(bm, bn, warps) for bm, bn, warps in ((128, 128, 8), (128, 64, 4), (64, 64, 4))
               if problem.k % bm == 0 and problem.c % bn == 0]
    bm, bn, warps = next((o for o in options if (problem.k // o[0]) * (problem.c // o[1]) * parts >= SMS), options[-1])
    tiles = (problem.k // bm) * (problem.c // bn)
    return WgradConfig(bm, bn, 64, warps, 4, max(1, min(parts, SMS // tiles)))


# -- IREE's module --------------------------------------------------------------------------------

_SUBSPAN = re.compile(r"(%\w+) = hal\.interface\.binding\.subspan [^\n]*?binding\((\d+)\)[^\n]*?offset\((%\w+)\)"
                      r"[^\n]*?: !iree_tensor_ext\.dispatch\.tensor<(\w+):tensor<([0-9x]+)x(bf16|f32)>>")
_LOAD = re.compile(r"(%\w+) = iree_tensor_ext\.dispatch\.tensor\.load (%\w+),")
_MATMUL = re.compile(r"linalg\.batch_matmul [^\n]*?ins\((%\w+), (%\w+) :")
_INDEX_CONSTANT = re.compile(r"(%\w+) = arith\.constant (\d+) : index")
_BYTES = {"bf16": 2, "f32": 4}


@dataclass(frozen=True)
class Span:
    name: str  # the subspan's SSA value
    binding: int
    offset: int  # bytes
    shape: tuple[int, ...]
    dtype: str  # bf16, f32
    access: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def element_offset(self) -> int:
        if self.offset % 16:
            raise ValueError(f"a tensor at byte {self.offset}: not 16-byte aligned")
        return self.offset // _BYTES[self.dtype]


def spans(executable: Any) -> list[Span]:
    text = executable.text
    constants = {name: int(value) for name, value in _INDEX_CONSTANT.findall(text)}
    found = []
    for name, binding, offset, access, shape, dtype in _SUBSPAN.findall(text):
        if offset not in constants:
            raise ValueError(f"{executable.name}: binding {binding} at a dynamic offset {offset}")
        found.append(Span(name, int(binding), constants[offset], tuple(int(d) for d in shape.split("x")), dtype,
                          access))
    return found


@dataclass(frozen=True)
class Launch:
    """One replaced executable: the kernel, its pointers (binding order), their types,
    compile-time constants, grid, warps and stages."""

    executable: Any
    kernel: str  # "wgrad", "sum" or "subsample"
    pointers: tuple[str, ...]
    constants: dict[str, Any] = field(hash=False)
    grid: int
    num_warps: int
    num_stages: int
    types: dict[str, str] = field(default_factory=dict, hash=False)


def _bindings(executable: Any, found: list[Span]) -> list[int]:
    exports = executable.exports
    if len(exports) != 1 or exports[0].constants:
        raise ValueError(f"{executable.name}: expected one export with no constants")
    used = sorted({sp.binding for sp in found})
    if used != list(range(len(exports[0].bindings))):
        raise ValueError(f"{executable.name}: its tensors use bindings {used} of {len(exports[0].bindings)}")
    return used


WGRAD_ORDER = ["a", "b", "part", "DY_OFF", "X_OFF", "PART_OFF", "DY_IN_B", "X_IN_B", "M", "K", "C", "BM", "BN", "BK",
               "STEPS", "MASKED"]
SUM_ORDER = ["part", "out", "PART_OFF", "OUT_OFF", "NUMEL", "SPLITS", "BLOCK"]
SUBSAMPLE_ORDER = ["src", "dst", "DST_OFF", "N", "H", "W", "C", "P", "Q", "U", "V", "BP", "BC"]
SUM_BLOCK = 1024


def plan(problem: WgradProblem, config: WgradConfig, executables: tuple[Any, ...]) -> list[Launch]:
    """What replaces each of IREE's executables (module docstring); ValueError if the module
    is not one this library knows."""
    names = [e.name for e in executables]
    if len(executables) != (3 if problem.strided else 2):
        raise ValueError(f"{len(executables)} executables {names}: not a module shape this library knows")
    pb = problem
    kc = pb.k * pb.c
    launches: list[Launch] = []

    # The sum: (parts, K*C) float32 -> (K*C) bf16.
    total = executables[-1]
    found = spans(total)
    _bindings(total, found)
    if len(found) != 2 or [(sp.dtype, sp.access) for sp in found] != [("f32", "readonly"), ("bf16", "writeonly")]:
        raise ValueError(f"{total.name}: tensors {found}, expected a float32 read and a bf16 write")
    part_in, out = found
    if part_in.shape[1:] != (kc,) or out.shape != (kc,) or part_in.binding > out.binding:
        raise ValueError(f"{total.name}: tensors {part_in.shape} -> {out.shape}, expected (parts, {kc}) -> ({kc},)")
    parts = part_in.shape[0]

    # The partial products: dY (parts, rows, K) and x' (parts, rows, C) -> (parts, K, C) float32.
    mm = executables[-2]
    found = spans(mm)
    _bindings(mm, found)
    match = _MATMUL.search(mm.text)
    loads = dict(_LOAD.findall(mm.text))
    by_name = {sp.name: sp for sp in found}
    if match is None or any(loads.get(v) not in by_name for v in match.groups()) or len(found) != 3:
        raise ValueError(f"{mm.name}: not one batch matmul of two loaded tensors")
    dy, x = (by_name[loads[v]] for v in match.groups())
    [part] = [sp for sp in found if sp not in (dy, x)]
    rows = dy.shape[1] if len(dy.shape) == 3 else 0
    if (dy.dtype, x.dtype, part.dtype) != ("bf16", "bf16", "f32") or dy.shape != (parts, rows, pb.k) \
            or x.shape != (parts, rows, pb.c) or part.shape != (parts, pb.k, pb.c) or part.access == "readonly":
        raise ValueError(f"{mm.name}: {dy.shape} x {x.shape} -> {part.shape} is not this problem's "
                         f"({parts}, rows, {pb.k}) x ({parts}, rows, {pb.c}) -> ({parts}, {pb.k}, {pb.c})")
    if not (parts * rows >= pb.pixels > (parts - 1) * rows):
        raise ValueError(f"{mm.name}: {parts} parts of {rows} rows for {pb.pixels} pixels")
    if part.offset != part_in.offset:
        raise ValueError(f"{names}: the partial sums are written at byte {part.offset} and read at {part_in.offset}")
    inputs = sorted({dy.binding, x.binding})
    if part.binding in inputs or part.binding < inputs[-1]:
        raise ValueError(f"{mm.name}: the float32 tensor's binding {part.binding} is not after the inputs' {inputs}")
    splits = min(config.splits, parts)
    blocks = -(-pb.pixels // config.bk)
    steps = -(-blocks // splits)
    splits = -(-blocks // steps)
    tiles = (pb.k // config.bm) * (pb.c // config.bn)

    if problem.strided:
        gather = executables[0]
        found = spans(gather)
        _bindings(gather, found)
        expected = [(0, 0, (pb.n, pb.h, pb.w, pb.c), "readonly"), (1, x.offset, (pb.n, pb.p, pb.q, pb.c), "writeonly")]
        got = [(sp.binding, sp.offset if sp.binding else 0, sp.shape, "readonly" if sp.access == "readonly"
                else "writeonly") for sp in found]
        if got != expected or any(sp.dtype != "bf16" for sp in found) or found[0].offset:
            raise ValueError(f"{gather.name}: tensors {got}, expected {expected}")
        bc = min(64, pb.c)
        bp = 4096 // bc
        launches.append(Launch(gather, "subsample", ("src", "dst"),
                               {"DST_OFF": found[1].element_offset, "N": pb.n, "H": pb.h, "W": pb.w, "C": pb.c,
                                "P": pb.p, "Q": pb.q, "U": pb.u, "V": pb.v, "BP": bp, "BC": bc},
                               -(-pb.pixels // bp) * (pb.c // bc), 4, 1))

    constants = {"DY_OFF": dy.element_offset, "X_OFF": x.element_offset, "PART_OFF": part.element_offset,
                 "DY_IN_B": dy.binding != inputs[0], "X_IN_B": x.binding != inputs[0], "M": pb.pixels, "K": pb.k,
                 "C": pb.c, "BM": config.bm, "BN": config.bn, "BK": config.bk, "STEPS": steps,
                 "MASKED": splits * steps * config.bk != pb.pixels}
    pointers = ("a", "b", "part") if len(inputs) == 2 else ("a", "part")
    if len(inputs) == 1:
        constants["b"] = None
    launches.append(Launch(mm, "wgrad", pointers, constants, tiles * splits, config.num_warps, config.num_stages,
                           {"part": "*fp32"}))
    launches.append(Launch(total, "sum", ("part", "out"),
                           {"PART_OFF": part_in.element_offset, "OUT_OFF": out.element_offset, "NUMEL": kc,
                            "SPLITS": splits, "BLOCK": SUM_BLOCK}, -(-kc // SUM_BLOCK), 4, 1, {"part": "*fp32"}))
    return launches


# -- PTX ------------------------------------------------------------------------------------------


def generate(launch: Launch, entry: str) -> conv.Kernel:
    """Compile the kernel of one replaced executable to sm_90a PTX named ``entry``."""
    from ._triton_conv import boo_hopper_subsample, boo_hopper_sum, boo_hopper_wgrad

    fn, order = {"wgrad": (boo_hopper_wgrad, WGRAD_ORDER), "sum": (boo_hopper_sum, SUM_ORDER),
                 "subsample": (boo_hopper_subsample, SUBSAMPLE_ORDER)}[launch.kernel]
    compiled, ptx = conv._compile(fn, list(launch.pointers), dict(launch.constants), order, launch.num_warps,
                                  launch.num_stages, entry, launch.types)
    return conv.Kernel(ptx, compiled.metadata.num_warps * 32, launch.grid, int(compiled.metadata.shared))
