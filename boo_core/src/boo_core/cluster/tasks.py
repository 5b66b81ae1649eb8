"""Per-kernel jobs as Ray tasks: what the caller describes (:class:`Task`), what it gets
back (:class:`TaskResult`), and what runs on the worker (:func:`execute`).

On the worker, :func:`execute` applies the caller's settings, gives the task a kernel cache
(a fresh scratch directory, seeded with the entries the task asked for; or, in shared mode,
the caller's own cache directory, which every node mounts at the same path), calls the task
function with a :class:`TaskContext`, and sends back its value and the cache files it wrote.
Nothing here imports Ray: the worker already runs it, and the caller's side is
:mod:`boo_core.cluster.ray_cluster`.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BooError
from ..kernels.cache import CacheKey
from ..runtime.lookup import clear_launchables
from ..settings import Settings, settings_override
from .transfer import CacheFiles, collect, relocate_text, snapshot, unpack


class ClusterError(BooError):
    """A Ray cluster cannot be used as asked (not installed, not reachable, a shared cache
    a node does not see)."""


@dataclass(frozen=True)
class Task:
    """One per-kernel job to run on the cluster.

    ``function(context, *args)`` runs on a worker (a module-level function: Ray sends it by
    reference, so its module must be importable there; so must ``args``' classes). It
    writes kernels, verdicts or tuning records into ``context.cache_dir`` as it would into
    any BOO cache; they come back with its return value. ``gpus=1`` makes it a GPU task
    (Ray gives it one GPU: ``cuda:0`` on the worker); ``cpus`` and ``resources`` (Ray
    custom resources, e.g. one that marks a GPU model) are reserved as well. ``seed``
    names entries of the caller's cache the task needs (a kernel to verify or time): they
    are copied into its cache first. ``expect``, when given, are the cache keys the task
    may write: an entry under any other name (a worker that computed another key) is
    refused and the task fails. ``key`` identifies the task in its :class:`TaskResult`.
    """

    key: Hashable
    function: Callable[..., Any]
    args: tuple[Any, ...] = ()
    gpus: int = 0
    cpus: float = 1.0
    resources: Mapping[str, float] = field(default_factory=dict)
    seed: tuple[str, ...] = ()
    expect: tuple[CacheKey, ...] | None = None
    label: str = ""


@dataclass(frozen=True)
class TaskResult:
    """What became of one :class:`Task`, delivered once.

    ``value`` is what the task function returned; ``error`` is empty, or says why there is
    no value (the task raised; its worker died, or its node left, more often than it was
    retried; it wrote cache entries under keys this process does not expect). ``written``
    and ``kept`` are the files (relative to the cache) that were written into the caller's
    cache, and those it already held and kept. ``node`` is the Ray node id of the worker
    that ran it and ``host`` its address (empty when unknown); ``gpus`` the GPUs Ray gave it
    (``CUDA_VISIBLE_DEVICES`` on the worker: ``"1"``), and ``started``/``finished`` the
    worker's wall-clock times around the task (seconds since the epoch; 0 when unknown).
    """

    key: Hashable
    value: Any = None
    error: str = ""
    written: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    node: str = ""
    host: str = ""
    gpus: str = ""
    started: float = 0.0
    finished: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass(frozen=True)
class TaskContext:
    """What a task function is given on the worker."""

    cache_dir: Path  # the cache the task writes into (scratch, or the shared cache)
    caller_cache_dir: Path  # the caller's cache: where what it writes ends up
    node: str  # the Ray node id of this worker
    host: str  # this worker's address

    def caller_path(self, path: str | Path) -> str:
        """``path`` (under :attr:`cache_dir`) as it will be in the caller's cache."""
        return relocate_text(str(path), self.cache_dir, self.caller_cache_dir)

    def relocate(self, text: str) -> str:
        """``text`` (a message naming cache files) with the caller's cache in place of this one."""
        return relocate_text(text, self.cache_dir, self.caller_cache_dir)


@dataclass(frozen=True)
class TaskCall:
    """What travels to the worker for one task."""

    function: Callable[..., Any]
    args: tuple[Any, ...]
    settings: Settings
    caller_cache_dir: str
    shared_marker: str = ""  # in shared mode: a file the caller put in its cache for workers to find
    seed: CacheFiles = field(default_factory=CacheFiles)


@dataclass(frozen=True)
class TaskOutput:
    """What comes back from the worker for one task."""

    value: Any
    files: CacheFiles
    node: str
    host: str
    gpus: str = ""
    started: float = 0.0
    finished: float = 0.0


def execute(call: TaskCall) -> TaskOutput:
    """Run one task on this worker (see the module docstring)."""
    started = time.time()
    node, host = _where()
    caller_root = Path(call.caller_cache_dir)
    if call.shared_marker:
        root = caller_root
        if not (root / call.shared_marker).is_file():
            where = f"{host} ({node[:8]})" if node else host
            raise ClusterError(f"shared cache: node {where} does not see the cache directory {root} "
                               "the caller writes (mount it at the same path on every node, or preload without "
                               "the shared cache)")
    else:
        root = Path(tempfile.mkdtemp(prefix="boo-task-"))
    try:
        before = {}
        if not call.shared_marker:
            unpack(root, call.seed)
            before = snapshot(root)
        settings = {f.name: getattr(call.settings, f.name) for f in dataclasses.fields(call.settings)}
        clear_launchables()  # a loaded kernel remembers the cache it came from: this task's is new
        try:
            with settings_override(**{**settings, "cache_dir": root, "cache_enabled": True}):
                value = call.function(TaskContext(root, caller_root, node, host), *call.args)
        finally:
            clear_launchables()
        files = collect(root, before, caller_root) if not call.shared_marker else CacheFiles()
        return TaskOutput(value, files, node, host, os.environ.get("CUDA_VISIBLE_DEVICES", ""), started, time.time())
    finally:
        if not call.shared_marker:
            shutil.rmtree(root, ignore_errors=True)


def _where() -> tuple[str, str]:
    """This worker's Ray node id and address (or the host name outside Ray: asking Ray
    there would start a Ray instance)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return "", socket.gethostname()
    return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()
