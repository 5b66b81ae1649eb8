"""MIOpenDriver ``conv`` commands <-> ConvSignature.

The flag table is MIOpenDriver's (``driver/conv_driver.hpp``), with its defaults. Flags
that only steer MIOpenDriver's own run (iterations, timing, verification, solver choice) are
accepted and handed to BOO's tools; flags BOO cannot honour are refused by name.
"""

from __future__ import annotations

import torch

from boo_core import CommandError, CommandParser, Flag, FlagKind, ParsedFlags, UnsupportedError
from boo_core.dtypes import DTYPE_TO_SUFFIX
from boo_core.parser import format_command, integer, one_of, text, upper

from . import layouts
from .signature import ConvSignature

KERNEL, RUN, REFUSED = FlagKind.KERNEL, FlagKind.RUN, FlagKind.REFUSED
_LAYOUT = one_of("", *layouts.MIOPEN_LAYOUTS, case=upper)
_FILES = "BOO generates its own inputs; reading tensors from files is not supported"

CONV_FLAGS: tuple[Flag, ...] = (
    Flag("batchsize", "n", 100, integer, "N: batch size"),
    Flag("in_channels", "c", 3, integer, "C: input channels (all groups)"),
    Flag("in_d", "!", 32, integer, "input depth (3-D only)"),
    Flag("in_h", "H", 32, integer, "input height"),
    Flag("in_w", "W", 32, integer, "input width"),
    Flag("out_channels", "k", 32, integer, "K: output channels (all groups)"),
    Flag("fil_d", "@", 3, integer, "filter depth (3-D only)"),
    Flag("fil_h", "y", 3, integer, "filter height"),
    Flag("fil_w", "x", 3, integer, "filter width"),
    Flag("pad_d", "$", 0, integer, "padding in depth (3-D only)"),
    Flag("pad_h", "p", 0, integer, "padding in height"),
    Flag("pad_w", "q", 0, integer, "padding in width"),
    Flag("conv_stride_d", "#", 1, integer, "stride in depth (3-D only)"),
    Flag("conv_stride_h", "u", 1, integer, "stride in height"),
    Flag("conv_stride_w", "v", 1, integer, "stride in width"),
    Flag("dilation_d", "^", 1, integer, "dilation in depth (3-D only)"),
    Flag("dilation_h", "l", 1, integer, "dilation in height"),
    Flag("dilation_w", "j", 1, integer, "dilation in width"),
    Flag("group_count", "g", 1, integer, "groups"),
    Flag("mode", "m", "conv", one_of("conv", "trans"), "conv, or trans (transposed convolution)"),
    Flag("forw", "F", 0, integer, "direction bitmask: 1 forward, 2 backward-data, 4 backward-weight, 0 all"),
    Flag("spatial_dim", "_", 2, integer, "spatial dimensions: 2 or 3"),
    Flag("in_layout", "I", "", _LAYOUT, "input layout (NCHW, NHWC, CHWN, NCDHW, NDHWC)"),
    Flag("out_layout", "O", "", _LAYOUT, "output layout"),
    Flag("fil_layout", "f", "", _LAYOUT, "filter layout (NHWC stores K, Y, X, C/groups)"),
    Flag("pad_mode", "z", "default", one_of("default", "same", "valid"), "default (use -p/-q), same or valid"),
    Flag("trans_output_pad_d", "%", 0, integer, "output padding in depth (trans mode)"),
    Flag("trans_output_pad_h", "Y", 0, integer, "output padding in height (trans mode)"),
    Flag("trans_output_pad_w", "X", 0, integer, "output padding in width (trans mode)"),
    Flag("bias", "b", 0, integer, "1: add a bias of shape (K,) (forward) / compute its gradient"),
    # Read by BOO's tools or meaningless for BOO's kernels; never part of a signature.
    Flag("iter", "i", 10, integer, "timed iterations", RUN),
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


class ConvParser(CommandParser):
    """Parses ``conv``, ``convfp32``, ``convfp16``, ``convbfp16`` commands."""

    flags = CONV_FLAGS

    def build(self, flags: ParsedFlags, *, base: str, dtype: torch.dtype) -> list[ConvSignature]:
        if dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise UnsupportedError(f"base argument {base!r}: {dtype} convolution is not supported")
        spatial = flags["spatial_dim"]
        layout_flags = [name for name in ("in_layout", "fil_layout", "out_layout") if flags[name]]
        if spatial not in (2, 3):
            raise CommandError(f"flag {flags.label('spatial_dim')} {spatial}: expected 2 or 3",
                               flag=flags.label("spatial_dim"))
        if spatial == 3 or any(len(flags[name]) == 5 for name in layout_flags):
            raise UnsupportedError("3-D convolution (--spatial_dim 3 or a 5-letter layout) is not supported yet",
                                   flag=flags.label("spatial_dim"))
        if flags["mode"] == "trans":
            raise UnsupportedError("transposed convolution (-m trans) is not supported yet",
                                   flag=flags.label("mode"))
        if flags["forw"] != 1:
            raise UnsupportedError(
                f"-F/--forw {flags['forw']} asks for backward-data or backward-weight (0 means all three); "
                "only forward (-F 1) is supported yet", flag=flags.label("forw"))
        if flags["bias"] not in (0, 1):
            raise CommandError(f"flag {flags.label('bias')} must be 0 or 1", flag=flags.label("bias"))

        for name in ("batchsize", "in_channels", "in_h", "in_w", "out_channels", "fil_h", "fil_w",
                     "conv_stride_h", "conv_stride_w", "dilation_h", "dilation_w", "group_count"):
            _require(flags, name, flags[name] >= 1, "must be at least 1")
        for name in ("pad_h", "pad_w"):
            _require(flags, name, flags[name] >= 0, "must not be negative")
        groups = flags["group_count"]
        _require(flags, "group_count", flags["in_channels"] % groups == 0 and flags["out_channels"] % groups == 0,
                 f"must divide in_channels {flags['in_channels']} and out_channels {flags['out_channels']}")

        size = (flags["in_h"], flags["in_w"])
        window = (flags["fil_h"], flags["fil_w"])
        stride = (flags["conv_stride_h"], flags["conv_stride_w"])
        dilation = (flags["dilation_h"], flags["dilation_w"])
        padding = _padding(flags, size, window, stride, dilation)
        for axis, name in enumerate(("in_h", "in_w")):
            extent = size[axis] + 2 * padding[axis] - dilation[axis] * (window[axis] - 1)
            _require(flags, name, extent >= 1,
                     f"with filter {window[axis]}, padding {padding[axis]} and dilation {dilation[axis]} "
                     "leaves no output")
        layout = {name: flags[name] or "NCHW" for name in ("in_layout", "fil_layout", "out_layout")}
        signature = ConvSignature(
            input_shape=(flags["batchsize"], flags["in_channels"], *size),
            kernel_shape=(flags["out_channels"], flags["in_channels"] // groups, *window),
            stride=stride, padding=padding, dilation=dilation, groups=groups, dtype=dtype,
            input_layout=layout["in_layout"], kernel_layout=layout["fil_layout"],
            output_layout=layout["out_layout"], bias=bool(flags["bias"]))
        return [signature]


def _require(flags: ParsedFlags, name: str, ok: bool, message: str) -> None:
    if not ok:
        raise CommandError(f"flag {flags.label(name)} {flags[name]} {message}", flag=flags.label(name))


def _padding(flags: ParsedFlags, size, window, stride, dilation) -> tuple[int, ...]:
    """Padding per MIOpen's --pad_mode (applied when all dilations or all filter sizes are 1)."""
    mode = flags["pad_mode"]
    explicit = (flags["pad_h"], flags["pad_w"])
    if mode == "default" or not (all(d == 1 for d in dilation) or all(w == 1 for w in window)):
        return explicit
    if mode == "valid":
        return (0,) * len(size)
    # "same": MIOpen's rule, a symmetric floor of TensorFlow's SAME padding.
    return tuple((max(w - s, 0) if n % s == 0 else max(w - n % s, 0)) // 2
                 for n, w, s in zip(size, window, stride))


def format_conv_command(signature: ConvSignature) -> str:
    """The MIOpenDriver command for a signature, in MIOpen's logging style."""
    flag = PARSER.flag
    n, c, h, w = signature.input_shape
    k, _, y, x = signature.kernel_shape
    items = [
        (flag("batchsize"), n), (flag("in_channels"), c), (flag("in_h"), h), (flag("in_w"), w),
        (flag("out_channels"), k), (flag("fil_h"), y), (flag("fil_w"), x),
        (flag("pad_h"), signature.padding[0]), (flag("pad_w"), signature.padding[1]),
        (flag("conv_stride_h"), signature.stride[0]), (flag("conv_stride_w"), signature.stride[1]),
        (flag("dilation_h"), signature.dilation[0]), (flag("dilation_w"), signature.dilation[1]),
        (flag("mode"), "conv"), (flag("group_count"), signature.groups), (flag("forw"), 1),
    ]
    if signature.bias:
        items.append((flag("bias"), 1))
    for name, layout in (("in_layout", signature.input_layout), ("fil_layout", signature.kernel_layout),
                         ("out_layout", signature.output_layout)):
        if layout != "NCHW":
            items.append((flag(name), layout))
    return format_command("conv" + DTYPE_TO_SUFFIX[signature.dtype], items)


#: The parser instance the plugin registers (parsers are stateless).
PARSER = ConvParser()
