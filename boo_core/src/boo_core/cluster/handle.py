"""A caller's handle on a Ray cluster, and the device it verifies on: what ``boo preload
--ray`` and ``boo tune --ray`` share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

import torch

from ..errors import DeviceError
from ..kernels.target import Target
from ..runtime.devices import BooDevice, resolve_device
from ..settings import get_settings
from .ray_cluster import RayCluster, is_local

__all__ = ["ClusterHandle", "cluster_device"]


class ClusterHandle:
    """The cluster ``ray`` names (see :meth:`RayCluster.connect`), connected on first use
    only (a preload the cache already satisfies starts nothing); a local instance gets
    ``jobs`` CPUs. :meth:`close` disconnects what it connected."""

    def __init__(self, ray: bool | str | RayCluster, jobs: int | None, progress: TextIO | None = None) -> None:
        self._ray, self._jobs, self._progress = ray, jobs, progress
        self._cluster: RayCluster | None = ray if isinstance(ray, RayCluster) else None
        self._announced = False

    def get(self) -> RayCluster:
        if self._cluster is None:
            self._cluster = RayCluster.connect(self._ray, num_cpus=self._jobs if is_local(self._ray) else None)
        if not self._announced and self._progress is not None:
            print(f"Ray: {self._cluster.address}, {self._cluster.describe()}", file=self._progress, flush=True)
        self._announced = True
        return self._cluster

    def close(self) -> None:
        if self._cluster is not None and self._cluster is not self._ray:
            self._cluster.close()


def cluster_device(text: str, targets: Sequence[str],
                   hint: str = "--target cuda:sm_80 (or BOO_CUDA_TARGET=sm_80)") -> BooDevice:
    """The device to verify on, for a caller that may not have one (a head node without
    GPUs): a CUDA device's target then comes from ``BOO_CUDA_TARGET`` or the one ``cuda``
    target asked for (``hint`` says how to name it)."""
    try:
        return resolve_device(text)
    except DeviceError as e:
        try:
            kind = torch.device(text).type
        except (RuntimeError, TypeError):
            raise e from None
        if kind != "cuda":
            raise
        arch = get_settings().cuda_target
        cuda = [Target.parse(t) for t in targets if Target.parse(t).backend == "cuda"]
        if arch is None and len(cuda) == 1:
            arch = cuda[0].arch
        if arch is None:
            raise DeviceError(f"device {text!r}: this machine has no CUDA device to take the kernels' target from; "
                              f"with --ray, name it: {hint}") from None
        return BooDevice(torch.device("cuda", 0), "cuda", Target("cuda", arch))
