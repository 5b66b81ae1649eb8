"""The conv op's tuning space beyond its formulations (which are all candidates anyway):
on CUDA, tile configurations of the matmul of the forward ``im2col`` formulation
(N * output pixels x K x taps * C); on the CPU, data tiling and microkernels for every
formulation whose work is matmuls (``im2col``, ``im2col_splitN``, ``phases``) and for the
plain export."""

from __future__ import annotations

import math

from boo_core import Target
from boo_core.signatures.dtypes import short_name
from boo_core.tune.space import TuningCandidate, cpu_flag_sets, tile_and_fuse_configs

from .signature import ConvSignature

#: Formulations whose flag sets the CPU space tries (those the op offers for the signature).
_CPU_FLAGGED = ("default", "im2col", "im2col_split32", "im2col_split128", "phases")


def tuning_space(signature: ConvSignature, target: Target) -> list[TuningCandidate]:
    s = signature
    if target.backend == "llvm-cpu":
        from .formulations import conv_formulations

        offered = {f.name for f in conv_formulations(s, target)}
        return [TuningCandidate(name, flags=flags) for name in _CPU_FLAGGED if name in offered
                for flags in cpu_flag_sets(target)]
    if target.backend != "cuda" or s.mode != "fwd" or s.transposed or s.groups != 1:
        return []
    pixels = s.input_shape[0] * math.prod(s.output_spatial)
    depth = math.prod(s.window) * s.input_shape[1]
    configs = tile_and_fuse_configs(pixels, s.output_channels, depth, short_name(s.dtype), limit=8)
    return [TuningCandidate("im2col", config=c) for c in configs]
