"""Extra iree-compile flags for matmul kernels (the op's ``compile_flags``)."""

from __future__ import annotations

import torch

from boo_core import Target

from .signature import MatmulSignature

#: Data tiling on the CPU: the operands packed into tiles shaped for the CPU's dot-product
#: instructions. Every bfloat16 matmul: measured on a 2-core AVX-512-BF16 machine
#: (benchmarks/matmul.py shapes, the two variants alternating) 2-3.6x faster for square,
#: batched, wide and linear shapes, about 1.1x slower for N = 16. Not float16 (no gain: that
#: CPU has no native f16 arithmetic).
CPU_DATA_TILING: tuple[str, ...] = ("--iree-opt-data-tiling",)

#: float32 on the CPU is data-tiled where M and N are both at least this. ``python
#: benchmarks/matmul.py --dtypes f32`` without and with the flag (2-core machine, two runs,
#: BOO / torch): 1024³ 4.08 -> 1.91, 4096x64 @ 64x4096 1.82 -> 1.12, a 512x1024 @ 1024x1024
#: linear layer 2.55 -> 2.02; but 256³ 1.91 -> 2.19, 8192x1024 @ 1024x16 1.07 -> 6.05 and a
#: batch of 16 256³ products 2.58 -> 2.60: small or thin products lose.
CPU_F32_TILED_FROM = 512


def matmul_compile_flags(signature: MatmulSignature, target: Target) -> tuple[str, ...]:
    """The flags matmul kernels add for ``signature`` on ``target``."""
    s = signature
    if target.backend != "llvm-cpu":
        return ()
    if s.dtype == torch.bfloat16 or (s.dtype == torch.float32 and min(s.m, s.n) >= CPU_F32_TILED_FROM):
        return CPU_DATA_TILING
    return ()
