"""Depthwise convolutions: Triton kernels in place of IREE's executables of the conv op's
``depthwise`` formulation (channels-last, one channel per group).

IREE 3.13's module of that formulation on CUDA (cross-compiled with ``boo dump``):

* a forward: the filter rearranged tap-major ``(R, S, C)`` into a transient, then one
  executable binding x, that transient, [the bias,] y, x's padding fused in. The
  rearrangement stays IREE's; the second is replaced by ``boo_hopper_depthwise``, which reads
  x as stored (zeros outside it);
* a stride-1 data gradient: the same, over dY, the taps also reversed;
* a weight gradient: the products of parts of the batch into a float32 ``(parts, R, S, C)``
  transient, then IREE's sum over the parts. The first is replaced by
  ``boo_hopper_depthwise_wgrad``, which reads dY once and x where each tap reads it.

Served: bf16, 2-D, NHWC x and y and an NHWC-stored filter ``(C, R, S, 1)``, groups = C,
undilated, not transposed; a forward with no activation (a bias is added), a stride-1 data
gradient, a weight gradient. :func:`plan` and :func:`plan_wgrad` find the executables by
their bindings' sizes (the weight gradient's x and dY by the contraction's operands, as
:func:`wgrad.contraction_operands` reads them) and refuse a module of any other shape
(ValueError); BOO verifies the substitution before first use. Everything here but
:func:`generate` runs without Triton or a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import wgrad
from .layernorm import triton_power_of_two
from .ptx import Kernel, bindings_of, compile_for_iree

FORMULATION = "depthwise"  # the conv op's linalg formulation whose module this library knows
ORDER = ["src", "taps", "bias", "out", "SRC_OFF", "TAPS_OFF", "H", "W", "C", "R", "S", "SH", "SW", "PH", "PW", "P",
         "Q", "HAS_BIAS", "BQ", "BC"]
WGRAD_ORDER = ["a", "b", "part", "A_OFF", "B_OFF", "PART_OFF", "X_IS_A", "IMAGES", "H", "W", "C", "R", "S", "SB",
               "SH", "SW", "PH", "PW", "P", "Q", "BQ", "BC"]


@dataclass(frozen=True)
class DepthwiseProblem:
    """A depthwise convolution as the kernels compute it: the source image ``(n, h, w, c)``
    (x; dY for a data gradient) read by an ``r x s`` window at stride ``(sh, sw)`` from
    ``(-ph, -pw)``, giving ``(n, p, q, c)`` (y, dX; for a weight gradient dY's pixels)."""

    mode: str  # fwd, bwd (dX from dY) or wrw (dW from dY and x)
    n: int
    h: int
    w: int
    c: int
    r: int
    s: int
    sh: int
    sw: int
    ph: int
    pw: int
    p: int
    q: int
    bias: bool = False

    @property
    def source_numel(self) -> int:
        return self.n * self.h * self.w * self.c

    @property
    def output_numel(self) -> int:
        return self.n * self.p * self.q * self.c

    @property
    def taps(self) -> int:
        return self.c * self.r * self.s


@dataclass(frozen=True)
class DepthwiseConfig:
    bq: int  # output pixels (dY's, for a weight gradient) of one row a program takes at a time
    bc: int  # channels a program takes
    num_warps: int


def problem_of(signature: Any) -> DepthwiseProblem | None:
    """The problem for a BOO conv signature this library's depthwise kernels serve (module
    docstring), else None. Duck-typed: the library needs no op package."""
    try:
        s = signature
        if not (getattr(s, "op_name", None) == "conv" and s.dtype == torch.bfloat16 and s.spatial_rank == 2
                and not s.transposed and all(d == 1 for d in s.dilation)
                and (s.input_layout, s.kernel_layout, s.output_layout) == ("NHWC", "NHWC", "NHWC")):
            return None
        n, c, h, w = s.input_shape
        if not (s.groups == c > 1 and tuple(s.kernel_shape[:2]) == (c, 1)):
            return None
        r, t = s.kernel_shape[2:]
        p, q = s.output_spatial
        (sh, sw), (ph, pw) = s.stride, s.padding
    except (AttributeError, TypeError, ValueError):
        return None
    if s.mode == "fwd" and s.activation is None:
        return DepthwiseProblem("fwd", n, h, w, c, r, t, sh, sw, ph, pw, p, q, bool(s.bias))
    if s.mode == "bwd" and (sh, sw) == (1, 1) and ph <= r - 1 and pw <= t - 1:
        return DepthwiseProblem("bwd", n, p, q, c, r, t, 1, 1, r - 1 - ph, t - 1 - pw, h, w)
    if s.mode == "wrw":
        return DepthwiseProblem("wrw", n, h, w, c, r, t, sh, sw, ph, pw, p, q)
    return None


def choose_config(problem: DepthwiseProblem) -> DepthwiseConfig:
    """The tiles ``bench_depthwise.py`` measured best or within 6% of it on ConvNeXt-T's rows
    (H200, µs, the first guess -> this; README.md): a forward or data gradient takes 64
    channels a program where they divide C, else 32 with 32 pixels of rows wider than 16 (96
    @56: 156.5 -> 126.3), else 16 pixels (8 for rows of 8 or fewer), on 4 warps. A weight
    gradient, whose programs are few (parts x channel blocks x window rows) and each loop over
    their images' rows, takes 16 channels on 2 warps (768 @7: 70.1 -> 36.8; 384 @14: 63.7 ->
    50.2; 96 @56: 260.3 -> 255.9; the S taps' tiles are held at once). Slower there: a
    weight gradient's rows 32 pixels at a time on 8 warps (96 @56: 317 against 262), and one
    flat loop whose loads Triton's pipeliner issues 3 steps ahead (96 @56 260 against 262,
    but 768 @7, 384 @14, 192 @28 87, 81, 124 against 70, 64, 93)."""
    bq = max(8, min(16, triton_power_of_two(problem.q)))
    if problem.mode == "wrw":
        return _warps_for(DepthwiseConfig(bq, 16, 0))
    bc = 64 if problem.c % 64 == 0 else 32
    return DepthwiseConfig(32 if bc == 32 and problem.q > 16 else bq, bc, 4)


def _warps_for(config: DepthwiseConfig) -> DepthwiseConfig:
    """A weight gradient's tiles with a warp per 128 pixel-channels, 2 to 8."""
    return DepthwiseConfig(config.bq, config.bc, max(2, min(8, config.bq * config.bc // 128)))


def alternatives(problem: DepthwiseProblem, chosen: DepthwiseConfig) -> list[DepthwiseConfig]:
    """Other tiles ``boo tune`` times beside ``chosen``: half and twice the pixels and the
    channels (8 to 64 pixels; 16 to 128 channels, a weight gradient's 8 to 64)."""
    found = [DepthwiseConfig(bq, bc, chosen.num_warps)
             for bq, bc in ((chosen.bq // 2, chosen.bc), (chosen.bq * 2, chosen.bc), (chosen.bq, chosen.bc // 2),
                            (chosen.bq, chosen.bc * 2))]
    lowest, highest = (8, 64) if problem.mode == "wrw" else (16, 128)
    if problem.mode == "wrw":
        found = [_warps_for(config) for config in found]
    return [c for c in dict.fromkeys(found) if c != chosen and 8 <= c.bq <= 64 and lowest <= c.bc <= highest]


def config_label(config: DepthwiseConfig) -> str:
    """A configuration as a substitution's name suffix: ``16x64`` (pixels by channels)."""
    return f"{config.bq}x{config.bc}"


@dataclass(frozen=True)
class Launch:
    """The replaced executable, the element offsets of its first two tensors (source and
    taps; a weight gradient's x and dY in binding order), and for a weight gradient the
    parts of the batch and whether x is the first binding."""

    executable: Any
    offsets: tuple[int, int]
    part_offset: int = 0
    parts: int = 0
    x_first: bool = True


def _only(spans: list[wgrad.Span], numel: int, dtype: str, readonly: bool, what: str, name: str) -> wgrad.Span:
    found = [sp for sp in spans if (sp.numel, sp.dtype, sp.access == "readonly") == (numel, dtype, readonly)]
    if len(found) != 1:
        raise ValueError(f"{name}: {len(found)} tensors could be {what} ({numel} {dtype}) among {spans}")
    return found[0]


def plan(problem: DepthwiseProblem, executables: Any) -> Launch:
    """The executable of a forward's or a data gradient's module that convolves (bindings
    source, taps, [bias,] output: the second of the module's two; the first rearranges the
    taps and stays); ValueError for a module of any other shape."""
    pb = problem
    if len(executables) != 2:
        raise ValueError(f"expected 2 executables, found {bindings_of(executables)}")
    conv = executables[-1]
    found = wgrad.spans(conv)
    wgrad.check_bindings(conv, found)
    if pb.source_numel == pb.taps:
        raise ValueError(f"{conv.name}: the image and the filter have the same size: cannot tell them apart")
    source = _only(found, pb.source_numel, "bf16", True, "the source image", conv.name)
    taps = _only(found, pb.taps, "bf16", True, "the taps", conv.name)
    out = _only(found, pb.output_numel, "bf16", False, "the output", conv.name)
    order = [source, taps, *([_only(found, pb.c, "bf16", True, "the bias", conv.name)] if pb.bias else []), out]
    if len(found) != len(order) or [sp.binding for sp in order] != list(range(len(order))):
        raise ValueError(f"{conv.name}: tensors {found}, expected source, taps, [bias,] output in binding order")
    if any(sp.offset for sp in order[2:]):
        raise ValueError(f"{conv.name}: the bias or the output is at an offset")
    return Launch(conv, (source.element_offset, taps.element_offset))


def plan_wgrad(problem: DepthwiseProblem, executables: Any) -> Launch:
    """The products' executable of a weight gradient's module (x and dY, then float32 partial
    sums ``(parts, R, S, C)``; the module's second executable sums them and stays);
    ValueError for a module of any other shape."""
    pb = problem
    if len(executables) != 2:
        raise ValueError(f"expected 2 executables, found {bindings_of(executables)}")
    products = executables[0]
    found = wgrad.spans(products)
    wgrad.check_bindings(products, found)
    x, dy = wgrad.contraction_operands(products, found)
    part = [sp for sp in found if sp not in (x, dy)]
    if len(part) != 1 or part[0].dtype != "f32" or part[0].shape[1:] != (pb.r, pb.s, pb.c):
        raise ValueError(f"{products.name}: tensors {found}, expected float32 partial sums (parts, {pb.r}, {pb.s}, "
                         f"{pb.c})")
    parts = part[0].shape[0]
    if (x.numel, dy.numel) != (pb.source_numel, pb.output_numel) or "f32" in (x.dtype, dy.dtype) \
            or pb.n % parts or sorted((x.binding, dy.binding)) != [0, 1] or part[0].binding != 2:
        raise ValueError(f"{products.name}: x {x}, dY {dy}, partial sums {part[0]}: not the module of {pb}")
    first, second = sorted((x, dy), key=lambda sp: sp.binding)
    return Launch(products, (first.element_offset, second.element_offset), part[0].element_offset, parts,
                  x_first=x.binding == 0)


def generate(problem: DepthwiseProblem, config: DepthwiseConfig, launch: Launch, entry: str) -> Kernel:
    """Compile the kernel replacing ``launch``'s executable to sm_90a PTX named ``entry``."""
    from ._triton_depthwise import boo_hopper_depthwise, boo_hopper_depthwise_wgrad

    pb = problem
    geometry = {"H": pb.h, "W": pb.w, "C": pb.c, "R": pb.r, "S": pb.s, "SH": pb.sh, "SW": pb.sw, "PH": pb.ph,
                "PW": pb.pw, "P": pb.p, "Q": pb.q, "BQ": config.bq, "BC": config.bc}
    channel_blocks = -(-pb.c // config.bc)
    if pb.mode == "wrw":
        constants = {"A_OFF": launch.offsets[0], "B_OFF": launch.offsets[1], "PART_OFF": launch.part_offset,
                     "X_IS_A": launch.x_first, "IMAGES": pb.n // launch.parts, "SB": triton_power_of_two(pb.s),
                     **geometry}
        compiled, ptx = compile_for_iree(boo_hopper_depthwise_wgrad, ["a", "b", "part"], constants, WGRAD_ORDER,
                                         config.num_warps, 1, entry, types={"part": "*fp32"})
        grid: tuple[int, int, int] = (launch.parts, channel_blocks, pb.r)
    else:
        pointers = ["src", "taps", *(["bias"] if pb.bias else []), "out"]
        constants = {"SRC_OFF": launch.offsets[0], "TAPS_OFF": launch.offsets[1], "HAS_BIAS": pb.bias, **geometry}
        if not pb.bias:
            constants["bias"] = None
        compiled, ptx = compile_for_iree(boo_hopper_depthwise, pointers, constants, ORDER, config.num_warps, 1, entry)
        grid = (pb.n * pb.p * -(-pb.q // config.bq), channel_blocks, 1)
    return Kernel(ptx, compiled.metadata.num_warps * 32, grid, int(compiled.metadata.shared))
