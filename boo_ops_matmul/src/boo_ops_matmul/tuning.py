"""The matmul op's tuning space: per-dispatch tile configurations of the contraction (CUDA:
IREE's TileAndFuse pipeline with mma.sync; CPU: distribution and vector tiles) and, on the
CPU, data tiling. Every candidate uses the ``default`` formulation: the configuration
applies to the one contraction dispatch of the export."""

from __future__ import annotations

from boo_core import Target
from boo_core.signatures.dtypes import short_name
from boo_core.tune.space import TuningCandidate, cpu_contraction_configs, cpu_flag_sets, tile_and_fuse_configs

from .signature import MatmulSignature


def tuning_space(signature: MatmulSignature, target: Target) -> list[TuningCandidate]:
    s = signature
    if target.backend == "cuda":
        configs = tile_and_fuse_configs(s.m, s.n, s.k, short_name(s.dtype), limit=48)
        return [TuningCandidate(config=c) for c in configs]
    if target.backend == "llvm-cpu":
        candidates = [TuningCandidate(config=c) for c in cpu_contraction_configs(s.m, s.n, s.k)]
        return candidates + [TuningCandidate(flags=flags) for flags in cpu_flag_sets(target)]
    return []
