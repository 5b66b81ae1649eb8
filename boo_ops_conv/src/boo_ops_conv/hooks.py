"""Registration of the conv op with BOO (the ``boo`` entry point ``conv``)."""

from __future__ import annotations

from boo_core import OpSpec, hookimpl

from .cuda_workarounds import cuda_mlir
from .fusion import PATTERNS
from .parser import PARSER
from .signature import ConvSignature


@hookimpl
def boo_register_ops(register):
    register(OpSpec(
        name="conv",
        keywords=("conv",),
        signature_class=ConvSignature,
        parser=PARSER,
        description="convolution (MIOpenDriver conv, convfp16, convbfp16)",
    ))


@hookimpl
def boo_fusion_patterns():
    return PATTERNS


@hookimpl
def boo_signature_mlir(signature, target):
    return cuda_mlir(signature, target) if isinstance(signature, ConvSignature) else None
