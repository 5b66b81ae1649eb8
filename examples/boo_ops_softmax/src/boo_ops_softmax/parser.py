"""MIOpenDriver ``softmax`` commands <-> SoftmaxSignature.

The flag table is MIOpenDriver's (``driver/softmax_driver.hpp``), with its defaults and
meanings: ``-n -c -H -W`` the NCHW lengths, ``-a`` 0 fast / 1 accurate / 2 log-softmax,
``-m`` 0 instance / 1 channel, ``-A`` alpha, ``-B`` beta (not 0: the kernel also takes the
prior output), and ``-F`` by MIOpenDriver's rule: 0 forward and backward, 1 forward, 2
backward. Newer MIOpen adds ``-L/--layout``; BOO accepts NCHW, its default, only.
"""

from __future__ import annotations

import math

import torch

from boo_core import CommandParser, Flag, FlagKind, ParsedFlags, UnsupportedError
from boo_core.dtypes import DTYPE_TO_SUFFIX
from boo_core.parser import format_command, integer, number, one_of, upper

from .signature import ALGORITHMS, DTYPES, SOFTMAX_MODES, SoftmaxSignature

RUN, REFUSED = FlagKind.RUN, FlagKind.REFUSED

SOFTMAX_FLAGS: tuple[Flag, ...] = (
    Flag("batchsize", "n", 100, integer, "N"),
    Flag("in_channels", "c", 3, integer, "C"),
    Flag("in_h", "H", 32, integer, "H"),
    Flag("in_w", "W", 32, integer, "W"),
    Flag("algorithm", "a", 1, integer, "0 fast, 1 accurate (the maximum subtracted first), 2 log-softmax"),
    Flag("mode", "m", 1, integer, "0 instance (softmax over C*H*W), 1 channel (over C)"),
    Flag("alpha", "A", 1.0, number, "scale of the result"),
    Flag("beta", "B", 0.0, number, "scale of the prior output added to the result"),
    Flag("forw", "F", 0, integer, "0 forward and backward, 1 forward, 2 backward"),
    Flag("layout", "L", "NCHW", one_of("NCHW", "NHWC", case=upper), "tensor layout", REFUSED,
         "BOO's softmax reads NCHW tensors"),
    # Read by BOO's tools, never part of a signature.
    Flag("iter", "i", 10, integer, "timed iterations", RUN),
    Flag("verify", "V", 1, integer, "1: check numerics against a reference", RUN),
    Flag("time", "t", 0, integer, "1: report kernel time", RUN),
    Flag("wall", "w", 0, integer, "wall-clock timing (MIOpen option; BOO always times)", RUN),
)


class SoftmaxParser(CommandParser):
    """Parses ``softmax``, ``softmaxfp16`` and ``softmaxbfp16`` commands."""

    flags = SOFTMAX_FLAGS

    def build(self, flags: ParsedFlags, *, base: str, dtype: torch.dtype) -> list[SoftmaxSignature]:
        if dtype not in DTYPES:
            raise UnsupportedError(f"base argument {base!r}: {dtype} softmax is not supported; use softmax, "
                                   "softmaxfp16 or softmaxbfp16")
        for name in ("batchsize", "in_channels", "in_h", "in_w"):
            flags.require(name, flags[name] >= 1, "must be at least 1")
        flags.require("algorithm", flags["algorithm"] in (0, 1, 2), "must be 0 (fast), 1 (accurate) or 2 (log)")
        flags.require("mode", flags["mode"] in (0, 1), "must be 0 (instance) or 1 (channel)")
        for name in ("alpha", "beta"):
            flags.require(name, math.isfinite(flags[name]), "must be finite")
        forw = flags["forw"]
        flags.require("forw", forw >= 0, "must not be negative")
        # MIOpenDriver's rule: forward when F is 0 or odd, backward unless F is 1.
        modes = [mode for mode, runs in (("fwd", forw == 0 or forw & 1), ("bwd", forw != 1)) if runs]
        return [SoftmaxSignature(
            n=flags["batchsize"], c=flags["in_channels"], h=flags["in_h"], w=flags["in_w"],
            algorithm=ALGORITHMS[flags["algorithm"]], softmax_mode=SOFTMAX_MODES[flags["mode"]],
            alpha=flags["alpha"], beta=flags["beta"], dtype=dtype, mode=mode) for mode in modes]


def format_softmax_command(signature: SoftmaxSignature) -> str:
    """The command for one signature: every kernel flag, and ``-F 1`` or ``-F 2``."""
    flag = PARSER.flag
    items = [
        (flag("batchsize"), signature.n), (flag("in_channels"), signature.c),
        (flag("in_h"), signature.h), (flag("in_w"), signature.w),
        (flag("algorithm"), ALGORITHMS.index(signature.algorithm)),
        (flag("mode"), SOFTMAX_MODES.index(signature.softmax_mode)),
        (flag("alpha"), signature.alpha), (flag("beta"), signature.beta),
        (flag("forw"), 1 if signature.mode == "fwd" else 2),
    ]
    return format_command("softmax" + DTYPE_TO_SUFFIX[signature.dtype], items)


#: The parser instance the plugin registers (parsers are stateless).
PARSER = SoftmaxParser()
