"""The matmul plugin as BOO sees it: registration through its entry point, compile flags."""

from __future__ import annotations

import torch

from boo_core import BooOpRegistry, Target
from boo_core.kernels.request import KernelRequest
from boo_ops_matmul import GemmParser, MatmulSignature


def test_the_entry_point_registers_the_matmul_op():
    entry = BooOpRegistry.get_op("matmul")
    assert entry.distribution == "boo-ops-matmul 0.1.0"
    assert entry.spec.keywords == ("gemm",) and entry.spec.signature_class is MatmulSignature
    assert isinstance(entry.spec.parser, GemmParser)
    registry = BooOpRegistry.default()
    for base, dtype in (("gemm", torch.float32), ("gemmfp16", torch.float16), ("gemmbfp16", torch.bfloat16)):
        resolved = registry.resolve_base(base)
        assert resolved.op is entry and resolved.dtype == dtype
    assert registry.op_for_signature(MatmulSignature(m=1, n=1, k=1)) is entry
    assert not [c for c in registry.conflicts() if "gemm" in c or "matmul" in c]


def test_bf16_kernels_and_large_f32_ones_on_the_cpu_are_data_tiled():
    cpu, cuda = Target.parse("cpu"), Target.parse("cuda:sm_80")
    bf16 = MatmulSignature(m=7, n=5, k=3, dtype=torch.bfloat16)
    assert "--iree-opt-data-tiling" in KernelRequest.create(bf16, cpu).flags
    assert "--iree-opt-data-tiling" not in KernelRequest.create(bf16, cuda).flags
    for dtype in (torch.float32, torch.float16):
        signature = MatmulSignature(m=7, n=5, k=3, dtype=dtype)
        assert "--iree-opt-data-tiling" not in KernelRequest.create(signature, cpu).flags
    large = MatmulSignature(m=512, n=1024, k=16)  # f32: where M and N are both at least 512
    assert "--iree-opt-data-tiling" in KernelRequest.create(large, cpu).flags
    assert "--iree-opt-data-tiling" not in KernelRequest.create(large, cuda).flags
    for m, n, dtype in ((8192, 16, torch.float32), (511, 4096, torch.float32), (1024, 1024, torch.float16)):
        signature = MatmulSignature(m=m, n=n, k=1024, dtype=dtype)
        assert "--iree-opt-data-tiling" not in KernelRequest.create(signature, cpu).flags, signature
