"""Registration of the bnorm op with BOO (the ``boo`` entry point ``bnorm``)."""

from __future__ import annotations

from boo_core import OpSpec, Target, hookimpl

from .folding import FoldIntoConvolution
from .fusion import PATTERNS
from .parser import BatchNormParser
from .signature import BatchNormSignature

#: iree-compile flags on the CPU: aggressive fusion puts the statistics' reductions and the
#: normalization that consumes them into fewer dispatches; reassociating floating-point
#: reductions lets them accumulate in vector registers.
CPU_FLAGS = ("--iree-dispatch-creation-enable-aggressive-fusion=true",
             "--iree-llvmcpu-reassociate-fp-reductions=true")


def compile_flags(signature: BatchNormSignature, target: Target) -> tuple[str, ...]:
    return CPU_FLAGS if target.backend == "llvm-cpu" else ()


@hookimpl
def boo_register_ops(register):
    register(OpSpec(
        name="bnorm",
        keywords=("bnorm",),
        signature_class=BatchNormSignature,
        parser=BatchNormParser(),
        description="batch normalization: training and inference forwards, backward (MIOpenDriver bnorm, "
                    "bnormfp16, bnormbfp16)",
        compile_flags=compile_flags,
        fusion_patterns=PATTERNS,
        graph_rewrites=(FoldIntoConvolution(),),
    ))
