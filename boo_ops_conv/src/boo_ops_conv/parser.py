"""MIOpenDriver ``conv`` commands <-> ConvSignature.

The flag table is MIOpenDriver's (``driver/conv_driver.hpp``), with its defaults. Flags
that only steer MIOpenDriver's own run (iterations, timing, verification, solver choice) are
accepted and handed to BOO's tools; flags BOO cannot honour are refused by name.

BOO's extensions, beyond MIOpenDriver (which rejects them):

* ``-F`` bit 8: the bias gradient alone (MIOpen computes it whenever ``-b 1`` runs a
  backward direction, and so does BOO).
* 1-D convolution: ``--spatial_dim 1`` or a 3-letter layout (``NCW``, ``NWC``), with the
  width flags (``-W -x -q -v -j -X``).
* ``--activation relu|gelu|silu|sigmoid|tanh``: an activation fused after the forward
  convolution (and its bias).
"""

from __future__ import annotations

import torch

from boo_core import CommandError, CommandParser, Flag, FlagKind, ParsedFlags, UnsupportedError
from boo_core.signatures.dtypes import DTYPE_TO_SUFFIX
from boo_core.signatures.flags import INT32_MAX, integer, non_negative, one_of, positive, text, upper
from boo_core.signatures.parser import format_command

from . import layouts
from .signature import ACTIVATIONS, ConvSignature, same_padding

KERNEL, RUN, REFUSED = FlagKind.KERNEL, FlagKind.RUN, FlagKind.REFUSED
_LAYOUT = one_of("", *layouts.MIOPEN_LAYOUTS, "NCW", "NWC", case=upper)
_FILES = "BOO generates its own inputs; reading tensors from files is not supported"

CONV_FLAGS: tuple[Flag, ...] = (
    Flag("batchsize", "n", 100, positive, "N: batch size"),
    Flag("in_channels", "c", 3, positive, "C: input channels (all groups)"),
    # Depth flags take 0 (MIOpen's 2-D perf lists pass --conv_stride_d 0); 3-D needs them >= 1.
    Flag("in_d", "!", 32, non_negative, "input depth (3-D only)"),
    Flag("in_h", "H", 32, positive, "input height"),
    Flag("in_w", "W", 32, positive, "input width"),
    Flag("out_channels", "k", 32, positive, "K: output channels (all groups)"),
    Flag("fil_d", "@", 3, non_negative, "filter depth (3-D only)"),
    Flag("fil_h", "y", 3, positive, "filter height"),
    Flag("fil_w", "x", 3, positive, "filter width"),
    Flag("pad_d", "$", 0, non_negative, "padding in depth (3-D only)"),
    Flag("pad_h", "p", 0, non_negative, "padding in height"),
    Flag("pad_w", "q", 0, non_negative, "padding in width"),
    Flag("conv_stride_d", "#", 1, non_negative, "stride in depth (3-D only)"),
    Flag("conv_stride_h", "u", 1, positive, "stride in height"),
    Flag("conv_stride_w", "v", 1, positive, "stride in width"),
    Flag("dilation_d", "^", 1, non_negative, "dilation in depth (3-D only)"),
    Flag("dilation_h", "l", 1, positive, "dilation in height"),
    Flag("dilation_w", "j", 1, positive, "dilation in width"),
    Flag("group_count", "g", 1, positive, "groups"),
    Flag("mode", "m", "conv", one_of("conv", "trans"), "conv, or trans (transposed convolution)"),
    Flag("forw", "F", 0, integer, "direction bitmask: 1 forward, 2 backward-data, 4 backward-weight, "
         "8 bias gradient (BOO extension), 0 the first three"),
    Flag("spatial_dim", "_", 2, integer, "spatial dimensions: 2 or 3 (1: BOO extension)"),
    Flag("in_layout", "I", "", _LAYOUT, "input layout (NCHW, NHWC, CHWN, NCDHW, NDHWC; NCW, NWC)"),
    Flag("out_layout", "O", "", _LAYOUT, "output layout"),
    Flag("fil_layout", "f", "", _LAYOUT, "filter layout (NHWC stores K, Y, X, C/groups)"),
    Flag("pad_mode", "z", "default", one_of("default", "same", "valid"), "default (use -p/-q), same or valid"),
    Flag("trans_output_pad_d", "%", 0, non_negative, "output padding in depth (trans mode)"),
    Flag("trans_output_pad_h", "Y", 0, non_negative, "output padding in height (trans mode)"),
    Flag("trans_output_pad_w", "X", 0, non_negative, "output padding in width (trans mode)"),
    Flag("bias", "b", 0, integer, "1: add a bias of shape (K,) (forward) / compute its gradient"),
    Flag("activation", None, "", one_of("", *ACTIVATIONS), "BOO extension: activation fused after the forward"),
    # Read by BOO's tools or meaningless for BOO's kernels; never part of a signature.
    Flag("iter", "i", 10, positive, "timed iterations", RUN),
    Flag("time", "t", 0, integer, "1: report kernel time", RUN),
    Flag("wall", "w", 0, integer, "wall-clock timing (MIOpen option; BOO always times)", RUN),
    Flag("verify", "V", 1, integer, "1: check numerics against a reference", RUN),
    Flag("search", "s", 0, integer, "MIOpen exhaustive Find search (no meaning for BOO)", RUN),
    Flag("solution", "S", "-1", text, "MIOpen solver choice (no meaning for BOO)", RUN),
    Flag("printconv", "P", 1, integer, "print convolution dimensions", RUN),
    Flag("pad_val", "r", 0, integer, "padding value (MIOpen ignores it too)", RUN),
    Flag("verification_cache", "C", "", text, "MIOpen reference-result cache directory (unused)", RUN),
    Flag("gpualloc", "G", 0, integer, "MIOpen: allocate on the GPU (BOO always does)", RUN),
    Flag("gpubuffer_check", "~", 0, integer, "MIOpen buffer guard check (unused)", RUN),
    Flag("init_output_nan", "N", 0, integer, "fill outputs with NaN first (BOO's checks always poison)", RUN),
    Flag("tuning_policy", "&", 0, integer, "MIOpen tuning policy (unused)", RUN),
    Flag("use_hip_graph", "J", 0, integer, "MIOpen: replay through a HIP graph (unused)", RUN),
    # Accepted only at their defaults.
    Flag("dump_output", "o", 0, integer, "dump buffers", REFUSED, "dumping buffers is not supported"),
    Flag("in_data", "d", "", text, "input data file", REFUSED, _FILES),
    Flag("weights", "e", "", text, "weights file", REFUSED, _FILES),
    Flag("in_bias", "a", "", text, "bias file", REFUSED, _FILES),
    Flag("dout_data", "D", "", text, "output-gradient file", REFUSED, _FILES),
    Flag("tensor_vect", "Z", 0, integer, "vectorized int8 tensors", REFUSED, "vectorized tensors are not supported"),
    Flag("vector_length", "L", 1, integer, "vector length for -Z 1", REFUSED, "vectorized tensors are not supported"),
    Flag("in_cast_type", "U", "-1", text, "input cast type", REFUSED, "cast types (fp8 compute) are not supported"),
    Flag("wei_cast_type", "R", "-1", text, "filter cast type", REFUSED, "cast types (fp8 compute) are not supported"),
    Flag("out_cast_type", "T", "-1", text, "output cast type", REFUSED, "cast types (fp8 compute) are not supported"),
    Flag("math_type", "M", 1, integer, "MIOpen math type", REFUSED, "only the default math type is supported"),
)


# Per spatial rank: the length, filter, padding, stride, dilation and output-padding flags.
_SPATIAL_FLAGS = {
    "d": ("in_d", "fil_d", "pad_d", "conv_stride_d", "dilation_d", "trans_output_pad_d"),
    "h": ("in_h", "fil_h", "pad_h", "conv_stride_h", "dilation_h", "trans_output_pad_h"),
    "w": ("in_w", "fil_w", "pad_w", "conv_stride_w", "dilation_w", "trans_output_pad_w"),
}
_AXES = {1: "w", 2: "hw", 3: "dhw"}
_MODE_BITS = {"fwd": 1, "bwd": 2, "wrw": 4, "bwd_bias": 8}
_AXIS_NAMES = {"d": "depth", "h": "height", "w": "width"}


class ConvParser(CommandParser):
    """Parses ``conv``, ``convfp32``, ``convfp16``, ``convbfp16`` commands."""

    flags = CONV_FLAGS

    def format(self, signature: ConvSignature, keyword: str) -> str:
        return format_conv_command(self, signature, keyword)

    def build(self, flags: ParsedFlags, *, base: str, dtype: torch.dtype) -> list[ConvSignature]:
        rank = _rank(flags)
        axes = _AXES[rank]
        transposed = flags["mode"] == "trans"
        modes = _modes(flags)
        activation = flags["activation"] or None
        if activation and modes != ["fwd"]:
            raise UnsupportedError(f"--activation fuses into the forward convolution only; use -F 1 "
                                   f"(got -F {flags['forw']})", flag=flags.label("activation"))

        sizes = {name: tuple(flags[_SPATIAL_FLAGS[axis][i]] for axis in axes)
                 for i, name in enumerate(("size", "window", "padding", "stride", "dilation", "output_padding"))}
        at_least_one = ["batchsize", "in_channels", "out_channels", "group_count"]
        for axis in axes:
            at_least_one += [_SPATIAL_FLAGS[axis][i] for i in (0, 1, 3, 4)]
        for name in at_least_one:
            flags.require(name, flags[name] >= 1, "must be at least 1")
        for axis in axes:
            for name in (_SPATIAL_FLAGS[axis][2], _SPATIAL_FLAGS[axis][5]):
                flags.require(name, flags[name] >= 0, "must not be negative")
        groups, c, k = flags["group_count"], flags["in_channels"], flags["out_channels"]
        flags.require("group_count", c % groups == 0 and k % groups == 0,
                 f"must divide in_channels {c} and out_channels {k}")

        padding = sizes["padding"] if transposed else _padding(flags["pad_mode"], sizes)
        output_padding = sizes["output_padding"] if transposed else (0,) * rank  # MIOpen ignores it for conv
        for axis, size, window, pad, stride, dilation, out_pad in zip(
                axes, sizes["size"], sizes["window"], padding, sizes["stride"], sizes["dilation"], output_padding):
            names = _SPATIAL_FLAGS[axis]
            if transposed:
                flags.require(names[5], out_pad < stride or out_pad < dilation,
                         f"must be smaller than the stride {stride} or the dilation {dilation}")
                extent = stride * (size - 1) + dilation * (window - 1) + 1 - 2 * pad + out_pad
            else:
                extent = size + 2 * pad - dilation * (window - 1)
            flags.require(names[0], extent >= 1, f"with filter {window}, padding {pad}, stride {stride} and "
                                                   f"dilation {dilation} leaves no output")
            output = extent if transposed else (extent - 1) // stride + 1
            flags.require(names[0], output <= INT32_MAX, f"with filter {window}, padding {pad}, stride {stride} and "
                                                         f"dilation {dilation} gives an output {_AXIS_NAMES[axis]} "
                                                         f"of {output}, above 2**31-1")

        kernel_shape = (c, k // groups) if transposed else (k, c // groups)
        layout = {name: flags[name] or layouts.LOGICAL[rank] for name in ("in_layout", "fil_layout", "out_layout")}
        return [ConvSignature(
            input_shape=(flags["batchsize"], c, *sizes["size"]), kernel_shape=(*kernel_shape, *sizes["window"]),
            stride=sizes["stride"], padding=padding, dilation=sizes["dilation"], groups=groups, dtype=dtype,
            input_layout=layout["in_layout"], kernel_layout=layout["fil_layout"], output_layout=layout["out_layout"],
            bias=bool(flags["bias"]) and mode == "fwd", mode=mode, transposed=transposed,
            output_padding=output_padding, activation=activation if mode == "fwd" else None) for mode in modes]


def _rank(flags: ParsedFlags) -> int:
    """Spatial rank from --spatial_dim and the layouts' lengths, which must agree with each
    other and with the flags given: a layout alone never turns a 2-D command into a 3-D
    one (that takes a depth flag or --spatial_dim 3), and a 1-D convolution takes no height
    or depth flag (it would be dropped)."""
    spatial = flags["spatial_dim"]
    if spatial not in (1, 2, 3):
        raise CommandError(f"flag {flags.label('spatial_dim')} {spatial}: expected 2 or 3 (or 1)",
                           flag=flags.label("spatial_dim"))
    given = {name: len(flags[name]) - 2 for name in ("in_layout", "fil_layout", "out_layout") if flags[name]}
    if len(set(given.values())) > 1:
        described = ", ".join(f"{flags.label(name)} {flags[name]}" for name in given)
        raise CommandError(f"layouts of different ranks: {described}", flag=flags.label(next(iter(given))))
    rank = next(iter(given.values()), spatial)
    if given:
        name = next(iter(given))
        layout = f"{flags.label(name)} {flags[name]}"
        if "spatial_dim" in flags.given and spatial != rank:
            raise CommandError(f"flag {layout} is {rank}-D but {flags.label('spatial_dim')} is {spatial}",
                               flag=flags.label(name))
        if rank == 3 and "spatial_dim" not in flags.given and not flags.given & set(_SPATIAL_FLAGS["d"]):
            raise CommandError(f"flag {layout} is 3-D, but the command is 2-D: it gives no depth flag "
                               f"({flags.label('in_d')}, {flags.label('fil_d')}...) and no "
                               f"{flags.label('spatial_dim')} 3", flag=flags.label(name))
    if rank == 1:
        dropped = [name for name in (*_SPATIAL_FLAGS["h"], *_SPATIAL_FLAGS["d"]) if name in flags.given]
        if dropped:
            why = f"{flags.label(next(iter(given)))} {flags[next(iter(given))]}" if given else \
                f"{flags.label('spatial_dim')} 1"
            raise CommandError(f"flag {flags.label(dropped[0])} {flags[dropped[0]]} does not apply to a 1-D "
                               f"convolution ({why}): 1-D takes the width flags only",
                               flag=flags.label(dropped[0]))
    return rank


def _modes(flags: ParsedFlags) -> list[str]:
    """The modes of -F (a bitmask; 0 means forward, backward-data and backward-weight).

    With -b 1, a command running a backward direction also computes the bias gradient.
    """
    forw = flags["forw"]
    if forw < 0 or forw > 15:
        raise CommandError(f"flag {flags.label('forw')} {forw}: expected a bitmask of 1, 2, 4 and 8",
                           flag=flags.label("forw"))
    if flags["bias"] not in (0, 1):
        raise CommandError(f"flag {flags.label('bias')} must be 0 or 1", flag=flags.label("bias"))
    bits = forw or 7
    if flags["bias"] and bits & 6:
        bits |= 8
    return [mode for mode, bit in _MODE_BITS.items() if bits & bit]


def _padding(mode: str, sizes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """Padding per MIOpen's --pad_mode (applied when all dilations or all filter sizes are 1)."""
    window, stride, dilation = sizes["window"], sizes["stride"], sizes["dilation"]
    if mode == "default" or not (all(d == 1 for d in dilation) or all(w == 1 for w in window)):
        return sizes["padding"]
    if mode == "valid":
        return (0,) * len(window)
    return tuple(same_padding(n, w, s) for n, w, s in zip(sizes["size"], window, stride))


def format_conv_command(parser: ConvParser, signature: ConvSignature, keyword: str) -> str:
    """The MIOpenDriver command for a signature, in MIOpen's logging style."""
    flag = parser.flag
    rank = signature.spatial_rank
    axes = _AXES[rank]
    n, c = signature.input_shape[:2]
    items = [(flag("batchsize"), n), (flag("in_channels"), c)]
    items += [(flag(_SPATIAL_FLAGS[a][0]), size) for a, size in zip(axes, signature.input_shape[2:])]
    items.append((flag("out_channels"), signature.output_channels))
    for column, values in ((1, signature.window), (2, signature.padding), (3, signature.stride),
                           (4, signature.dilation)):
        items += [(flag(_SPATIAL_FLAGS[a][column]), v) for a, v in zip(axes, values)]
    if signature.transposed:
        items += [(flag(_SPATIAL_FLAGS[a][5]), v) for a, v in zip(axes, signature.output_padding)]
    items += [(flag("mode"), "trans" if signature.transposed else "conv"), (flag("group_count"), signature.groups),
              (flag("forw"), _MODE_BITS[signature.mode])]
    if rank != 2:
        items.append((flag("spatial_dim"), rank))
    if signature.bias:
        items.append((flag("bias"), 1))
    default = layouts.LOGICAL[rank]
    for name, layout in (("in_layout", signature.input_layout), ("fil_layout", signature.kernel_layout),
                         ("out_layout", signature.output_layout)):
        if layout != default:
            if layout not in _LAYOUT_NAMES:
                raise UnsupportedError(f"{signature.func_name}: layout {layout} has no MIOpenDriver spelling")
            items.append((flag(name), layout))
    if signature.activation:
        items.append((flag("activation"), signature.activation))
    return format_command(keyword + DTYPE_TO_SUFFIX[signature.dtype], items)


_LAYOUT_NAMES = frozenset((*layouts.MIOPEN_LAYOUTS, "NCW", "NWC"))

