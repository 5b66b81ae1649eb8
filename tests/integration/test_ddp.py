"""Data-parallel training with BOO: two torchrun ranks (gloo on the CPU, NCCL on two GPUs)
train one network under DistributedDataParallel and torch.compile, sharing one kernel cache.

Each kernel is compiled by one rank and loaded by the other, and verified once per device
model; training gives eager DDP's losses, and the replicas stay equal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from boo_core.kernels.cache import META_FILE, VERDICTS_FILE, entry_directories
from boo_core.testing.distributed import RankResult, launch, rank_environment


def _check_shared_cache(results: list[RankResult], cache: Path) -> None:
    """Every kernel compiled once on this host, by one of the ranks, and loaded by the others;
    verified once per device model."""
    entries = entry_directories(cache)
    assert entries, "no kernel was compiled"
    compiled = [r.activity["kernel compiled"] for r in results]
    assert sum(compiled) == len(entries), (compiled, len(entries))
    for result in results:
        assert result.activity["kernel compiled in memory"] == 0
        obtained = sum(result.activity[e] for e in ("kernel compiled", "kernel waited", "kernel hit"))
        assert obtained == len(entries), result.activity  # every rank ran every kernel
    builders = [json.loads((entry / META_FILE).read_text())["built_by"]["pid"] for entry in entries]
    for result in results:  # the cache's own record of who built what agrees with the ranks' counts
        assert builders.count(result.pid) == result.activity["kernel compiled"]
    checked = sum(r.activity["verdict checked"] for r in results)
    assert checked == len(entries), [r.activity for r in results]
    for entry in entries:
        assert len(json.loads((entry / VERDICTS_FILE).read_text())) == 1  # one device model, one verdict


def _check_training(results: list[RankResult], tolerance: float) -> None:
    for result in results:
        assert result.offloaded.get("conv.forward") and result.offloaded.get("conv.backward"), result.offloaded
        assert result.offload_share == pytest.approx(1.0)
        assert result.max_param_diff == 0.0  # DDP's replicas stay equal with BOO's gradients in its buckets
        assert result.losses == pytest.approx(result.eager_losses, rel=tolerance)
        assert len(set(result.losses)) > 1  # the weights moved between steps
    assert all(r.losses == results[0].losses for r in results)  # one loss per step, averaged over ranks


# With iree_boo_inductor the ranks also compile Inductor's part of each graph (about 20 s more
# on CI's two cores); what DDP adds, ranks sharing a cache and DDP's gradient buckets holding
# BOO's gradients, is the same with either nested backend, and iree_boo_inductor's training is
# checked on CI in one process (test_models.py, vit; test_torch_compile.py): so it is `slow`.
@pytest.mark.parametrize("backend", ["iree_boo", pytest.param("iree_boo_inductor", marks=pytest.mark.slow)])
def test_two_cpu_ranks_train_with_boo_sharing_one_cache(backend: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    results = launch(2, tmp_path / "out", ["--model", "tiny_convnet", "--backend", backend, "--steps", "4"],
                     env=rank_environment(cache, OMP_NUM_THREADS="1", BOO_USE_BACKWARD_KERNELS="1", BOO_VERIFY="1",
                                      CUDA_VISIBLE_DEVICES=""))
    assert [r.device for r in results] == ["cpu", "cpu"]
    _check_training(results, tolerance=1e-4)
    _check_shared_cache(results, cache)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
@pytest.mark.parametrize("backend", ["iree_boo", "iree_boo_inductor"])
def test_two_gpu_ranks_train_with_boo_sharing_one_cache(backend: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    results = launch(2, tmp_path / "out", ["--model", "tiny_convnet", "--backend", backend, "--steps", "6",
                                           "--batch", "32"],
                     env=rank_environment(cache, OMP_NUM_THREADS="1", BOO_USE_BACKWARD_KERNELS="1",
                                          CUDA_VISIBLE_DEVICES="0,1"))
    assert [r.device for r in results] == ["cuda:0", "cuda:1"]
    _check_training(results, tolerance=3e-2)  # bf16
    _check_shared_cache(results, cache)
