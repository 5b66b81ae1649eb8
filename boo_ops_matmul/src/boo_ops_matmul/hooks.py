"""The matmul plugin's hook implementations (the ``boo`` entry point ``matmul``)."""

from __future__ import annotations

from boo_core import OpSpec, hookimpl

from .compile_flags import matmul_compile_flags
from .fusion import PATTERNS
from .parser import PARSER
from .signature import MatmulSignature


@hookimpl
def boo_register_ops(register):
    register(OpSpec(
        name="matmul",
        keywords=("gemm",),
        signature_class=MatmulSignature,
        parser=PARSER,
        description="matrix multiply (MIOpenDriver gemm, gemmfp16; gemmbfp16 is a BOO extension)",
    ))


@hookimpl
def boo_compile_flags(signature, target):
    return matmul_compile_flags(signature, target)


@hookimpl
def boo_fusion_patterns():
    return PATTERNS
