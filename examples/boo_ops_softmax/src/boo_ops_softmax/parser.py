"""MIOpenDriver ``softmax`` commands <-> SoftmaxSignature.

The flag table is MIOpenDriver's (``driver/softmax_driver.hpp``), with its defaults and
meanings: ``-n -c -H -W`` the NCHW lengths, ``-a`` 0 fast / 1 accurate / 2 log-softmax,
``-m`` 0 instance / 1 channel, ``-A`` alpha, ``-B`` beta (not 0: the kernel also takes the
prior output), and ``-F`` by MIOpenDriver's rule: forward when it is 0 or odd, backward
unless it is 1. Newer MIOpen adds ``-L/--layout``; BOO accepts NCHW, its default, only.

Each kernel flag names the signature field it sets, so boo_core's parser builds
signatures and writes commands from this table alone.
"""

from __future__ import annotations

from boo_core.plugin import (
    CommandParser,
    Directions,
    Flag,
    FlagKind,
    Integer,
    ParsedFlags,
    indexed,
    number,
    one_of,
    positive,
    run_flags,
    upper,
)

from .signature import ALGORITHMS, SOFTMAX_MODES, SoftmaxSignature

SOFTMAX_FLAGS: tuple[Flag, ...] = (
    Flag("batchsize", "n", 100, positive, "N", field="n"),
    Flag("in_channels", "c", 3, positive, "C", field="c"),
    Flag("in_h", "H", 32, positive, "H", field="h"),
    Flag("in_w", "W", 32, positive, "W", field="w"),
    Flag("algorithm", "a", "accurate", indexed(*ALGORITHMS), "0 fast, 1 accurate (the maximum subtracted first), "
         "2 log-softmax", field="algorithm"),
    Flag("mode", "m", "channel", indexed(*SOFTMAX_MODES), "0 instance (softmax over C*H*W), 1 channel (over C)",
         field="softmax_mode"),
    Flag("alpha", "A", 1.0, number, "scale of the result", field="alpha"),
    Flag("beta", "B", 0.0, number, "scale of the prior output added to the result", field="beta"),
    Flag("forw", "F", 0, Integer(0), "0 forward and backward, 1 forward, 2 backward"),
    Flag("layout", "L", "NCHW", one_of("NCHW", "NHWC", case=upper), "tensor layout", FlagKind.REFUSED,
         "BOO's softmax reads NCHW tensors"),
    *run_flags(),
)


class SoftmaxParser(CommandParser):
    """Parses ``softmax``, ``softmaxfp16`` and ``softmaxbfp16`` commands."""

    flags = SOFTMAX_FLAGS
    signature_class = SoftmaxSignature
    directions = Directions({"fwd": 1, "bwd": 2}, zero=("fwd", "bwd"))

    def modes(self, flags: ParsedFlags) -> list[str | None]:
        """MIOpenDriver's rule for -F, which is not quite a bitmask: forward when it is 0 or
        odd, backward unless it is 1 (so 4 means backward)."""
        forw = flags["forw"]
        return [mode for mode, runs in (("fwd", forw == 0 or forw & 1), ("bwd", forw != 1)) if runs]
