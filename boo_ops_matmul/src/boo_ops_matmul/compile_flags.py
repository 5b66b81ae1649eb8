"""Extra iree-compile flags for matmul kernels (the op's ``compile_flags``)."""

from __future__ import annotations

import torch

from boo_core import Target

from .signature import MatmulSignature

#: bfloat16 on the CPU: data tiling packs the operands into tiles shaped for the CPU's bf16
#: dot-product instructions. Measured on a 2-core AVX-512-BF16 machine (benchmarks/matmul.py
#: shapes, the two variants alternating): 2-3.6x faster for square, batched, wide and linear
#: shapes, about 1.1x slower for N = 16. Not used for float32 (1.4x faster at 1024³ but 4x
#: slower at N = 16) nor float16 (no gain: that CPU has no native f16 arithmetic).
CPU_BF16_FLAGS: tuple[str, ...] = ("--iree-opt-data-tiling",)


def matmul_compile_flags(signature: MatmulSignature, target: Target) -> tuple[str, ...]:
    """The flags matmul kernels add for ``signature`` on ``target``."""
    if target.backend == "llvm-cpu" and signature.dtype == torch.bfloat16:
        return CPU_BF16_FLAGS
    return ()
