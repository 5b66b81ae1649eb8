"""The tuning space: what ``boo tune`` tries for one signature on one target.

Every formulation the op offers is a candidate as it is. An op adds more through
``OpSpec.tuning_space(signature, target)``: :class:`TuningCandidate` objects naming one of
its formulations with a per-dispatch configuration (:mod:`boo_core.kernels.configs`) and/or
extra iree-compile flags. The helpers below generate configurations for common pipelines
(the core knows targets, not ops: an op passes its own problem sizes).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import PluginError
from ..kernels.chain import plan_kernels
from ..kernels.configs import REDUCTIONS
from ..kernels.formulation import Formulation
from ..kernels.target import Target


@dataclass(frozen=True)
class TuningCandidate:
    """One point of an op's tuning space: ``formulation`` (a name among the op's
    formulations for the signature), a ``config`` for its contraction dispatches and
    ``flags`` for iree-compile. ``label`` names it in results (derived when empty)."""

    formulation: str = "default"
    config: Mapping[str, Any] | None = None
    flags: tuple[str, ...] = ()
    label: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "flags", tuple(self.flags))
        if self.config is not None:
            json.dumps(dict(self.config))  # a configuration must be JSON-able (it is recorded)
        if not self.label:
            object.__setattr__(self, "label", describe(self.formulation, self.config, self.flags))


@dataclass(frozen=True)
class ResolvedCandidate:
    """A candidate with its formulation object, ready to build; ``substitution`` is a
    kernel library's (:mod:`boo_core.substitute`), which replaces IREE's executables."""

    label: str
    formulation: Formulation
    config: Mapping[str, Any] | None = None
    flags: tuple[str, ...] = field(default=())
    substitution: Any = None

    @property
    def plain(self) -> bool:
        """What an untuned launch may use: a formulation as the op offers it (no
        configuration, no extra flags), maybe with a library's kernel."""
        return self.config is None and not self.flags

    @property
    def substitution_digest(self) -> str:
        """The library substitution's digest ("" for IREE's own kernels)."""
        return self.substitution.digest if self.substitution is not None else ""


def describe(formulation: str, config: Mapping[str, Any] | None, flags: Sequence[str]) -> str:
    """A short label: ``default``, ``default/wg128x128_sg4x8_k4_s3``, ``im2col+data-tiling``."""
    label = formulation
    if config:
        label += "/" + _config_label(config)
    for flag in flags:
        label += "+" + flag.removeprefix("--iree-").split("=")[0]
    return label


def _config_label(config: Mapping[str, Any]) -> str:
    """``wg128x128_sg4x8_k4_s3``; a nested ``reductions`` configuration as ``red(...)``."""
    parts = []
    for key, short in (("workgroup", "wg"), ("distribution", "dist"), ("subgroup", "sg"), ("thread", "th"),
                       ("vector_common_parallel", "vec"), ("reduction", "k"), ("vector_reduction", "k")):
        if key in config:
            parts.append(short + "x".join(str(v) for v in config[key]))
    if "prefetch_num_stages" in config:
        parts.append(f"s{config['prefetch_num_stages']}")
    if config.get(REDUCTIONS):
        parts.append(f"red({_config_label(config[REDUCTIONS])})")
    return "_".join(parts)


def resolve(formulations: Sequence[Formulation], extra: Iterable[TuningCandidate],
            where: str, library: Sequence[Any] = ()) -> list[ResolvedCandidate]:
    """The untuned chain as launches try it (:func:`~boo_core.kernels.chain.plan_kernels`:
    kernel libraries' substitutions, then every formulation as it is), then the op's extra
    candidates; labels unique."""
    found = [ResolvedCandidate(_label(k.formulation, k.substitution), k.formulation, substitution=k.substitution)
             for k in plan_kernels(formulations, library=library)]
    by_name = {f.name: f for f in formulations}
    labels = {c.label for c in found}
    for candidate in extra:
        if not isinstance(candidate, TuningCandidate):
            raise PluginError(f"{where} returned {type(candidate).__name__}, not TuningCandidate")
        formulation = by_name.get(candidate.formulation)
        if formulation is None:
            raise PluginError(f"{where} names formulation {candidate.formulation!r}, which the op does not offer "
                              f"here (it offers: {', '.join(by_name)})")
        if candidate.label in labels:
            continue
        labels.add(candidate.label)
        found.append(ResolvedCandidate(candidate.label, formulation, candidate.config, candidate.flags))
    return found


def _label(formulation: Formulation, substitution: Any) -> str:
    """A chain kernel's label in results: ``default``, ``default with <substitution name>``."""
    return f"{formulation.name} with {substitution.name}" if substitution is not None else formulation.name


# -- configuration generators --------------------------------------------------------------------

#: Bytes one thread loads at once in :func:`elementwise_configs` (one 128-bit access).
VECTOR_BYTES = 16


def elementwise_configs(rows: int, columns: int, element_bytes: int, *, limit: int = 4) -> list[dict[str, Any]]:
    """Configurations of IREE's TileAndFuse pipeline for an elementwise dispatch over a
    ``rows x columns`` iteration space (innermost last) on an NVIDIA GPU. IREE 3.13 gives
    such a dispatch one warp per workgroup and, for a few columns, short accesses (64
    channels of bf16: 4 elements a thread, about a quarter of the copy bandwidth on an H100);
    these give each thread one 16-byte access and a workgroup 128 to 1,024 threads over whole
    rows (at most 256 columns). Tiles divide the problem; the ``limit`` kept start at 256
    threads and alternate above and below it."""
    vector = VECTOR_BYTES // element_bytes if 0 < element_bytes <= VECTOR_BYTES else 0
    column_tile = min(columns, 256)
    if not vector or column_tile % vector or columns % column_tile:
        return []
    configs = []
    for row_tile in (1, 2, 4, 8, 16, 32, 64, 128):
        threads = row_tile * column_tile // vector
        if rows % row_tile or not 128 <= threads <= 1024:
            continue
        configs.append({"workgroup": [row_tile, column_tile], "thread": [1, vector],
                        "workgroup_size": [threads, 1, 1]})
    configs.sort(key=lambda c: abs(math.log2(c["workgroup_size"][0] / 256)))
    return configs[:limit]


def reduction_configs(parallel: Sequence[int], *, vector: int = 4, limit: int = 3,
                      whole_middle: bool = False) -> list[dict[str, Any]]:
    """Configurations of IREE's TileAndFuse pipeline for the root of a reduction dispatch on
    an NVIDIA GPU whose innermost parallel loops have the sizes ``parallel`` (innermost last:
    contiguous outputs), for the ``reductions`` key of a configuration. IREE 3.13 gives such
    a root (batch norm's first stage of sums: parts x terms x channels) workgroups of 32
    threads, half an H100 multiprocessor's threads at most; these give 128, 256 or 64
    threads, each ``vector`` outputs of the innermost loop, the middle loops whole, and
    tiles of the innermost and outermost loops that divide them (the fewest columns first).

    ``whole_middle``: each thread computes the middle loops whole too (batch norm's terms:
    every sum of the ``vector`` columns it reads, from one read; cross-compiled for sm_80,
    bf16 columns 8 to a thread load 16 bytes at a time, both terms from each load, where
    IREE's own tiles load 8 bytes, or 2 for a backward's second input, once per term)."""
    if len(parallel) < 2 or parallel[-1] % vector:
        return []
    middle = 1 if whole_middle else math.prod(parallel[1:-1])
    configs = []
    for threads in (128, 256, 64):
        for inner in (32, 64, 128, 256):
            outer, rest = divmod(threads * vector, inner * middle)
            if not rest and outer >= 1 and parallel[0] % outer == 0 and parallel[-1] % inner == 0:
                thread = [1, *(parallel[1:-1] if whole_middle else [1] * (len(parallel) - 2)), vector]
                configs.append({"workgroup": [outer, *parallel[1:-1], inner], "thread": thread,
                                "workgroup_size": [threads, 1, 1]})
                break
    return configs[:limit]


#: MMA intrinsics of IREE 3.13's CUDA targets (sm_80 and newer), by operand dtype name.
NV_MMA = {"bf16": "NV_MMA_SYNC_F32_16x8x16_BF16", "f16": "NV_MMA_SYNC_F32_16x8x16_F16"}
_MMA_M, _MMA_N, _MMA_K = 16, 8, 16


def tile_and_fuse_configs(m: int, n: int, k: int, dtype: str, *, limit: int = 32) -> list[dict[str, Any]]:
    """Configurations of IREE's TileAndFuse pipeline for an ``m x n x k`` contraction with
    ``dtype`` operands on an NVIDIA GPU (mma.sync 16x8x16): workgroup tiles that divide the
    problem, 4 or 8 warps, warp tiles of at most 32 intrinsics (more spill registers: on an
    H100 such tiles ran 10-20x slower), K steps of 32 to 128, 2 to 4 pipeline stages, at
    most 160 KB of shared memory. The ``limit`` kept is spread over the workgroup tiles (one
    configuration of each in turn), taking the tiles with the fullest waves on 132
    multiprocessors (to a tenth) first, then those that reuse each loaded byte most."""
    mma = NV_MMA.get(dtype)
    if mma is None:
        return []
    configs = []
    for tile_m, tile_n, (warps_m, warps_n), k_steps, stages in itertools.product(
            (128, 256, 64), (128, 256, 64), ((2, 2), (4, 2), (2, 4)), (4, 2, 8), (3, 2, 4)):
        if m % tile_m or n % tile_n or k % (k_steps * _MMA_K):
            continue
        if tile_m % (warps_m * _MMA_M) or tile_n % (warps_n * _MMA_N):
            continue
        sub_m, sub_n = tile_m // (warps_m * _MMA_M), tile_n // (warps_n * _MMA_N)
        shared = stages * (tile_m + tile_n) * k_steps * _MMA_K * 2
        if sub_m * sub_n > 32 or shared > 160 * 1024:
            continue
        configs.append({"workgroup": [tile_m, tile_n], "subgroup": [sub_m, sub_n], "reduction": [k_steps],
                        "mma_kind": mma, "workgroup_size": [32 * warps_m * warps_n, 1, 1],
                        "prefetch_num_stages": stages})

    def rank(shape: tuple[int, int]) -> tuple[float, float]:
        tiles = (m // shape[0]) * (n // shape[1])
        waves = tiles / (-(-tiles // 132) * 132)
        return -round(waves, 1), -(shape[0] * shape[1]) / (shape[0] + shape[1])

    by_shape: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for config in configs:
        by_shape.setdefault(tuple(config["workgroup"]), []).append(config)
    ranked = [by_shape[shape] for shape in sorted(by_shape, key=rank)]
    interleaved = [c for round_ in itertools.zip_longest(*ranked) for c in round_ if c is not None]
    return interleaved[:limit]


def cpu_contraction_configs(m: int, n: int, k: int, *, limit: int = 12) -> list[dict[str, Any]]:
    """Configurations of IREE's llvm-cpu tiling for an ``m x n x k`` contraction:
    distribution tiles (work per thread task) and vector tiles."""
    configs = []
    for dist_m, dist_n in ((32, 32), (64, 64), (64, 128), (128, 64), (128, 128)):
        for vec_m, vec_n, vec_k in ((8, 16, 1), (8, 32, 1), (16, 16, 1), (4, 32, 1), (8, 16, 16)):
            if dist_m > m or dist_n > n or dist_m % vec_m or dist_n % vec_n:
                continue
            configs.append({"distribution": [dist_m, dist_n], "vector_common_parallel": [vec_m, vec_n],
                            "vector_reduction": [vec_k]})
    return configs[:limit]


def cpu_flag_sets(target: Target) -> list[tuple[str, ...]]:
    """Flag sets worth trying on the CPU: data tiling (packs operands into the layouts of
    the CPU's matrix instructions) and microkernels."""
    if target.backend != "llvm-cpu":
        return []
    return [("--iree-opt-data-tiling",), ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=all")]
