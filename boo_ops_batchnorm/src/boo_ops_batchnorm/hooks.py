"""Registration of the bnorm op with BOO (the ``boo`` entry point ``bnorm``)."""

from __future__ import annotations

import functools

from boo_core import Formulation, OpSpec, Target, hookimpl

from .folding import FoldIntoConvolution
from .fusion import PATTERNS
from .parser import BatchNormParser
from .signature import BatchNormSignature

#: iree-compile flags on the CPU: aggressive fusion puts the statistics' reductions and the
#: normalization that consumes them into fewer dispatches; reassociating floating-point
#: reductions lets them accumulate in vector registers.
CPU_FLAGS = ("--iree-dispatch-creation-enable-aggressive-fusion=true",
             "--iree-llvmcpu-reassociate-fp-reductions=true")


#: Rows per group in each stage of the statistics' and gradients' sums on GPUs
#: (``staged_sums``): IREE gives a plain sum over N·H·W one thread per channel (8 workgroups
#: for 256 channels at ResNet-50's sizes), as it did the layer norm's dw and db, where groups
#: of 8 measured 10x faster on an H100 (docs/gpu.md).
GROUPS = 8


def formulations(signature: BatchNormSignature, target: Target) -> tuple[Formulation, ...]:
    """On GPUs, where the kernel sums over the batch (training, backward, inference without
    running statistics), the sums in stages first (``GROUPS``), then the reference's export;
    elsewhere the export."""
    default = Formulation("default")
    if target.backend == "llvm-cpu" or (signature.mode == "infer" and signature.running):
        return (default,)
    compute = signature._backward if signature.mode == "bwd" else signature._forward
    staged = Formulation("staged_sums", computation=functools.partial(compute, groups=GROUPS),
                         description=f"sums over the batch in stages of {GROUPS} rows (a thread per output)")
    return (staged, default)


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
        formulations=formulations,
        compile_flags=compile_flags,
        fusion_patterns=PATTERNS,
        graph_rewrites=(FoldIntoConvolution(),),
    ))
