"""The plugin as BOO sees it once installed: its entry point, its op, the formulations it
offers and its tuning space (no kernel is compiled here)."""

from __future__ import annotations

import json

import pytest
import torch

from boo_core.plugin import BooOpRegistry, Target, TuningCandidate, elementwise_configs, reduction_configs
from boo_ops_rmsnorm import RMSNormParser
from boo_ops_rmsnorm import RMSNormSignature as S

CPU, CUDA = Target.parse("cpu"), Target.parse("cuda:sm_80")
bf16 = torch.bfloat16


def spec():
    return BooOpRegistry.get_op("rmsnorm").spec


def test_the_entry_point_registers_the_rmsnorm_op():
    entry = BooOpRegistry.get_op("rmsnorm")
    assert entry.distribution == "boo-ops-rmsnorm 0.1.0"
    assert entry.spec.keywords == ("rmsnorm",) and entry.spec.signature_class is S
    assert isinstance(entry.spec.parser, RMSNormParser)
    registry = BooOpRegistry.default()
    for base, dtype in (("rmsnorm", torch.float32), ("rmsnormfp16", torch.float16), ("rmsnormbfp16", bf16)):
        resolved = registry.resolve_base(base)
        assert resolved.op is entry and resolved.dtype == dtype
    assert not [c for c in registry.conflicts() if "rmsnorm" in c]


@pytest.mark.parametrize("signature, names", [
    (S(6, 96), ["default", "staged"]),  # 96 = 3 x 32 columns
    (S(6, 32), ["default"]),  # one chunk: nothing to stage
    (S(64, 33), ["default"]),  # a forward stages its rows' sums: 33 columns do not divide
    (S(64, 33, mode="bwd"), ["default", "staged"]),  # a backward stages dweight's: 64 rows do
    (S(6, 96, mode="bwd"), ["default"]),
], ids=lambda v: getattr(v, "func_name", None))
def test_default_comes_first_and_staged_only_where_32_divides_the_summed_dim(signature, names):
    for target in (CPU, CUDA):
        assert [f.name for f in BooOpRegistry.default().formulations(signature, target)] == names


def test_a_cuda_forward_gets_its_elementwise_pass_configured_on_default():
    candidates = spec().tuning_space(S(64, 4096, dtype=bf16), CUDA)
    assert all(isinstance(c, TuningCandidate) and c.formulation == "default" and not c.flags for c in candidates)
    # the (rows, size) pass that writes y, 8 bf16 elements (16 bytes) a thread
    assert [c.config for c in candidates] == elementwise_configs(64, 4096, 2)
    assert candidates and all(c.config["thread"] == [1, 8] for c in candidates)


def test_a_cuda_backward_also_gets_stageds_first_stage_configured():
    signature = S(4096, 1024, dtype=bf16, mode="bwd")
    candidates = spec().tuning_space(signature, CUDA)
    offered = [f.name for f in BooOpRegistry.default().formulations(signature, CUDA)]
    assert offered == ["default", "staged"] and len({c.label for c in candidates}) == len(candidates)
    passes = elementwise_configs(4096, 1024, 2)
    sums = reduction_configs((4096 // 32, 1024))  # dweight's partial sums: 128 groups of 32 rows x 1024 columns
    assert passes and sums
    assert [(c.formulation, c.config) for c in candidates] == [
        *(("default", config) for config in passes),
        *(item for config in sums for item in (("staged", {"reductions": config}),
                                                ("staged", {**passes[0], "reductions": config})))]
    json.dumps([c.config for c in candidates])  # recorded with each result


def test_other_targets_and_unconfigurable_shapes_offer_only_the_formulations():
    assert spec().tuning_space(S(64, 4096, dtype=bf16), CPU) == []
    assert spec().tuning_space(S(3, 7), CUDA) == []  # no tile divides 7 columns
    assert all(c.formulation == "default" for c in spec().tuning_space(S(48, 1024, mode="bwd"), CUDA))  # no staged
