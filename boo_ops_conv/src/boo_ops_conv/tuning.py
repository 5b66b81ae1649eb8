"""The conv op's tuning space beyond its formulations (which are all candidates anyway):
on CUDA, tile configurations of the matmul of the forward ``im2col`` formulation
(N * output pixels x K x taps * C)."""

from __future__ import annotations

import math

from boo_core import Target
from boo_core.signatures.dtypes import short_name
from boo_core.tune.space import TuningCandidate, tile_and_fuse_configs

from .signature import ConvSignature


def tuning_space(signature: ConvSignature, target: Target) -> list[TuningCandidate]:
    s = signature
    if target.backend != "cuda" or s.mode != "fwd" or s.transposed or s.groups != 1:
        return []
    pixels = s.input_shape[0] * math.prod(s.output_spatial)
    depth = math.prod(s.window) * s.input_shape[1]
    configs = tile_and_fuse_configs(pixels, s.output_channels, depth, short_name(s.dtype), limit=8)
    return [TuningCandidate("im2col", config=c) for c in configs]
