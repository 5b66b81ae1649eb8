"""MIOpenDriver ``gemm`` commands <-> MatmulSignature.

The flag table is MIOpenDriver's (``driver/gemm_driver.hpp``), with its defaults and
meanings: ``-m`` is M (rows of A), ``-k`` is K (columns of A), ``-n`` is N (columns of B),
so ``gemm -m 64 -k 32 -n 128`` multiplies a 64×32 A by a 32×128 B. Two long-only flags are
BOO extensions for the linear-layer epilogue (MIOpenDriver has neither): ``--bias 1`` and
``--activation relu|gelu|silu``. ``gemmbfp16`` (bfloat16) is a BOO extension as well;
MIOpenDriver has only ``gemm`` and ``gemmfp16``.
"""

from __future__ import annotations

import math

import torch

from boo_core import CommandParser, Flag, FlagKind, ParsedFlags, UnsupportedError
from boo_core.dtypes import DTYPE_TO_SUFFIX
from boo_core.parser import format_command, integer, number, one_of

from .signature import ACTIVATIONS, DTYPES, MatmulSignature

KERNEL, RUN = FlagKind.KERNEL, FlagKind.RUN

GEMM_FLAGS: tuple[Flag, ...] = (
    Flag("a_h", "m", 256, integer, "M: rows of op(A) and of the result"),
    Flag("a_w", "k", 256, integer, "K: columns of op(A), rows of op(B)"),
    Flag("b_w", "n", 256, integer, "N: columns of op(B) and of the result"),
    Flag("transA", "u", 0, integer, "1: A is stored transposed (K×M row-major)"),
    Flag("transB", "v", 0, integer, "1: B is stored transposed (N×K row-major)"),
    Flag("alpha", "A", 1.0, number, "scale of op(A)·op(B)"),
    Flag("beta", "B", 0.0, number, "scale of C; non-zero: the kernel also takes C"),
    Flag("batch_count", "b", 1, integer, "batch count; above 1 adds a leading batch dimension"),
    Flag("isColMajor", "C", 0, integer, "1: every matrix is stored column-major"),
    Flag("forw", "F", 1, integer, "1 (or 0): forward, the only direction MIOpen's gemm has"),
    Flag("bias", None, 0, integer, "BOO extension: 1 adds a bias of N values to every row of the result"),
    Flag("activation", None, "", one_of("", *ACTIVATIONS), "BOO extension: activation applied last (relu, gelu, silu)"),
    # Read by BOO's tools, or meaningless for BOO's kernels; never part of a signature.
    Flag("iter", "i", 10, integer, "timed iterations", RUN),
    Flag("verify", "V", 0, integer, "1: check numerics against a reference", RUN),
    Flag("time", "t", 0, integer, "1: report kernel time", RUN),
    Flag("parallel", "p", 0, integer, "MIOpen: parallel CPU reference (no meaning for BOO)", RUN),
)


class GemmParser(CommandParser):
    """Parses ``gemm``, ``gemmfp32``, ``gemmfp16`` and (BOO extension) ``gemmbfp16`` commands."""

    flags = GEMM_FLAGS

    def build(self, flags: ParsedFlags, *, base: str, dtype: torch.dtype) -> list[MatmulSignature]:
        if dtype not in DTYPES:
            raise UnsupportedError(f"base argument {base!r}: {dtype} gemm is not supported; use gemm (float32), "
                                   "gemmfp16 or gemmbfp16 (bfloat16, a BOO extension)")
        if flags["forw"] not in (0, 1):
            raise UnsupportedError(f"flag {flags.label('forw')} {flags['forw']}: MIOpen's gemm has only a forward "
                                   "direction (-F 1); write a gradient as a gemm with -u/-v transposes",
                                   flag=flags.label("forw"))
        for name in ("a_h", "a_w", "b_w", "batch_count"):
            flags.require(name, flags[name] >= 1, "must be at least 1")
        for name in ("transA", "transB", "isColMajor", "bias"):
            flags.require(name, flags[name] in (0, 1), "must be 0 or 1")
        for name in ("alpha", "beta"):
            flags.require(name, math.isfinite(flags[name]), "must be finite")
        return [MatmulSignature(
            m=flags["a_h"], n=flags["b_w"], k=flags["a_w"], batch=flags["batch_count"],
            trans_a=flags["transA"], trans_b=flags["transB"], alpha=flags["alpha"], beta=flags["beta"],
            col_major=flags["isColMajor"], bias=flags["bias"],
            activation=flags["activation"] or None, dtype=dtype)]


def format_gemm_command(signature: MatmulSignature) -> str:
    """The command for a signature: every MIOpen gemm flag, then BOO's extensions where set."""
    flag = PARSER.flag
    items = [
        (flag("a_h"), signature.m), (flag("a_w"), signature.k), (flag("b_w"), signature.n),
        (flag("transA"), int(signature.trans_a)), (flag("transB"), int(signature.trans_b)),
        (flag("alpha"), signature.alpha), (flag("beta"), signature.beta),
        (flag("batch_count"), signature.batch), (flag("isColMajor"), int(signature.col_major)),
        (flag("forw"), 1),
    ]
    if signature.bias:
        items.append((flag("bias"), 1))
    if signature.activation:
        items.append((flag("activation"), signature.activation))
    return format_command("gemm" + DTYPE_TO_SUFFIX[signature.dtype], items)


#: The parser instance the plugin registers (parsers are stateless).
PARSER = GemmParser()
