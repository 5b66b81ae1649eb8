"""MIOpenDriver-style ``rmsnorm`` commands <-> RMSNormSignature.

MIOpenDriver has no RMS-norm command of this name, so the flags follow its ``layernorm``
command's 2-D form (``layernorm -N rows -C 0 -H 0 -W size``): ``-N/--in_n`` the rows,
``-W/--in_w`` the normalized size, ``-e/--eps``, ``-F/--forw`` 1 forward, 2 backward, 0 (or
3) both, and MIOpen's run flags ``-i -t -w -V``. Every kernel flag names the signature field
it sets, so boo_core's parser builds signatures and writes commands from this table alone;
:meth:`RMSNormParser.check` adds eps's bounds, so that they are refused naming the flag.
"""

from __future__ import annotations

from boo_core.plugin import (
    CommandParser,
    Directions,
    Flag,
    ParsedFlags,
    number,
    positive,
    representable_problem,
    run_flags,
)

from .signature import RSTD_DTYPE, RMSNormSignature

DIRECTIONS = Directions({"fwd": 1, "bwd": 2}, zero=("fwd", "bwd"))

RMSNORM_FLAGS: tuple[Flag, ...] = (
    Flag("in_n", "N", 100, positive, "rows: the vectors normalized (x's leading dims, flattened)", field="rows"),
    Flag("in_w", "W", 32, positive, "normalized size: x's last dim and weight's length", field="size"),
    Flag("eps", "e", 1e-5, number, "epsilon added to the mean square (0 or more)", field="eps"),
    DIRECTIONS.flag(help="1 forward, 2 backward (from the forward's saved rstd); 0 or 3 both"),
    *run_flags(),
)


class RMSNormParser(CommandParser):
    """Parses ``rmsnorm``, ``rmsnormfp16`` and ``rmsnormbfp16`` commands."""

    flags = RMSNORM_FLAGS
    signature_class = RMSNormSignature
    directions = DIRECTIONS

    def check(self, flags: ParsedFlags) -> None:
        flags.require("eps", flags["eps"] >= 0, "must not be negative")
        problem = representable_problem(flags["eps"], RSTD_DTYPE)
        flags.require("eps", problem is None, f"{problem}: it is added in float32")
