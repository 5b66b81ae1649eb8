"""MIOpenDriver ``gemm`` commands <-> MatmulSignature.

The flag table is MIOpenDriver's (``driver/gemm_driver.hpp``), with its defaults and
meanings: ``-m`` is M (rows of A), ``-k`` is K (columns of A), ``-n`` is N (columns of B),
so ``gemm -m 64 -k 32 -n 128`` multiplies a 64×32 A by a 32×128 B. Two long-only flags are
BOO extensions for the linear-layer epilogue (MIOpenDriver has neither): ``--bias 1`` and
``--activation relu|gelu|silu``. ``gemmbfp16`` (bfloat16) is a BOO extension as well;
MIOpenDriver has only ``gemm`` and ``gemmfp16``. Every kernel flag names the signature field
it sets: boo_core's parser builds signatures and writes commands from this table.
"""

from __future__ import annotations

from boo_core import CommandParser, Flag, FlagKind, ParsedFlags, run_flags
from boo_core.errors import UnsupportedError
from boo_core.signatures.flags import Integer, integer, number, optional, positive, switch

from .signature import ACTIVATIONS, MatmulSignature

GEMM_FLAGS: tuple[Flag, ...] = (
    Flag("a_h", "m", 256, positive, "M: rows of op(A) and of the result", field="m"),
    Flag("a_w", "k", 256, positive, "K: columns of op(A), rows of op(B)", field="k"),
    Flag("b_w", "n", 256, positive, "N: columns of op(B) and of the result", field="n"),
    Flag("transA", "u", False, switch, "1: A is stored transposed (K×M row-major)", field="trans_a"),
    Flag("transB", "v", False, switch, "1: B is stored transposed (N×K row-major)", field="trans_b"),
    Flag("alpha", "A", 1.0, number, "scale of op(A)·op(B)", field="alpha"),
    Flag("beta", "B", 0.0, number, "scale of C; non-zero: the kernel also takes C", field="beta"),
    Flag("batch_count", "b", 1, positive, "batch count; above 1 adds a leading batch dimension", field="batch"),
    Flag("isColMajor", "C", False, switch, "1: every matrix is stored column-major", field="col_major"),
    Flag("forw", "F", 1, Integer(0), "1 (or 0): forward, the only direction MIOpen's gemm has"),
    Flag("bias", None, False, switch, "BOO extension: 1 adds a bias of N values to every row of the result",
         field="bias", omit_default=True),
    Flag("activation", None, None, optional(*ACTIVATIONS), "BOO extension: activation applied last "
         "(relu, gelu, silu)", field="activation", omit_default=True),
    *run_flags(verify_default=0, extra=(
        Flag("parallel", "p", 0, integer, "MIOpen: parallel CPU reference (no meaning for BOO)", FlagKind.RUN),)),
)


class GemmParser(CommandParser):
    """Parses ``gemm``, ``gemmfp32``, ``gemmfp16`` and (BOO extension) ``gemmbfp16`` commands."""

    flags = GEMM_FLAGS
    signature_class = MatmulSignature

    def check(self, flags: ParsedFlags) -> None:
        if flags["forw"] not in (0, 1):
            raise UnsupportedError(f"flag {flags.label('forw')} {flags['forw']}: MIOpen's gemm has only a forward "
                                   "direction (-F 1); write a gradient as a gemm with -u/-v transposes",
                                   flag=flags.label("forw"))
