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
#: The forward on GPUs: aggressive fusion makes it one dispatch (one warp per row) where IREE
#: otherwise forms four with float32 intermediates; on an H100, 6304x768 bf16 went from 61 us
#: to 8 us (benchmarks/gpu.py).
GPU_FORWARD_FLAGS = ("--iree-dispatch-creation-enable-aggressive-fusion=true",)
#: Rows per group of each stage of dw and db's sums on GPUs (``chunked_column_sums``): IREE
#: gives each column sum of a plain ``sum(0)`` one thread for all rows (6 workgroups for 768
#: columns: 923 us on an H200 for 6304x768 bf16); groups of rows give a thread per output of
#: every stage, and the first stage reads dy and x themselves (the product fused into it, no
#: float32 copy written first): 31.7 us there, torch 31.9 (groups of 8: 39.2; groups of 32
#: with the reduction vector distribution off, which dx's row sums need: 111).
COLUMN_CHUNK = 16


def formulations(signature: LayerNormSignature, target: Target) -> tuple[Formulation, ...]:
    """On the CPU, the hand-written linalg (mlir.py) first, then the reference's export. On
    GPUs: the forward's statistics as plain means first (the reference's scaled sums do not
    compile for CUDA in IREE 3.13), then the reference's export; a backward with dw or db
    sums them over the rows in stages first (``COLUMN_CHUNK``), then the reference's export."""
    default = Formulation("default")
    if target.backend != "llvm-cpu":
        if signature.mode != "fwd":
            if not {"dw", "db"} & set(signature.gradients) or signature.rows <= COLUMN_CHUNK:
                return (default,)
            chunked = Formulation(
                "chunked_column_sums",
                computation=functools.partial(signature._backward, column_chunk=COLUMN_CHUNK),
                description=f"dw and db summed over groups of {COLUMN_CHUNK} rows, stage after stage")
            return (chunked, default)
        means = Formulation("mean_statistics", computation=functools.partial(signature._forward, scaled_sums=False),
                            description="statistics as mean(x) and mean of squared deviations (compiles for CUDA)")
        return (means, default)
    linalg = Formulation("linalg", mlir=lambda: kernel_mlir(signature),
                         description="hand-written linalg, one row per vector step")
    return (linalg, default)


def compile_flags(signature: LayerNormSignature, target: Target) -> tuple[str, ...]:
    if target.backend == "llvm-cpu":
        return CPU_FLAGS
    return GPU_FORWARD_FLAGS if signature.mode == "fwd" else ()


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
