"""Registration of the layernorm op with BOO (the ``boo`` entry point ``layernorm``)."""

from __future__ import annotations

from boo_core import OpSpec, hookimpl

from .fusion import PATTERNS
from .mlir import kernel_mlir
from .parser import PARSER
from .signature import LayerNormSignature

#: iree-compile flags for the layernorm kernels on the CPU. Aggressive fusion puts the row
#: reductions (mean, variance) and the elementwise ops that consume them into one dispatch
#: (without it: three or four); reassociating floating-point reductions lets them accumulate
#: in vector registers instead of one scalar add per element (~2x).
CPU_FLAGS = ("--iree-dispatch-creation-enable-aggressive-fusion=true",
             "--iree-llvmcpu-reassociate-fp-reductions=true")


@hookimpl
def boo_register_ops(register):
    register(OpSpec(
        name="layernorm",
        keywords=("layernorm",),
        signature_class=LayerNormSignature,
        parser=PARSER,
        description="layer normalization, forward and backward (MIOpenDriver layernorm, layernormfp16, "
                    "layernormbfp16)",
    ))


@hookimpl
def boo_compile_flags(signature, target):
    if isinstance(signature, LayerNormSignature) and target.backend == "llvm-cpu":
        return list(CPU_FLAGS)
    return None


@hookimpl
def boo_signature_mlir(signature, target):
    if isinstance(signature, LayerNormSignature) and target.backend == "llvm-cpu":
        return kernel_mlir(signature)
    return None


@hookimpl
def boo_fusion_patterns():
    return PATTERNS
