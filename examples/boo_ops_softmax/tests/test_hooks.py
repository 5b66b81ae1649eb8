"""The plugin as BOO sees it once installed: its entry point, its op, flags and patterns."""

from __future__ import annotations

import torch

from boo_core.plugin import BooOpRegistry, Target
from boo_ops_softmax import SoftmaxParser, SoftmaxSignature

REASSOCIATE = "--iree-llvmcpu-reassociate-fp-reductions=true"


def test_the_entry_point_registers_the_softmax_op():
    entry = BooOpRegistry.get_op("softmax")
    assert entry.distribution == "boo-ops-softmax 0.1.0"
    assert entry.spec.keywords == ("softmax",) and entry.spec.signature_class is SoftmaxSignature
    assert isinstance(entry.spec.parser, SoftmaxParser)
    registry = BooOpRegistry.default()
    for base, dtype in (("softmax", torch.float32), ("softmaxfp16", torch.float16), ("softmaxbfp16", torch.bfloat16)):
        resolved = registry.resolve_base(base)
        assert resolved.op is entry and resolved.dtype == dtype
    assert not [c for c in registry.conflicts() if "softmax" in c]


def test_the_fusion_patterns_are_offered_to_the_torch_compile_backends():
    names = [pattern.name for pattern in BooOpRegistry.default().fusion_patterns()]
    assert "softmax.forward" in names and "softmax.backward" in names


def test_cpu_kernels_reassociate_their_sums_and_other_targets_do_not():
    signature = SoftmaxSignature(2, 8)
    registry = BooOpRegistry.default()
    assert REASSOCIATE in registry.compile_flags(signature, Target.parse("cpu"))
    assert REASSOCIATE not in registry.compile_flags(signature, Target.parse("cuda:sm_80"))
