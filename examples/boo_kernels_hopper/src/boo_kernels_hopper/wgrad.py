"""The weight gradient (conv mode ``wrw``): which it serves, how IREE's module for it is
replaced, and PTX.

A served weight gradient (:func:`problem_of`): bf16, 2-D, channels-last (NHWC x and dY, KRSC
filter), one group, no dilation, not transposed, padding smaller than the window, a multiple
of 64 output channels and of 64 input channels, or, for a window larger than 1x1, any number
of input channels (the 3-channel stem), whose columns the kernel gathers one by one. Then
``dw[k, (r, s, c)] = sum over pixels m of dY[m, k] * X[m, (r, s, c)]``, X the windows'
columns (for a 1x1 window, the pixels it reads): a GEMM with M = K, N = R*S*C and a long
reduction over N*P*Q pixels (up to 401408), whose output is small: the reduction is split
(split-K) into float32 partial sums, added and rounded once to bf16 by a second kernel.

The float32 workspace comes from IREE's module of the op's ``im2col_splitN`` formulation
(boo_ops_conv ``_im2col_weight_gradient``: ``parts`` products of ``rows`` pixels each, then
their sum), which on CUDA has, per ResNet row (cross-compiled with ``boo dump``):

* how X is made. A 1x1 window: nothing (X is x), or for a strided one a copy of the pixels it
  reads, x (N, H, W, C) -> a transient (N, P, Q, C), replaced by ``boo_hopper_subsample``.
  A larger window: x transposed into a padded channels-first transient (N, C, HP, WP) (the
  padded extent the windows read), transposed again to (N, HP*WP, C), then one copy per tap
  of its strided pixels into the columns (N, P, Q, R*S, C). Replaced by ``boo_hopper_pad``
  writing the first transient as the padded channels-last image (the same number of
  elements), ``boo_hopper_copy`` copying it to the second, and the taps' copies each moving
  one chunk of it to the start of the columns' buffer: the products then read the image
  where IREE's read the columns, R*S times smaller (an implicit GEMM);
* the partial products: a batch matmul of dY (parts, rows, K) and X (parts, rows, R*S*C)
  into a float32 (parts, K, R*S*C) transient: replaced by ``boo_hopper_wgrad``, which writes
  the first ``splits`` (at most ``parts``) of those slices;
* their sum, (parts, K*R*S*C) float32 -> (K*R*S*C) bf16 (= KRSC dw): replaced by
  ``boo_hopper_sum`` over the ``splits`` slices written.

Where that module moves x or dY (:func:`reads_x_itself_first`: every window of several taps
over a multiple of 64 channels, strided 1x1 windows, pixels no split tiles), the op's
``implicit_split`` module comes first (:func:`implicit_plan`): two executables, the products (one contraction
over x and dY as stored, x's padding fused in, into float32 partial sums of parts of the
batch) and their sum. ``boo_hopper_wgrad`` replaces the products reading x itself, the
padding applied by masked loads: the image moves nowhere.

Where parts * rows exceeds the pixels, IREE copies dY and X into a transient padded with
zero rows before the matmul (stream copies and fills, no executables); the kernel reads the
pixels only (and the image, copied there as the columns would have been).
:func:`formulation_of` names the split whose rows tile the pixels exactly where one does, so
that the matmul reads the op's own tensors. :func:`plan` matches what it finds (binding
sizes, offsets, the matmul's operand order) and raises ValueError on anything else (BOO then
passes the substitution over and IREE's kernels serve). Everything here but
:func:`generate` runs without Triton or a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from . import conv
from .iree_subspans import Span, spans
from .ptx import Kernel, compile_for_iree

SMS = 132  # an H100 SXM's multiprocessors
SPLITS = (32, 128)  # the op's im2col_splitN formulations
#: The least share of the last wave's SMs a configuration's programs must keep busy, on
#: average over its waves. H100, 512->512 3x3 weight gradients at 14x14/2 and 7x7
#: (implicit_split): 144 tiles of 128x128 (2 waves, 55%) 38.9 and 40.2 us, 288 of 128x64
#: (3 waves, 73%) 30.9 and 31.5 us.
MIN_WAVE_EFFICIENCY = 0.7


@dataclass(frozen=True)
class WgradProblem:
    """A served weight gradient: x (n, h, w, c), dY (n, p, q, k), stride (u, v), an r x s
    window with padding (ph, pw)."""

    n: int
    h: int
    w: int
    c: int
    k: int
    u: int
    v: int
    p: int
    q: int
    r: int = 1
    s: int = 1
    ph: int = 0
    pw: int = 0

    @property
    def pixels(self) -> int:
        return self.n * self.p * self.q

    @property
    def strided(self) -> bool:
        return (self.u, self.v) != (1, 1)

    @property
    def taps(self) -> int:
        return self.r * self.s

    @property
    def columns(self) -> int:
        """The GEMM's N: dw's elements per output channel, (r, s, c)."""
        return self.taps * self.c

    @property
    def hp(self) -> int:
        """Rows of the padded image the windows read (padding above, none past the last window)."""
        return (self.p - 1) * self.u + self.r

    @property
    def wp(self) -> int:
        return (self.q - 1) * self.v + self.s

    @property
    def image_numel(self) -> int:
        return self.n * self.hp * self.wp * self.c

    def tiles(self, bm: int, bn: int) -> int:
        """Output tiles of BM channels of dY by BN columns (the last columns' tile partial)."""
        return (self.k // bm) * -(-self.columns // bn)

    @property
    def gathered(self) -> bool:
        """Whether the kernel reads the columns one by one (channels not a multiple of 64)."""
        return self.c % 64 != 0


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

    @property
    def tiles(self) -> WgradTiles:
        """The configuration without its splits."""
        return WgradTiles(self.bm, self.bn, self.num_warps, self.num_stages)


def problem_of(signature: Any) -> WgradProblem | None:
    """The problem for a BOO ``conv`` signature this module serves (module docstring), else None."""
    found = conv.plain_geometry(signature) if getattr(signature, "mode", None) == "wrw" else None
    if found is None:
        return None
    n, c, h, w, k, r, t, p, q, u, v, ph, pw = found
    if k % 64 or (c % 64 and r * t == 1) or ph >= r or pw >= t or min(p, q) < 1:
        return None
    problem = WgradProblem(n, h, w, c, k, u, v, p, q, r, t, ph, pw)
    if problem.taps == 1 and (problem.hp > h or problem.wp > w):
        return None
    return problem


def _parts(pixels: int, splits: int) -> tuple[int, int]:
    """(parts, rows) of the op's im2col_splitN (boo_ops_conv ``_split``): rows a multiple of 64."""
    rows = max(64, -(-pixels // (splits * 64)) * 64)
    return -(-pixels // rows), rows


def _tiling_split(problem: WgradProblem) -> str | None:
    """The im2col_splitN whose parts tile the pixels exactly, if one does."""
    for splits in SPLITS:
        parts, rows = _parts(problem.pixels, splits)
        if parts * rows == problem.pixels:
            return f"im2col_split{splits}"
    return None


def formulation_of(problem: WgradProblem) -> str:
    """The im2col_splitN whose parts tile the pixels exactly (its matmul then reads dY itself),
    else im2col_split32."""
    return _tiling_split(problem) or "im2col_split32"


#: Tiles the weight gradient's kernel runs: (BM, BN, warps), the first that fills the GPU chosen.
TILES = ((128, 128, 8), (128, 64, 4), (64, 64, 4))
#: The tile of a problem whose columns are gathered (the 3-channel stem: 147 columns, five
#: tiles of 32), with every part of the workspace a split: its programs wait on scalar
#: gathers and two share a multiprocessor, so more of them is faster than one wave. H200,
#: 2026-11-28 (``bench_wgrad.py --only "3->64"``, through BOO, the implicit module's 32
#: parts): 64x32 with 32 splits 157.7 us, 26 splits 180.8; 64x16 (26) 185.4; 64x64 (32) 197.0.
GATHERED_TILE = (64, 32, 4)


@dataclass(frozen=True)
class WgradTiles:
    """A weight gradient's tiles without its splits (those follow from the module's parts)."""

    bm: int
    bn: int
    num_warps: int
    num_stages: int

    def __str__(self) -> str:
        return f"{self.bm}x{self.bn}_w{self.num_warps}_s{self.num_stages}"


def choose_config(problem: WgradProblem, parts: int | None = None, tiles: WgradTiles | None = None
                  ) -> WgradConfig:
    """The tiles (the largest that, with as many splits as the workspace holds, fill the
    GPU; a tile's columns within one tap), or ``tiles``, and the splits (about one wave of
    programs); for gathered columns :data:`GATHERED_TILE` and every part. ``parts``: how
    many partial sums the workspace holds (default: the parts of :func:`formulation_of`'s
    module)."""
    if parts is None:
        parts = _parts(problem.pixels, int(formulation_of(problem).removeprefix("im2col_split")))[0]

    def splits(bm: int, bn: int) -> int:
        if problem.gathered:  # every part (GATHERED_TILE)
            return parts
        return max(1, min(parts, SMS // problem.tiles(bm, bn)))

    if tiles is not None:
        return WgradConfig(tiles.bm, tiles.bn, 64, tiles.num_warps, tiles.num_stages, splits(tiles.bm, tiles.bn))
    if problem.gathered:
        bm, bn, warps = GATHERED_TILE
        return WgradConfig(bm, bn, 64, warps, 4, splits(bm, bn))
    options = [option for option in TILES if _fits(problem, *option[:2])]

    def fills(bm: int, bn: int) -> bool:  # enough programs, and a last wave not mostly idle
        tiles = problem.tiles(bm, bn)
        programs = tiles * splits(bm, bn)
        return tiles * parts >= SMS and programs / (-(-programs // SMS) * SMS) >= MIN_WAVE_EFFICIENCY

    bm, bn, warps = next((o for o in options if fills(o[0], o[1])), options[-1])
    return WgradConfig(bm, bn, 64, warps, 4, splits(bm, bn))


def _fits(problem: WgradProblem, bm: int, bn: int) -> bool:
    return problem.k % bm == 0 and (problem.c % bn == 0 or problem.gathered)


def alternatives(problem: WgradProblem, chosen: WgradConfig) -> list[WgradTiles]:
    """Other tiles ``boo tune`` times beside ``chosen``: every tile shape that fits, with 3
    and 4 pipeline stages (their splits again about one wave)."""
    shapes = (GATHERED_TILE, *TILES) if problem.gathered else TILES
    found = [WgradTiles(bm, bn, warps, stages) for bm, bn, warps in shapes if _fits(problem, bm, bn)
             for stages in (4, 3)]
    return [tiles for tiles in found if tiles != chosen.tiles]


# -- IREE's module --------------------------------------------------------------------------------

_LOAD = re.compile(r"(%\w+) = iree_tensor_ext\.dispatch\.tensor\.load (%\w+),")
_MATMUL = re.compile(r"linalg\.batch_matmul [^\n]*?ins\((%\w+), (%\w+) :")


@dataclass(frozen=True)
class Launch:
    """One replaced executable: the kernel, its pointers (binding order), their types,
    compile-time constants, grid, warps and stages."""

    executable: Any
    kernel: str  # "wgrad", "sum", "subsample", "pad" or "copy"
    pointers: tuple[str, ...]
    constants: dict[str, Any] = field(hash=False)
    grid: int
    num_warps: int
    num_stages: int
    types: dict[str, str] = field(default_factory=dict, hash=False)


def check_bindings(executable: Any, found: list[Span]) -> list[int]:
    exports = executable.exports
    if len(exports) != 1 or exports[0].constants:
        raise ValueError(f"{executable.name}: expected one export with no constants")
    used = sorted({sp.binding for sp in found})
    if used != list(range(len(exports[0].bindings))):
        raise ValueError(f"{executable.name}: its tensors use bindings {used} of {len(exports[0].bindings)}")
    return used


WGRAD_ORDER = ["a", "b", "part", "DY_OFF", "X_OFF", "PART_OFF", "DY_IN_B", "X_IN_B", "M", "K", "C", "BM", "BN", "BK",
               "STEPS", "MASKED", "R", "S", "SH", "SW", "P", "Q", "HP", "WP", "GATHER", "PAD_H", "PAD_W"]
SUM_ORDER = ["part", "out", "PART_OFF", "OUT_OFF", "NUMEL", "SPLITS", "BLOCK"]
SUBSAMPLE_ORDER = ["src", "dst", "DST_OFF", "N", "H", "W", "C", "P", "Q", "U", "V", "BP", "BC"]
COPY_ORDER = ["src", "dst", "SRC_OFF", "DST_OFF", "START", "COUNT", "BLOCK"]
SUM_BLOCK = 1024
COPY_BLOCK = 4096


def _expect(executable: Any, wanted: list[tuple[int, tuple[int, ...], str]]) -> list[Span]:
    """The executable's tensors, which must be ``wanted`` (binding, shape, readonly or
    written), all bf16."""
    found = spans(executable)
    check_bindings(executable, found)
    got = [(sp.binding, sp.shape, "readonly" if sp.access == "readonly" else "written") for sp in found]
    if got != wanted or any(sp.dtype != "bf16" for sp in found):
        raise ValueError(f"{executable.name}: tensors {got}, expected {wanted} (bf16)")
    return found


def copy_launch(executable: Any, src: Span, dst: Span, start: int, count: int) -> Launch:
    return Launch(executable, "copy", ("src", "dst"),
                  {"SRC_OFF": src.element_offset, "DST_OFF": dst.element_offset, "START": start, "COUNT": count,
                   "BLOCK": COPY_BLOCK}, max(1, -(-count // COPY_BLOCK)), 4, 1)


def _subsample_launches(pb: WgradProblem, movers: tuple[Any, ...], x: Span) -> list[Launch]:
    """A strided 1x1 window's pixels, copied by IREE into X: the same copy, in channels-last blocks."""
    [gather] = movers
    found = _expect(gather, [(0, (pb.n, pb.h, pb.w, pb.c), "readonly"), (1, (pb.n, pb.p, pb.q, pb.c), "written")])
    if found[0].offset or found[1].offset != x.offset:
        raise ValueError(f"{gather.name}: reads byte {found[0].offset} and writes byte {found[1].offset}, "
                         f"expected 0 and {x.offset} (the products' X)")
    bc = min(64, pb.c)
    bp = 4096 // bc
    return [Launch(gather, "subsample", ("src", "dst"),
                   {"DST_OFF": found[1].element_offset, "N": pb.n, "H": pb.h, "W": pb.w, "C": pb.c, "P": pb.p,
                    "Q": pb.q, "U": pb.u, "V": pb.v, "BP": bp, "BC": bc},
                   -(-pb.pixels // bp) * (pb.c // bc), 4, 1)]


def _image_launches(pb: WgradProblem, movers: tuple[Any, ...], x: Span, direct: bool) -> list[Launch]:
    """IREE's columns of a larger window (module docstring) become the padded channels-last
    image at the start of the columns' buffer: pad x into the first transient, copy that to
    the second, each tap's copy moves one chunk of it. ``direct``: the products read the
    columns where the taps' copies write them (else through a copy IREE makes)."""
    pad, flatten, *taps = movers
    image = (pb.n, pb.hp, pb.wp, pb.c)
    found = _expect(pad, [(0, (pb.n, pb.h, pb.w, pb.c), "readonly"), (1, (pb.n, pb.c, pb.hp, pb.wp), "written")])
    if found[0].offset:
        raise ValueError(f"{pad.name}: x at byte {found[0].offset}, expected 0")
    padded = found[1]
    pixels = pb.hp * pb.wp
    found = _expect(flatten, [(0, (pb.n, pb.c, pixels), "readonly"), (1, (pb.n, pixels, pb.c), "written")])
    if found[0].offset != padded.offset:
        raise ValueError(f"{flatten.name}: reads byte {found[0].offset}, the padded transient is at {padded.offset}")
    first, flat = found
    numel = pb.image_numel
    if numel > x.numel:
        raise ValueError(f"the image ({numel} elements) does not fit in the columns ({x.numel})")
    chunk = -(-numel // (len(taps) * 64)) * 64
    pad_constants = conv.pad_constants(pb.n, pb.h, pb.w, pb.c, pb.hp, pb.wp, pb.ph, pb.pw, 1, 1,
                                       padded.element_offset)
    launches = [Launch(pad, "pad", ("src", "dst"), *pad_constants, 4, 1), copy_launch(flatten, first, flat, 0, numel)]
    targets = set()
    for i, tap in enumerate(taps):
        found = _expect(tap, [(0, image, "readonly"), (1, (pb.n, pb.p, pb.q, pb.taps, pb.c), "written")])
        if found[0].offset != flat.offset:
            raise ValueError(f"{tap.name}: reads byte {found[0].offset}, the image is at {flat.offset}")
        targets.add(found[1].offset)
        launches.append(copy_launch(tap, found[0], found[1], i * chunk, max(0, min(chunk, numel - i * chunk))))
    if len(targets) != 1 or (direct and targets != {x.offset}):
        raise ValueError(f"the taps' copies write bytes {sorted(targets)}, the products read byte {x.offset}")
    return launches


def plan(problem: WgradProblem, config: WgradConfig, executables: tuple[Any, ...]) -> list[Launch]:
    """What replaces each of IREE's executables (module docstring); ValueError if the module
    is not one this library knows."""
    names = [e.name for e in executables]
    pb = problem
    movers = pb.taps + 2 if pb.taps > 1 else int(pb.strided)  # executables that make X
    if len(executables) != movers + 2:
        raise ValueError(f"{len(executables)} executables {names}: not a module shape this library knows")
    total = executables[-1]
    part_in, out = _sum_spans(pb, total)
    parts = part_in.shape[0]

    # The partial products: dY (parts, rows, K) and X (parts, rows, R*S*C) -> (parts, K, R*S*C) float32.
    mm = executables[-2]
    found = spans(mm)
    check_bindings(mm, found)
    match = _MATMUL.search(mm.text)
    loads = dict(_LOAD.findall(mm.text))
    by_name = {sp.name: sp for sp in found}
    if match is None or any(loads.get(v) not in by_name for v in match.groups()) or len(found) != 3:
        raise ValueError(f"{mm.name}: not one batch matmul of two loaded tensors")
    dy, x = (by_name[loads[v]] for v in match.groups())
    [part] = [sp for sp in found if sp not in (dy, x)]
    rows = dy.shape[1] if len(dy.shape) == 3 else 0
    if (dy.dtype, x.dtype, part.dtype) != ("bf16", "bf16", "f32") or dy.shape != (parts, rows, pb.k) \
            or x.shape != (parts, rows, pb.columns) or part.shape != (parts, pb.k, pb.columns) \
            or part.access == "readonly":
        raise ValueError(f"{mm.name}: {dy.shape} x {x.shape} -> {part.shape} is not this problem's "
                         f"({parts}, rows, {pb.k}) x ({parts}, rows, {pb.columns}) -> ({parts}, {pb.k}, {pb.columns})")
    if not (parts * rows >= pb.pixels > (parts - 1) * rows):
        raise ValueError(f"{mm.name}: {parts} parts of {rows} rows for {pb.pixels} pixels")
    if part.offset != part_in.offset:
        raise ValueError(f"{names}: the partial sums are written at byte {part.offset} and read at {part_in.offset}")
    inputs = sorted({dy.binding, x.binding})
    if part.binding in inputs or part.binding < inputs[-1]:
        raise ValueError(f"{mm.name}: the float32 tensor's binding {part.binding} is not after the inputs' {inputs}")
    launches: list[Launch] = []
    if pb.taps > 1:
        launches += _image_launches(pb, executables[:-2], x, direct=len(inputs) == 2)
        geometry = {"R": pb.r, "S": pb.s, "SH": pb.u, "SW": pb.v, "P": pb.p, "Q": pb.q, "HP": pb.hp, "WP": pb.wp}
    else:
        if pb.strided:
            launches += _subsample_launches(pb, executables[:-2], x)
        geometry = {"R": 1, "S": 1, "SH": 1, "SW": 1, "P": 1, "Q": 1, "HP": 1, "WP": 1}  # X is (pixels, C)
    geometry.update(PAD_H=0, PAD_W=0)
    launches += _products_and_sum(pb, config, (mm, dy, x, part), (total, part_in, out), inputs, geometry)
    return launches


#: The conv op's formulation whose module :func:`implicit_plan` knows.
IMPLICIT_FORMULATION = "implicit_split"


def reads_x_itself_first(problem: WgradProblem) -> bool:
    """Whether the products over x itself (:func:`implicit_plan`) come before the columns'
    module: for every window of several taps (the 3-channel stem's too: its columns' module
    moves the image in 53 executables, 49 of them a tap's copy), and for a 1x1 window whose
    columns' module moves x or dY (a strided window's subsample; pixels no split tiles, which
    IREE copies into zero-padded transients). A stride-1 1x1 window whose split tiles the
    pixels moves nothing either way, and keeps the columns' module, measured first."""
    return problem.taps > 1 or problem.strided or _tiling_split(problem) is None


_GENERIC = re.compile(r"linalg\.generic [^\n]*?ins\((%\w+), (%\w+) :")
_PAD_OR_SLICE = re.compile(r"(%\w+) = tensor\.(?:pad|extract_slice) (%\w+)")


def contraction_operands(executable: Any, found: list[Span]) -> tuple[Span, Span]:
    """The two tensors (of ``found``, the executable's spans) its one ``linalg.generic``
    reads, in the generic's operand order, each traced back through pads and slices to the
    binding it was loaded from: how two tensors of one size (x and dY of a stride-1 weight
    gradient) are told apart. ValueError where the executable is not that."""
    text = executable.text
    match = _GENERIC.search(text)
    loads = dict(_LOAD.findall(text))
    through = dict(_PAD_OR_SLICE.findall(text))
    by_name = {sp.name: sp for sp in found}

    def source(value: str) -> Span | None:  # the loaded tensor a pad or a slice of it comes from
        while value in through:
            value = through[value]
        return by_name.get(loads.get(value, ""))

    if match is None:
        raise ValueError(f"{executable.name}: not one linalg.generic of two loaded tensors")
    first, second = (source(v) for v in match.groups())
    if first is None or second is None or first == second:
        raise ValueError(f"{executable.name}: the generic's operands are not two of its bindings")
    return first, second


def implicit_plan(problem: WgradProblem, executables: tuple[Any, ...], config: WgradConfig | None = None,
                  tiles: WgradTiles | None = None) -> list[Launch]:
    """What replaces the two executables of the op's ``implicit_split`` module: the products
    (x and dY as the caller stores them, x's padding fused in, into float32 partial sums of
    parts of the batch) by ``boo_hopper_wgrad`` reading x itself, its padding applied by
    masked loads; the sum by ``boo_hopper_sum``. The tiles (``tiles``, else the chosen) and
    the splits follow from the parts IREE's module holds (:func:`choose_config`), unless
    ``config`` is given; a problem whose columns are gathered (the 3-channel stem) has each
    column's tap masked on its own. ValueError for any other module."""
    pb = problem
    names = [e.name for e in executables]
    if len(executables) != 2:
        raise ValueError(f"{len(executables)} executables {names}: not the implicit_split module")
    products, total = executables
    part_in, out = _sum_spans(pb, total)
    parts = part_in.shape[0]
    found = spans(products)
    check_bindings(products, found)
    if len(found) != 3:
        raise ValueError(f"{products.name}: tensors {found}, expected x, dY and the partial sums")
    x, dy = contraction_operands(products, found)
    [part] = [sp for sp in found if sp not in (x, dy)]
    wanted = {"x": (pb.n * pb.h * pb.w * pb.c, "bf16"), "dY": (pb.pixels * pb.k, "bf16"),
              "partial sums": (parts * pb.k * pb.columns, "f32")}
    for what, span in (("x", x), ("dY", dy), ("partial sums", part)):
        if (span.numel, span.dtype) != wanted[what] or (span.access == "readonly") != (what != "partial sums"):
            raise ValueError(f"{products.name}: {what} {span.shape} {span.dtype} {span.access}, expected "
                             f"{wanted[what][0]} {wanted[what][1]} elements")
    if part.offset != part_in.offset:
        raise ValueError(f"{names}: the partial sums are written at byte {part.offset} and read at {part_in.offset}")
    inputs = sorted({dy.binding, x.binding})
    if part.binding < inputs[-1]:
        raise ValueError(f"{products.name}: the float32 tensor's binding {part.binding} is not after the inputs'")
    geometry = {"R": pb.r, "S": pb.s, "SH": pb.u, "SW": pb.v, "P": pb.p, "Q": pb.q, "HP": pb.h, "WP": pb.w,
                "PAD_H": pb.ph, "PAD_W": pb.pw}
    return _products_and_sum(pb, config or choose_config(pb, parts, tiles), (products, dy, x, part),
                             (total, part_in, out), inputs, geometry)


def _sum_spans(pb: WgradProblem, total: Any) -> tuple[Span, Span]:
    """The sum's tensors: (parts, K*R*S*C) float32 read, (K*R*S*C) bf16 written (= KRSC dw)."""
    kc = pb.k * pb.columns
    found = spans(total)
    check_bindings(total, found)
    if len(found) != 2 or [(sp.dtype, sp.access) for sp in found] != [("f32", "readonly"), ("bf16", "writeonly")]:
        raise ValueError(f"{total.name}: tensors {found}, expected a float32 read and a bf16 write")
    part_in, out = found
    if part_in.shape[1:] != (kc,) or out.shape != (kc,) or part_in.binding > out.binding:
        raise ValueError(f"{total.name}: tensors {part_in.shape} -> {out.shape}, expected (parts, {kc}) -> ({kc},)")
    return part_in, out


def _split_steps(pb: WgradProblem, config: WgradConfig, parts: int) -> tuple[int, int]:
    """(splits, steps): at most ``parts`` splits of ``steps`` blocks of BK pixels each."""
    splits = min(config.splits, parts)
    blocks = -(-pb.pixels // config.bk)
    steps = -(-blocks // splits)
    return -(-blocks // steps), steps


def _products_and_sum(pb: WgradProblem, config: WgradConfig, products: tuple[Any, Span, Span, Span],
                      total: tuple[Any, Span, Span], inputs: list[int], geometry: dict[str, int]) -> list[Launch]:
    """The partial products' launch (``products``: the executable, dY, x, the float32 partial
    sums) and their sum's (``total``: the executable, the partial sums it reads, dw)."""
    executable, dy, x, part = products
    summing, part_in, out = total
    splits, steps = _split_steps(pb, config, part_in.shape[0])
    kc = pb.k * pb.columns
    constants = {"DY_OFF": dy.element_offset, "X_OFF": x.element_offset, "PART_OFF": part.element_offset,
                 "DY_IN_B": dy.binding != inputs[0], "X_IN_B": x.binding != inputs[0], "M": pb.pixels, "K": pb.k,
                 "C": pb.c, "BM": config.bm, "BN": config.bn, "BK": config.bk, "STEPS": steps,
                 "MASKED": splits * steps * config.bk != pb.pixels, "GATHER": pb.gathered, **geometry}
    pointers = ("a", "b", "part") if len(inputs) == 2 else ("a", "part")
    if len(inputs) == 1:
        constants["b"] = None
    return [Launch(executable, "wgrad", pointers, constants, pb.tiles(config.bm, config.bn) * splits,
                   config.num_warps, config.num_stages, {"part": "*fp32"}),
            Launch(summing, "sum", ("part", "out"),
                   {"PART_OFF": part_in.element_offset, "OUT_OFF": out.element_offset, "NUMEL": kc,
                    "SPLITS": splits, "BLOCK": SUM_BLOCK}, -(-kc // SUM_BLOCK), 4, 1, {"part": "*fp32"})]


# -- PTX ------------------------------------------------------------------------------------------


def generate(launch: Launch, entry: str) -> Kernel:
    """Compile the kernel of one replaced executable to sm_90a PTX named ``entry``."""
    from ._triton_conv import boo_hopper_copy, boo_hopper_pad, boo_hopper_subsample, boo_hopper_sum, boo_hopper_wgrad

    fn, order = {"wgrad": (boo_hopper_wgrad, WGRAD_ORDER), "sum": (boo_hopper_sum, SUM_ORDER),
                 "subsample": (boo_hopper_subsample, SUBSAMPLE_ORDER), "copy": (boo_hopper_copy, COPY_ORDER),
                 "pad": (boo_hopper_pad, conv.PAD_ORDER)}[launch.kernel]
    compiled, ptx = compile_for_iree(fn, list(launch.pointers), dict(launch.constants), order, launch.num_warps,
                                  launch.num_stages, entry, launch.types)
    return Kernel(ptx, compiled.metadata.num_warps * 32, launch.grid, int(compiled.metadata.shared))
