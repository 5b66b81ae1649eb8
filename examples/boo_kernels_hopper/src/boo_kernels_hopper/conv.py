"""Which convolutions this library serves, how IREE's module for them is replaced, and PTX.

A served convolution (:func:`problem_of`): bf16, 2-D, channels-last (NHWC input and output,
KRSC filter), one group, no dilation, not transposed; the forward (``fwd``, with its bias and
activation, if any, as the kernel's epilogue) or the data gradient (``bwd``), with a multiple
of 64 output channels. The ``cbainfer`` op's NHWC signatures (MIOpen's CBAInfer: conv, bias,
per-channel batch norm from running statistics, activation) are forwards whose epilogue
also applies the batch norm and, with BOO's ``--residual``, adds a skip connection's tensor
before the activation (:func:`cba_problem_of`); IREE's module for them has the same
executables, the batch norm's four vectors bound after the bias (:data:`NORM_POINTERS`), the
residual after them.

Both are computed as one forward convolution, :class:`ConvProblem`: an implicit GEMM over a
channels-last image that already holds its padding. The forward's image is x padded by the
convolution's padding; the data gradient's is dY with ``stride - 1`` zeros inserted between
its pixels and padded by ``window - 1 - padding``, convolved at stride 1 with the filter
flipped and read input-channel-major (dx[c] = sum over k of dY[k] * w[k, flipped tap, c]).

IREE's module for the op's ``default`` formulation on CUDA has, per row of benchmarks/gpu.py:

* one executable (unpadded 1x1 rows): the convolution of the op's own tensors (x or dY, w,
  [bias,] y or dx; some flattened to 2-D). Replaced by the convolution kernel on them. A
  forward's bias and activation are inside the convolution's executable, the bias its own
  binding before the output's, in this shape and the next.
* two (padded forward; strided 1x1 data gradient): a transpose writing a transient (x or dY
  in NCHW, padded or zero-inserted), then the convolution reading it with w. Both are
  replaced: the first by ``boo_hopper_pad`` writing the transient as the padded image in
  NHWC (the same number of elements), the second by the convolution reading that. For a
  strided 1x1 data gradient the first copies dY compact (no zeros inserted) to the start of
  the transient, and the convolution multiplies only dY's pixels, writing each to its place
  in dx and zeros around it (:attr:`ConvProblem.scatter`): a quarter of the work at stride 2.
* three (padded data gradient): the transpose, a copy of the filter flipped into the same
  transient buffer at an offset, and the convolution with two bindings (the transient, dx).
  Replaced by the pad, a plain copy of the filter into its slot, and the convolution reading
  both from the one binding (at the offsets IREE's own executables use).

The conv op's ``split_k`` module (a forward of few output tiles, at small batches) is two
executables: the products of x as stored and the filter into float32 partial sums over
slices of the channels, then their sum with the epilogue. :func:`split_plan` replaces the
first with the convolution kernel in as many splits of its reduction; the sum stays IREE's.

:func:`plan` matches what it finds against this, by binding sizes and offsets, and raises
ValueError on anything else (BOO then passes the substitution over and IREE's kernels
serve). Everything here but :func:`generate` runs without Triton or a GPU.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from . import gemm
from .iree_subspans import Span, spans
from .ptx import Kernel, compile_for_iree

BF16 = torch.bfloat16
ELEMENT = 2  # bytes per bf16
#: Activations a forward convolution's epilogue applies (``_triton_shared.activation``).
EPILOGUE_ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid", "tanh")


@dataclass(frozen=True)
class ConvConfig(gemm.GemmConfig):
    """Tiles of the convolution kernel: BM output pixels by BN output channels, BK of the
    reduction per step; GROUP rows of tiles per L2 group; Triton's warps and stages."""

    bn: int = 128


@dataclass(frozen=True)
class ConvProblem:
    """A served convolution as the forward kernel computes it.

    The source image ``(n, h, w, c)`` (x, or dY for the data gradient) becomes the image the
    kernel reads, ``(n, hp, wp, cin)`` with ``cin == c``: source pixel (i, j) at
    ``(lo_h + i*dh, lo_w + j*dw)``, zeros elsewhere. The kernel's window is ``r x s`` at
    stride ``(sh, sw)`` with no padding, giving ``(n, p, q, cout)``.
    """

    mode: str
    n: int
    h: int
    w: int
    c: int
    hp: int
    wp: int
    lo_h: int
    lo_w: int
    dh: int
    dw: int
    r: int
    s: int
    sh: int
    sw: int
    p: int
    q: int
    cout: int
    in_major: bool  # the filter is (cin, r, s, cout) as stored (and read flipped): the data gradient
    bias: bool = False  # the forward's epilogue: y += bias[cout], then the activation
    activation: str | None = None
    norm: bool = False  # CBAInfer's batch norm in the epilogue, after the bias (NORM_POINTERS)
    eps: float = 0.0
    residual: bool = False  # CBAInfer's skip connection: a tensor of the output's shape added before the activation
    implicit_pad: bool = False  # the unpadded source read, padding as it reads (the channels_last module)
    splits: int = 1  # > 1: float32 partial sums over that many splits of the reduction (the split_k module)

    @property
    def epilogue_vectors(self) -> int:
        """Per-output-channel tensors the epilogue reads: the bias, then the batch norm's four."""
        return int(self.bias) + 4 * int(self.norm)

    @property
    def cin(self) -> int:
        return self.c

    @property
    def direct(self) -> bool:
        """The kernel can read the source itself: no padding, no zeros inserted."""
        return (self.lo_h == self.lo_w == 0 and self.dh == self.dw == 1 and self.hp == self.h and self.wp == self.w)

    @property
    def scatter(self) -> bool:
        """A strided 1x1 data gradient: computed on dY's own pixels, scattered into dx."""
        return self.mode == "bwd" and self.r == self.s == 1 and (self.dh, self.dw) != (1, 1)

    @property
    def source_numel(self) -> int:
        return self.n * self.h * self.w * self.c

    @property
    def padded_numel(self) -> int:
        return self.n * self.hp * self.wp * self.c

    @property
    def weight_numel(self) -> int:
        return self.cout * self.r * self.s * self.cin

    @property
    def output_numel(self) -> int:
        return self.n * self.p * self.q * self.cout


def is_plain_channels_last(s: Any) -> bool:
    """Whether ``s`` is a conv signature of the kind this library's kernels take: bf16, 2-D,
    NHWC input and output and KRSC filter, one group, no dilation, not transposed, and an
    epilogue (a forward's bias and activation) the kernel has. Duck-typed so that the
    library needs no op package."""
    try:
        return (getattr(s, "op_name", None) == "conv" and s.dtype == BF16 and s.spatial_rank == 2 and s.groups == 1
                and not s.transposed and (s.activation is None or s.activation in EPILOGUE_ACTIVATIONS)
                and all(d == 1 for d in s.dilation)
                and (s.input_layout, s.kernel_layout, s.output_layout) == ("NHWC", "NHWC", "NHWC"))
    except (AttributeError, TypeError, ValueError):
        return False


def plain_geometry(s: Any) -> tuple[int, ...] | None:
    """``(n, c, h, w, k, r, s, p, q, stride_h, stride_w, pad_h, pad_w)`` of a signature
    :func:`is_plain_channels_last` takes (x (n, c, h, w), the filter (k, c, r, s), dY's
    p x q pixels), else None."""
    if not is_plain_channels_last(s):
        return None
    try:
        n, c, h, w = s.input_shape
        k, _, r, t = s.kernel_shape
        p, q = s.output_spatial
        (sh, sw), (ph, pw) = s.stride, s.padding
    except (AttributeError, TypeError, ValueError):
        return None
    return n, c, h, w, k, r, t, p, q, sh, sw, ph, pw


#: CBAInfer's activations the epilogue has: MIOpen's mode -> the epilogue's (tanh only as
#: ``beta * tanh(alpha * x)`` with alpha = beta = 1).
_CBA_ACTIVATIONS = {"relu": "relu", "logistic": "sigmoid", "tanh": "tanh"}


def cba_problem_of(s: Any) -> ConvProblem | None:
    """The forward problem of a ``cbainfer`` signature (MIOpen's CBAInfer: conv, bias, batch
    norm, activation) this library serves: bf16, NHWC, a convolution as :func:`problem_of`
    takes, a per-channel (spatial) batch norm, an activation the epilogue has, and a residual
    (``--residual``) if any. Duck-typed."""
    try:
        if not (s.dtype == BF16 and s.layout == "NHWC" and s.has_conv and s.groups == 1
                and (s.dilation_h, s.dilation_w) == (1, 1) and (not s.has_norm or s.bn_mode == "spatial")):
            return None
        activation = None
        if s.has_activation and s.activation != "passthru":
            activation = _CBA_ACTIVATIONS.get(s.activation)
            if activation is None or (activation == "tanh" and (s.alpha, s.beta) != (1.0, 1.0)):
                return None
        (n, c, h, w), (_, k, p, q) = s.input_shape, s.output_shape
        ph, pw = s.padding
        problem = ConvProblem("fwd", n, h, w, c, h + 2 * ph, w + 2 * pw, ph, pw, 1, 1, s.fil_h, s.fil_w, s.stride_h,
                              s.stride_w, p, q, k, False, bool(s.has_bias), activation, bool(s.has_norm),
                              float(s.eps), bool(getattr(s, "residual", False)))
    except (AttributeError, TypeError, ValueError):
        return None
    return _servable(problem)


def problem_of(signature: Any) -> ConvProblem | None:
    """The problem for a BOO ``conv`` or ``cbainfer`` signature this library serves (module
    docstring), else None."""
    if getattr(signature, "op_name", None) == "cbainfer":
        return cba_problem_of(signature)
    s = signature
    found = plain_geometry(s)
    if found is None:
        return None
    n, c, h, w, k, r, sw_, p, q, sh, sw, ph, pw = found
    if s.mode == "fwd":
        problem = ConvProblem("fwd", n, h, w, c, h + 2 * ph, w + 2 * pw, ph, pw, 1, 1, r, sw_, sh, sw, p, q, k, False,
                              bool(s.bias), s.activation)
    elif s.mode == "bwd" and not s.bias and s.activation is None:
        lo_h, lo_w = r - 1 - ph, sw_ - 1 - pw
        if lo_h < 0 or lo_w < 0:  # padding beyond the window: windows that read padding only
            return None
        problem = ConvProblem("bwd", n, p, q, k, h + r - 1, w + sw_ - 1, lo_h, lo_w, sh, sw, r, sw_, 1, 1, h, w, c,
                              True)
        if lo_h + (p - 1) * sh >= problem.hp or lo_w + (q - 1) * sw >= problem.wp:
            return None
    else:
        return None
    return _servable(problem)


def padding_as_it_reads(problem: ConvProblem) -> ConvProblem | None:
    """``problem`` (a padded forward, or a padded stride-1 data gradient) read from the
    unpadded source, its padding applied by the kernel: what it computes on the conv op's
    ``channels_last`` module (a forward's one executable; a data gradient's filter copy and
    convolution), else None (nothing to pad, zeros inserted between dY's pixels). Not the
    3-channel stem: its gathered reduction masked per element measured slower (H100: 95.6
    against 78.7 µs with the pad)."""
    if problem.direct or problem.cin % 64 or (problem.dh, problem.dw) != (1, 1):
        return None
    return dataclasses.replace(problem, implicit_pad=True)


def _servable(problem: ConvProblem) -> ConvProblem | None:
    """``problem`` if the kernel's tiles and window fit it, else None."""
    if problem.cout % 64 or min(problem.p, problem.q) < 1:
        return None
    if (problem.p - 1) * problem.sh + problem.r > problem.hp or (problem.q - 1) * problem.sw + problem.s > problem.wp:
        return None
    return problem


#: Pipeline stages of 128-row tiles: 3 (two programs a multiprocessor, one's stores beside the
#: other's loads). ``bench_conv.py --stages`` (H200, µs, cuDNN's in parentheses; 8 warps and 4
#: stages before): 1x1 windows 256->128 @56 fwd 30.0 -> 24.8 (24.1), 512->256 @28 bwd 24.1 -> 19.1
#: (16.6), 1024->512 @14 bwd 15.5 -> 13.9 (12.4); and since library 0.17.2 3x3 windows too
#: (0.17.1's sweep, 4 -> 3 stages): 128->128 @28 fwd 16.5 -> 15.1 (17.7), bwd 20.3 -> 17.7 (17.4),
#: 128->128 /2 @56 fwd 16.6 -> 15.3 (17.5), 64->64 @56 (128x64 tiles) fwd 23.7 -> 21.4 (22.5),
#: bwd 23.2 -> 21.0 (21.7); 256->256 @14 19.2 -> 19.4 fwd, 17.8 -> 17.6 bwd.
STAGES = 3
#: Below this many 128x128 output tiles (half an H100's 132 SMs) the kernel runs 64x128 tiles:
#: a forward's 3x3 window 4 warps and 3 stages (512->512 @7 26.2 -> 24.8), its 1x1 window 8 warps
#: and 4 (2048->512 @7 11.8 -> 9.8 (8.8)); a data gradient's 4 warps and 4 (512->512 3x3 @7 23.6
#: -> 21.3 (16.4), 512->2048 1x1 @7 9.8 -> 9.6 (7.1)).
FEW_TILES = 66
#: 1x1 forwards of at least this many 128x128 tiles (2.5 waves) reducing at least four steps of
#: 64 channels run 4 warps and 2 stages (0.17.1's sweep, from 8 warps and 3 stages): 256->1024
#: @14 10.1 -> 8.8 (8.6), 512->256 @28 15.1 -> 13.3 (12.4), 256->512 /2 @56 18.9 -> 17.3 (17.9),
#: 512->1024 /2 @28 13.8 -> 12.5 (16.0), 256->128 @56 24.6 -> 22.9 (22.4); fewer tiles lost
#: (1024->256 @14, 98 tiles: 7.7 -> 10.9), and so did data gradients (1024->512 @14 13.9 -> 14.6)
#: and CBAInfer's epilogue (one before/after call through BOO: 512->256 @28 16.6 -> 20.6 µs,
#: 256->1024 @14 11.0 -> 12.7), so forwards with an epilogue keep 8 warps and 3 stages.
MANY_TILES = 330


def choose_config(problem: ConvProblem) -> ConvConfig:
    """The tiles for ``problem`` (README.md: tile shapes measured on an H100; stages and warps
    on an H200, :data:`STAGES`, :data:`FEW_TILES`, :data:`MANY_TILES`). A split problem gets
    the tiles of the whole (``bench_conv.py --splits`` measured those)."""
    problem = dataclasses.replace(problem, splits=1)
    if problem.cin % 64:  # the stem: 3 channels, a short gathered reduction
        return ConvConfig(128, 64, 32, 8, 4, 2)
    one_by_one = problem.r * problem.s == 1
    if problem.cout % 128:  # 64, 192, 320... output channels: tiles of 64 (128 would leave the last 64 unwritten)
        return ConvConfig(128, 64, 64, 8, 4, STAGES)
    config = ConvConfig(128, 128, 64, 8, 8, STAGES)
    tiles = conv_grid(problem, config)
    if tiles < FEW_TILES:  # 7x7 outputs: 52 programs would leave most SMs idle
        if problem.mode != "fwd":
            return ConvConfig(64, 128, 64, 8, 4, 4)
        return ConvConfig(64, 128, 64, 8, 8, 4) if one_by_one else ConvConfig(64, 128, 64, 8, 4, 3)
    steps = problem.cin // config.bk
    plain = problem.mode == "fwd" and not (problem.bias or problem.activation or problem.norm or problem.residual)
    if one_by_one and (steps == 2 or (plain and steps >= 4 and tiles >= MANY_TILES)):
        return ConvConfig(128, 128, 64, 8, 4, 2)  # two steps of the reduction, or many short programs
    return config


#: Tile shapes :func:`alternatives` offers the tuner: (BM, BN, warps).
TILE_SHAPES = ((128, 128, 8), (128, 64, 4), (64, 128, 8))


def alternatives(chosen: ConvConfig, cin: int, cout: int) -> list[ConvConfig]:
    """Other tiles ``boo tune`` times beside ``chosen`` for a convolution kernel reducing
    ``cin`` channels a tap into ``cout``: the chosen tiles with 2, 3 and 4 pipeline stages,
    and the other tile shapes (3 stages) whose BN divides ``cout``. None for a gathered
    reduction (the stem's 3 channels)."""
    if cin % 64:
        return []
    found = [dataclasses.replace(chosen, num_stages=stages) for stages in (2, 3, 4)]
    found += [ConvConfig(bm, bn, 64, 8, warps, 3) for bm, bn, warps in TILE_SHAPES
              if cout % bn == 0 and (bm, bn) != (chosen.bm, chosen.bn)]
    return [config for config in dict.fromkeys(found) if config != chosen]


def config_label(config: ConvConfig) -> str:
    """A configuration as a substitution's name suffix: ``128x128_w8_s3``."""
    return f"{config.bm}x{config.bn}_w{config.num_warps}_s{config.num_stages}"


# -- IREE's module --------------------------------------------------------------------------------

def subspans(executable: Any) -> list[Span]:
    """Every bf16 tensor an executable's function reads or writes: binding, byte offset, size."""
    return spans(executable, "bf16")


@dataclass(frozen=True)
class Launch:
    """One replaced executable: which kernel, its pointers and constant offsets."""

    executable: Any
    kernel: str  # "conv", "pad", "compact" (the source copied as it is) or "copy"
    offsets: tuple[int, ...]  # element offsets: conv (x, w) ; pad/compact/copy (dst,)
    w_from_x: bool = False


def _only_export(executable: Any) -> Any:
    if len(executable.exports) != 1 or executable.exports[0].constants:
        raise ValueError(f"{executable.name}: expected one export with no constants")
    return executable.exports[0]


def plan(problem: ConvProblem, executables: tuple[Any, ...]) -> list[Launch]:
    """What replaces each of IREE's executables (module docstring); ValueError if the
    module is not one of the shapes this library knows."""
    names = [e.name for e in executables]
    spans = {e.name: subspans(e) for e in executables}
    for e in executables:
        _only_export(e)

    def expect(name: str, found: list[Span], wanted: list[tuple[int, int, str]]) -> None:
        # what a kernel writes IREE may declare readwrite (a transient filled, then written into)
        got = [(sp.binding, sp.numel, "readonly" if sp.access == "readonly" else "writeonly") for sp in found]
        if sorted(got) != sorted(wanted):
            raise ValueError(f"{name}: tensors (binding, elements, access) {got}, expected {wanted}")

    def at_start(name: str, *bindings: int) -> None:  # tensors the kernels read or write from the pointer itself
        if any(sp.offset for sp in spans[name] if sp.binding in bindings):
            raise ValueError(f"{name}: a tensor of binding {bindings} is at an offset")

    conv = executables[-1]
    # the forward's epilogue: the bias (then a batch norm's vectors, NORM_POINTERS) from
    # binding 2 on, a residual's after them, then the output's
    bias = [(2 + i, problem.cout, "readonly") for i in range(problem.epilogue_vectors)]
    if problem.residual:
        bias.append((2 + len(bias), problem.output_numel, "readonly"))
    out = 2 + len(bias)
    if problem.implicit_pad and len(executables) != (2 if problem.in_major else 1):
        raise ValueError(f"{len(executables)} executables {names}: not the module of a convolution padding as it reads")
    if problem.implicit_pad and problem.in_major:  # the filter copied (reversed by IREE), then the convolution
        copy = executables[0]
        expect(copy.name, spans[copy.name], [(0, problem.weight_numel, "readonly"),
                                             (1, problem.weight_numel, "writeonly")])
        expect(conv.name, spans[conv.name], [(0, problem.source_numel, "readonly"),
                                             (1, problem.weight_numel, "readonly"),
                                             (2, problem.output_numel, "writeonly")])
        at_start(copy.name, 0)
        at_start(conv.name, 0, 2)
        copy_to = next(sp for sp in spans[copy.name] if sp.binding == 1).offset
        w_at = next(sp for sp in spans[conv.name] if sp.binding == 1).offset
        if copy_to != w_at or w_at % 16:
            raise ValueError(f"{names}: the filter is copied to byte {copy_to} and read at {w_at}")
        return [Launch(copy, "copy", (copy_to // ELEMENT,)), Launch(conv, "conv", (0, w_at // ELEMENT))]
    if len(executables) == 1:
        if not (problem.direct or problem.implicit_pad):
            raise ValueError(f"one executable {names}, but the {problem.mode} convolution needs padding")
        expect(conv.name, spans[conv.name], [(0, problem.source_numel, "readonly"),
                                             (1, problem.weight_numel, "readonly"), *bias,
                                             (out, problem.output_numel, "writeonly")])
        at_start(conv.name, 0, *range(1, out + 1))
        return [Launch(conv, "conv", (0, 0))]
    pad = executables[0]
    expect(pad.name, spans[pad.name], [(0, problem.source_numel, "readonly"), (1, problem.padded_numel, "writeonly")])
    at_start(pad.name, 0)
    pad_to = next(sp for sp in spans[pad.name] if sp.binding == 1).offset
    if len(executables) == 2:
        expect(conv.name, spans[conv.name], [(0, problem.padded_numel, "readonly"),
                                             (1, problem.weight_numel, "readonly"), *bias,
                                             (out, problem.output_numel, "writeonly")])
        at_start(conv.name, *range(1, out + 1))
        x_at = next(sp for sp in spans[conv.name] if sp.binding == 0).offset
        if x_at != pad_to:
            raise ValueError(f"{names}: the transient is written at byte {pad_to} and read at {x_at}")
        first = "compact" if problem.scatter else "pad"
        return [Launch(pad, first, (pad_to // ELEMENT,)), Launch(conv, "conv", (x_at // ELEMENT, 0))]
    if len(executables) == 3 and problem.in_major:
        copy = executables[1]
        expect(copy.name, spans[copy.name], [(0, problem.weight_numel, "readonly"),
                                             (1, problem.weight_numel, "writeonly")])
        at_start(copy.name, 0)
        at_start(conv.name, 1)
        copy_to = next(sp for sp in spans[copy.name] if sp.binding == 1).offset
        expect(conv.name, spans[conv.name], [(0, problem.padded_numel, "readonly"),
                                             (0, problem.weight_numel, "readonly"),
                                             (1, problem.output_numel, "writeonly")])
        reads = {sp.numel: sp.offset for sp in spans[conv.name] if sp.binding == 0}
        if problem.padded_numel == problem.weight_numel:
            raise ValueError(f"{conv.name}: the image and the filter have the same size: cannot tell them apart")
        x_at, w_at = reads[problem.padded_numel], reads[problem.weight_numel]
        if (x_at, w_at) != (pad_to, copy_to) or any(o % 16 for o in (x_at, w_at)):
            raise ValueError(f"{names}: transient written at bytes {pad_to}, {copy_to}, read at {x_at}, {w_at}")
        return [Launch(pad, "pad", (pad_to // ELEMENT,)), Launch(copy, "copy", (copy_to // ELEMENT,)),
                Launch(conv, "conv", (x_at // ELEMENT, w_at // ELEMENT), w_from_x=True)]
    raise ValueError(f"{len(executables)} executables {names}: not a module shape this library knows")


def split_plan(problem: ConvProblem, executables: tuple[Any, ...]) -> tuple[ConvProblem, list[Launch]]:
    """The conv op's ``split_k`` module of the forward ``problem``: the products (binding x
    as stored, the filter and the float32 partial sums ``(splits, N, P, Q, K)``), replaced by
    the convolution kernel in as many splits, reading x unpadded; then the sum with the
    epilogue, IREE's. The problem as the kernel computes it, and its one launch; ValueError
    for a module of any other shape."""
    names = [e.name for e in executables]
    if problem.mode != "fwd" or len(executables) != 2:
        raise ValueError(f"{len(executables)} executables {names}: not the split_k module of a forward convolution")
    products = executables[0]
    _only_export(products)
    found = spans(products)
    partial = [sp for sp in found if sp.dtype == "f32"]
    if len(partial) != 1 or (partial[0].binding, partial[0].offset, partial[0].access) != (2, 0, "writeonly"):
        raise ValueError(f"{products.name}: float32 tensors {partial}, expected the partial sums at binding 2")
    splits = partial[0].shape[0]
    split = dataclasses.replace(padding_as_it_reads(problem) or problem, splits=splits)
    got = sorted((sp.binding, sp.offset, sp.numel, sp.access) for sp in found if sp.dtype == "bf16")
    wanted = [(0, 0, split.source_numel, "readonly"), (1, 0, split.weight_numel, "readonly")]
    if splits < 2 or partial[0].numel != splits * split.output_numel or got != wanted or split.cin % 64 or \
            not (split.direct or split.implicit_pad):  # the kernel splits whole steps of 64 channels
        raise ValueError(f"{products.name}: tensors {got} and {partial[0].shape}, expected {wanted} and "
                         f"{splits} x {split.output_numel} partial sums")
    return split, [Launch(products, "conv", (0, 0))]


# -- PTX ------------------------------------------------------------------------------------------


def kernel_geometry(problem: ConvProblem) -> dict[str, Any]:
    """The convolution kernel's image, window and output: the problem's own, or for a
    scattered one (:attr:`ConvProblem.scatter`) a 1x1 stride-1 pass over compact dY whose
    pixels land DH x DW apart in the OH x OW output."""
    geometry = {"HP": problem.hp, "WP": problem.wp, "SH": problem.sh, "SW": problem.sw, "P": problem.p,
                "Q": problem.q, "SCATTER": False, "OH": problem.p, "OW": problem.q, "DH": 1, "DW": 1, "PAD_H": 0,
                "PAD_W": 0}
    if problem.scatter:
        geometry.update(HP=problem.h, WP=problem.w, SH=1, SW=1, P=problem.h, Q=problem.w, SCATTER=True,
                        DH=problem.dh, DW=problem.dw)
    elif problem.implicit_pad:  # the source as it is; the kernel reads zeros outside it
        geometry.update(HP=problem.h, WP=problem.w, PAD_H=problem.lo_h, PAD_W=problem.lo_w)
    return geometry


def conv_constants(problem: ConvProblem, config: ConvConfig, x_off: int, w_off: int, w_from_x: bool
                   ) -> dict[str, Any]:
    return {"X_OFF": x_off, "W_OFF": w_off, "W_FROM_X": w_from_x, "N": problem.n, "SPLITS": problem.splits,
            "CIN": problem.cin, "COUT": problem.cout, "R": problem.r, "S": problem.s, "IN_MAJOR": problem.in_major,
            "FLIP": problem.in_major, "BM": config.bm, "BN": config.bn, "BK": config.bk, "GROUP": config.group,
            "HAS_BIAS": problem.bias, "ACT": problem.activation or "", "HAS_NORM": problem.norm, "EPS": problem.eps,
            "HAS_RES": problem.residual, **kernel_geometry(problem)}


#: The batch norm's vectors in the order IREE 3.13 binds them: the order its epilogue uses them
#: (``(y - mean) * rsqrt(var + eps) * scale + shift``), not the op's argument order. A module
#: bound otherwise computes something else, which verification refuses.
NORM_POINTERS = ["mean", "var", "scale", "shift"]
CONV_ORDER = ["x", "w", "bias", *NORM_POINTERS, "res", "y", "X_OFF", "W_OFF", "W_FROM_X", "N", "HP", "WP", "CIN",
              "COUT", "R", "S", "SH", "SW", "P", "Q", "IN_MAJOR", "FLIP", "BM", "BN", "BK", "GROUP", "HAS_BIAS", "ACT",
              "HAS_NORM", "EPS", "HAS_RES", "SCATTER", "OH", "OW", "DH", "DW", "PAD_H", "PAD_W", "SPLITS"]
PAD_ORDER = ["src", "dst", "DST_OFF", "N", "H", "W", "C", "HP", "WP", "LO_H", "LO_W", "DH", "DW", "BP", "BC"]


def conv_grid(problem: ConvProblem, config: ConvConfig) -> int:
    geometry = kernel_geometry(problem)
    return -(-problem.n * geometry["P"] * geometry["Q"] // config.bm) * (problem.cout // config.bn) * problem.splits


def pad_constants(n: int, h: int, w: int, c: int, hp: int, wp: int, lo_h: int, lo_w: int, dh: int, dw: int,
                  dst_off: int) -> tuple[dict[str, Any], int]:
    """The pad kernel's constants and its grid."""
    bc = min(64, 1 << (c - 1).bit_length())
    bp = 4096 // bc
    constants = {"DST_OFF": dst_off, "N": n, "H": h, "W": w, "C": c, "HP": hp, "WP": wp, "LO_H": lo_h, "LO_W": lo_w,
                 "DH": dh, "DW": dw, "BP": bp, "BC": bc}
    return constants, -(-n * hp * wp // bp) * -(-c // bc)


def generate(problem: ConvProblem, config: ConvConfig, launch: Launch, entry: str) -> Kernel:
    """Compile the kernel of one replaced executable to sm_90a PTX named ``entry``."""
    from ._triton_conv import boo_hopper_conv, boo_hopper_pad

    if launch.kernel == "conv":
        constants = conv_constants(problem, config, launch.offsets[0], launch.offsets[1], launch.w_from_x)
        pointers = ["x", *([] if launch.w_from_x else ["w"])]
        if problem.splits == 1:  # the epilogue's operands; a split's sums are another executable's
            pointers += [*(["bias"] if problem.bias else []), *(NORM_POINTERS if problem.norm else []),
                         *(["res"] if problem.residual else [])]
        pointers.append("y")
        constants.update({name: None for name in ("w", "bias", *NORM_POINTERS, "res") if name not in pointers})
        types = {"y": "*fp32"} if problem.splits > 1 else None
        compiled, ptx = compile_for_iree(boo_hopper_conv, pointers, constants, CONV_ORDER, config.num_warps,
                                         config.num_stages, entry, types=types)
        grid = conv_grid(problem, config)
    else:
        p = problem
        if launch.kernel == "pad":
            constants, grid = pad_constants(p.n, p.h, p.w, p.c, p.hp, p.wp, p.lo_h, p.lo_w, p.dh, p.dw,
                                            launch.offsets[0])
        elif launch.kernel == "compact":  # the source as it is (a pad of nothing)
            constants, grid = pad_constants(p.n, p.h, p.w, p.c, p.h, p.w, 0, 0, 1, 1, launch.offsets[0])
        else:  # the filter (cout... ) copied as it is: rows of its last dimension
            last = p.cout if p.in_major else p.cin
            rows = p.weight_numel // last
            constants, grid = pad_constants(rows, 1, 1, last, 1, 1, 0, 0, 1, 1, launch.offsets[0])
        compiled, ptx = compile_for_iree(boo_hopper_pad, ["src", "dst"], constants, PAD_ORDER, 4, 1, entry)
    return Kernel(ptx, compiled.metadata.num_warps * 32, grid, int(compiled.metadata.shared))
