"""MIOpenDriver ``layernorm`` commands <-> LayerNormSignature, in MIOpen's three dialects.

MIOpen changed its layernorm syntax incompatibly, and its library logs a third form:

==========  =================================================  ===================================
dialect     sizes                                              ``-F/--forw``
==========  =================================================  ===================================
old         ``-X/--input 100x3x32x32`` (any rank)              default 1. MIOpen ran forward only;
                                                               BOO reads iree-turbine's bitmask:
                                                               1 forward, 2 dx, 4 dw, 8 db, 0 all
new         ``-N -C [-D] -H -W`` (2-D ``-N n -C 0 -H 0 -W w``)  default 0. MIOpen's rule: 0 both,
            and ``-L/--layout``                                1 forward, other values backward
log         ``layernormfp32 -n -c [-D] [-H] [-W]``: the line   (dx, dw and db together)
            MIOpen's library logs
==========  =================================================  ===================================

No flag letter means two things across the dialects (``-n/-c`` exist only in the log,
``-N/-C`` only in the new dialect, ``-D/-H/-W`` mean the same in both), so one flag table
holds all three, and the size flags a command gives decide its dialect; mixing two dialects'
size flags is an error. A command with no size flags gets the new dialect's defaults
(100x3x32x32, ``-F 0``). Everywhere: normalized shape = ``dims[o:]`` (``-o``, default 3),
``-m 0`` no affine, ``-m 1`` weight and bias. BOO adds ``--bias 0|1`` to drop the bias from
``-m 1`` (weight only) or add one to ``-m 0`` (bias only). ``to_command()`` writes the old
dialect, the only one that can say every signature (any rank, any set of gradients).
"""

from __future__ import annotations

import math
import re

import torch

from boo_core import CommandError, CommandParser, Flag, FlagKind, ParsedFlags, UnsupportedError
from boo_core.signatures.dtypes import DTYPE_TO_SUFFIX
from boo_core.signatures.flags import INT32_MAX, OutOfRange, integer, non_negative, number, one_of, positive, upper
from boo_core.signatures.parser import format_command
from boo_core.signatures.signature import representable_problem

from .signature import FLOAT_DTYPES, GRADIENTS, LayerNormSignature, stats_dtype

KERNEL, RUN = FlagKind.KERNEL, FlagKind.RUN

# MIOpen's miopenLayerNormMode_t values that belong to other ops (addlayernorm, t5layernorm).
_OTHER_MODES = {2: "ELEMENTWISE_AFFINE_FUSED_ADD", 3: "WEIGHT_BIAS_FUSED_ADD", 4: "ELEMENTWISE_AFFINE_T5",
                5: "WEIGHT_BIAS_T5"}
_LAYOUT_RANK = {"NW": 2, "NCHW": 4, "NHWC": 4, "NCDHW": 5, "NDHWC": 5}
_TENSOR = re.compile(r"[0-9]+(x[0-9]+)*", re.ASCII)
#: Most dims a -X/--input descriptor may give (MIOpen's layernorm takes up to 5).
MAX_RANK = 8
_BITS = {1: "fwd", 2: "dx", 4: "dw", 8: "db"}


def tensor_lengths(text: str) -> tuple[int, ...]:
    """An MIOpen tensor descriptor ``AxBxC[,layout or strides]``; like MIOpenDriver's layernorm,
    only the lengths are used: ASCII digits, at most :data:`MAX_RANK` of them, each up to 2**31-1."""
    lengths = text.split(",", 1)[0].strip(" \t").lower()
    if not _TENSOR.fullmatch(lengths):
        raise ValueError("expected lengths such as 100x3x32x32")
    dims = lengths.split("x")
    if len(dims) > MAX_RANK:
        raise OutOfRange(f"has {len(dims)} lengths: at most {MAX_RANK} are supported")
    if any(len(d.lstrip("0")) > 10 or int(d) > INT32_MAX for d in dims):
        raise OutOfRange(f"has a length above {INT32_MAX}")
    return tuple(int(d) for d in dims)


LAYERNORM_FLAGS: tuple[Flag, ...] = (
    # Old dialect (MIOpen until 2025, iree-turbine).
    Flag("input", "X", None, tensor_lengths, "old dialect: input lengths AxBxC... (any rank)"),
    # New dialect (rocm-libraries MIOpen).
    Flag("in_n", "N", 100, non_negative, "new dialect: N"),
    Flag("in_c", "C", 3, non_negative, "new dialect: C (0 with -H 0 for a 2-D N x W input)"),
    Flag("in_d", "D", 0, non_negative, "new and log dialects: D (0: no depth)"),
    Flag("in_h", "H", 32, non_negative, "new and log dialects: H"),
    Flag("in_w", "W", 32, non_negative, "new and log dialects: W"),
    Flag("layout", "L", "", one_of("", *_LAYOUT_RANK, case=upper), "new dialect: NW, NCHW or NCDHW"),
    # Library log dialect (MIOPEN_ENABLE_LOGGING_CMD); MIOpen gives these letters no long name.
    Flag("batchsize", "n", None, positive, "log dialect: dim 0"),
    Flag("in_channels", "c", None, positive, "log dialect: dim 1"),
    # Shared.
    Flag("normalized_dim", "o", 3, integer, "first normalized dim: normalized shape = dims[o:]"),
    Flag("mode", "m", 0, integer, "0: no affine parameters; 1: weight and bias"),
    Flag("eps", "e", 1e-5, number, "epsilon added to the variance"),
    Flag("forw", "F", None, integer, "direction; default 1 (old dialect) or 0 (new, log): see the module doc"),
    Flag("bias", None, None, integer, "BOO extension: 0 drops the bias of -m 1, 1 adds one to -m 0"),
    # Read by BOO's tools, never part of a signature.
    Flag("iter", "i", 10, positive, "timed iterations", RUN),
    Flag("verify", "V", 1, integer, "1: check numerics against a reference", RUN),
    Flag("time", "t", 0, integer, "1: report kernel time", RUN),
    Flag("wall", "w", 0, integer, "wall-clock timing (MIOpen option; BOO always times)", RUN),
    Flag("mt", "u", 0, integer, "MIOpen: multithreaded CPU reference (no meaning for BOO)", RUN),
)

_OLD_SIZES = ("input",)
_NEW_SIZES = ("in_n", "in_c", "layout")
_LOG_SIZES = ("batchsize", "in_channels")
_SPATIAL = ("in_d", "in_h", "in_w")


class LayerNormParser(CommandParser):
    """Parses ``layernorm``, ``layernormfp32``, ``layernormfp16``, ``layernormbfp16`` commands."""

    flags = LAYERNORM_FLAGS
    dtypes = FLOAT_DTYPES

    def build(self, flags: ParsedFlags, *, base: str, dtype: torch.dtype) -> list[LayerNormSignature]:
        dialect = _dialect(flags)
        shape = {"old": _old_shape, "new": _new_shape, "log": _log_shape}[dialect](flags)
        rank = len(shape)
        if not 0 <= flags["normalized_dim"] < rank:
            raise CommandError(f"flag {flags.label('normalized_dim')} {flags['normalized_dim']} is out of range for "
                               f"the {rank}-D input {'x'.join(map(str, shape))} (0 <= o < {rank})",
                               flag=flags.label("normalized_dim"))
        if not (math.isfinite(flags["eps"]) and flags["eps"] >= 0):
            raise CommandError(f"flag {flags.label('eps')} {flags['eps']} must be finite and not negative",
                               flag=flags.label("eps"))
        problem = representable_problem(flags["eps"], stats_dtype(dtype))
        flags.require("eps", problem is None, f"{problem}, the dtype the variance is computed in")
        weight, bias = _affine(flags)
        common = dict(input_shape=shape, normalized_dim=flags["normalized_dim"], weight=weight, bias=bias,
                      eps=flags["eps"], dtype=dtype)
        return [LayerNormSignature(**common, mode=mode, gradients=grads)
                for mode, grads in _directions(flags, dialect, weight, bias)]

    def format(self, signature: LayerNormSignature, keyword: str) -> str:
        """The old-dialect command for a signature (it can express every one)."""
        flag = self.flag
        if signature.mode == "fwd":
            forw = 1
        else:
            forw = sum(bit for bit, name in _BITS.items() if name in signature.gradients)
        items = [
            (flag("input"), "x".join(map(str, signature.input_shape))),
            (flag("normalized_dim"), signature.normalized_dim),
            (flag("mode"), int(signature.weight)),
            (flag("eps"), signature.eps),
            (flag("forw"), forw),
        ]
        if signature.bias != signature.weight:
            items.append((flag("bias"), int(signature.bias)))
        return format_command(keyword + DTYPE_TO_SUFFIX[signature.dtype], items)


def _dialect(flags: ParsedFlags) -> str:
    given = {name for name in (*_OLD_SIZES, *_NEW_SIZES, *_LOG_SIZES) if name in flags.given}
    if "input" in given:
        others = [name for name in (*_NEW_SIZES, *_LOG_SIZES, *_SPATIAL) if name in flags.given]
        if others:
            raise CommandError(f"flag {flags.label(others[0])} cannot be combined with {flags.label('input')}: "
                               "the old dialect gives every length in -X", flag=flags.label(others[0]))
        return "old"
    log = [name for name in _LOG_SIZES if name in given]
    new = [name for name in _NEW_SIZES if name in given]
    if log and new:
        raise CommandError(f"flag {flags.label(new[0])} (new dialect) cannot be combined with "
                           f"{flags.label(log[0])} (MIOpen's log dialect)", flag=flags.label(new[0]))
    return "log" if log else "new"


def _old_shape(flags: ParsedFlags) -> tuple[int, ...]:
    shape = flags["input"]
    if min(shape) < 1:
        raise CommandError(f"flag {flags.label('input')} {'x'.join(map(str, shape))}: every length must be at least 1",
                           flag=flags.label("input"))
    return shape


def _new_shape(flags: ParsedFlags) -> tuple[int, ...]:
    """MIOpen's rule: D set -> NCDHW; else C and H set -> NCHW; else N, W only -> NW."""
    n, c, d, h, w = (flags[name] for name in ("in_n", "in_c", "in_d", "in_h", "in_w"))
    if d:
        shape, names = (n, c, d, h, w), ("in_n", "in_c", "in_h", "in_w")
    elif c and h:
        shape, names = (n, c, h, w), ("in_n", "in_w")
    elif n and not c and not h and w:
        shape, names = (n, w), ()
    else:
        zero = next(name for name in ("in_n", "in_c", "in_h", "in_w") if not flags[name])
        raise CommandError(f"flag {flags.label(zero)} 0: invalid tensor sizes -N {n} -C {c} -H {h} -W {w}: "
                           "give -N -C -H -W (4-D), "
                           "add -D (5-D), or -N -W with -C 0 -H 0 (2-D)", flag=flags.label(zero))
    for name in names:
        flags.require(name, flags[name] >= 1, f"must be at least 1 for a {len(shape)}-D input")
    layout = flags["layout"]
    if layout and _LAYOUT_RANK[layout] != len(shape):
        raise CommandError(f"flag {flags.label('layout')} {layout} does not fit the {len(shape)}-D input "
                           f"{'x'.join(map(str, shape))}", flag=flags.label("layout"))
    if layout in ("NHWC", "NDHWC"):
        raise UnsupportedError(f"flag {flags.label('layout')} {layout} is not supported yet: BOO normalizes "
                               "NW, NCHW and NCDHW tensors", flag=flags.label("layout"))
    return shape


def _log_shape(flags: ParsedFlags) -> tuple[int, ...]:
    """MIOpen's log: -n -c, then -D -H -W for 5-D, -H -W for 4-D, -W for 3-D, nothing for 2-D."""
    for name in _LOG_SIZES:
        if name not in flags.given:
            raise CommandError(f"flag {flags.label(name)} is missing: MIOpen's log line gives -n and -c",
                               flag=flags.label(name))
    spatial = tuple(name for name in _SPATIAL if name in flags.given)
    if spatial not in ((), ("in_w",), ("in_h", "in_w"), ("in_d", "in_h", "in_w")):
        missing = next(name for name in ("in_w", "in_h") if name not in spatial)
        raise CommandError(f"flag {flags.label(missing)} is missing: after -n -c, MIOpen's log gives -W (3-D), "
                           "-H -W (4-D) or -D -H -W (5-D)", flag=flags.label(missing))
    names = (*_LOG_SIZES, *spatial)
    for name in names:
        flags.require(name, flags[name] >= 1, "must be at least 1")
    return tuple(flags[name] for name in names)


def _affine(flags: ParsedFlags) -> tuple[bool, bool]:
    mode = flags["mode"]
    if mode in _OTHER_MODES:
        raise UnsupportedError(f"flag {flags.label('mode')} {mode} ({_OTHER_MODES[mode]}) belongs to MIOpen's "
                               "addlayernorm/t5layernorm, which BOO does not provide", flag=flags.label("mode"))
    flags.require("mode", mode in (0, 1), "must be 0 (no affine) or 1 (weight and bias)")
    bias = flags["bias"]
    if bias is None:
        return bool(mode), bool(mode)
    flags.require("bias", bias in (0, 1), "must be 0 or 1")
    return bool(mode), bool(bias)


def _directions(flags: ParsedFlags, dialect: str, weight: bool,
                bias: bool) -> list[tuple[str, tuple[str, ...] | None]]:
    """(mode, gradients) per signature the command runs."""
    forw = flags["forw"]
    label = flags.label("forw")
    if forw is None:
        forw = 1 if dialect == "old" else 0
    if forw < 0:
        raise CommandError(f"flag {label} {forw} must not be negative", flag=label)
    if dialect != "old":  # MIOpen: forward if bit 0 is set or F is 0; backward unless F is 1
        return ([("fwd", None)] if forw & 1 or forw == 0 else []) + ([("bwd", None)] if forw != 1 else [])
    if forw > 15:
        raise CommandError(f"flag {label} {forw}: the old dialect's bitmask is 1 forward, 2 dx, 4 dw, 8 db "
                           "(0 all)", flag=label)
    chosen = [name for bit, name in _BITS.items() if forw & bit] if forw else None
    for grad, present, param in (("dw", weight, "weight"), ("db", bias, "bias")):
        if chosen and grad in chosen and not present:
            raise CommandError(f"flag {label} {forw} asks for {grad}, but the command has no {param} "
                               "(-m 1 has weight and bias)", flag=label)
    if chosen is None:
        return [("fwd", None), ("bwd", None)]
    grads = tuple(g for g in GRADIENTS if g in chosen)
    return ([("fwd", None)] if "fwd" in chosen else []) + ([("bwd", grads)] if grads else [])
