"""Registration of the layernorm op with BOO (the ``boo`` entry point ``layernorm``)."""

from __future__ import annotations

import functools

from boo_core import Formulation, OpSpec, Target, hookimpl

from .fusion import PATTERNS
from .mlir import kernel_mlir
from .parser import LayerNormParser
from .signature import LayerNormSignature

#: iree-compile flags for the layernorm kernels on the CPU. Aggressive fusion puts the row
#: reductions (mean, variance) and the elementwise ops that consume them into one dispatch
#: (without it: three or four); reassociating floating-point reductions lets them accumulate
#: in vector registers instead of one scalar add per element (~2x).
CPU_FLAGS = ("--iree-dispatch-creation-enable-aggressive-fusion=true",
             "--iree-llvmcpu-reassociate-fp-reductions=true")


def formulations(signature: LayerNormSignature, target: Target) -> tuple[Formulation, ...]:
    """On the CPU, the hand-written linalg (mlir.py) first, then the reference's export; on
    GPUs the forward's statistics as plain means first (the reference's scaled sums do not
    compile for CUDA in IREE 3.13), then the reference's export."""
    default = Formulation("default")
    if target.backend != "llvm-cpu":
        if signature.mode != "fwd":
            return (default,)
        means = Formulation("mean_statistics", computation=functools.partial(signature._forward, scaled_sums=False),
                            description="statistics as mean(x) and mean of squared deviations (compiles for CUDA)")
        return (means, default)
    linalg = Formulation("linalg", mlir=lambda: kernel_mlir(signature),
                         description="hand-written linalg, one row per vector step")
    return (linalg, default)


def compile_flags(signature: LayerNormSignature, target: Target) -> tuple[str, ...]:
    return CPU_FLAGS if target.backend == "llvm-cpu" else ()


@hookimpl
def boo_register_ops(register):
    register(OpSpec(
        name="layernorm",
        keywords=("layernorm",),
        signature_class=LayerNormSignature,
        parser=LayerNormParser(),
        description="layer normalization, forward and backward (MIOpenDriver layernorm, layernormfp16, "
                    "layernormbfp16)",
        formulations=formulations,
        compile_flags=compile_flags,
        fusion_patterns=PATTERNS,
    ))
