"""The caller's side of a Ray cluster: connecting (:meth:`RayCluster.connect`) and running
per-kernel tasks whose results come back exactly once (:meth:`RayCluster.run`).

Ray is imported here only, lazily: boo-core works without it, and asking for a cluster
without it is a :class:`RayUnavailable` error that says what to install.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import suppress
from pathlib import Path
from types import ModuleType
from typing import Any

from ..kernels.cache import CacheUnwritable
from ..settings import get_settings
from .tasks import ClusterError, Task, TaskCall, TaskOutput, TaskResult, execute
from .transfer import MARKER_PREFIX, CacheFiles, install, key_mismatch, pack

#: How to get Ray: boo-core's optional extra.
INSTALL_HINT = 'pip install "boo-core[ray]"'
MINIMUM_RAY = (2, 9)
#: Ray retries a task whose worker died or whose node left this many times (its
#: ``max_retries``); an exception the task raises is never retried.
DEFAULT_RETRIES = 3


class RayUnavailable(ClusterError):
    """Ray is not installed (or too old)."""


def require_ray() -> ModuleType:
    """The ``ray`` module, or :class:`RayUnavailable` saying what to install."""
    try:
        import ray
    except ImportError as e:
        raise RayUnavailable(f"running on a Ray cluster needs Ray, an optional extra of boo-core: {INSTALL_HINT} "
                             f"(import ray failed: {e})") from None
    version = tuple(int(p) for p in ray.__version__.split(".")[:2] if p.isdigit())
    if version < MINIMUM_RAY:
        raise RayUnavailable(f"Ray {ray.__version__} is too old: BOO needs ray>={'.'.join(map(str, MINIMUM_RAY))} "
                             f"({INSTALL_HINT})")
    return ray


def is_local(address: str | bool | None) -> bool:
    """Whether ``address`` asks for a local Ray instance of BOO's own (None, True, ``""``, ``local``)."""
    return address is None or address is True or address in ("", "local")


class RayCluster:
    """A connection to a Ray cluster, started for BOO or joined.

    Use :meth:`connect`; :meth:`run` runs tasks; :meth:`close` (or ``with``) disconnects,
    and stops the instance if BOO started it.
    """

    def __init__(self, ray: ModuleType, address: str, owned: bool) -> None:
        self._ray = ray
        self.address = address
        self.owned = owned
        self._remote: Any = None

    @classmethod
    def connect(cls, address: str | bool | None = None, *, num_cpus: int | None = None,
                runtime_env: Mapping[str, Any] | None = None) -> RayCluster:
        """Start or join a cluster.

        ``address``: None, True or ``"local"`` start a local Ray instance (``num_cpus`` CPUs,
        default all); ``"auto"`` joins the cluster running on this machine (``ray start``);
        ``"HOST:PORT"`` or ``"ray://HOST:PORT"`` joins that one. If this process is already
        connected (``ray.init`` was called), that connection is used as it is.
        ``runtime_env`` is Ray's (``{"env_vars": {...}}``...), for every task.
        """
        ray = require_ray()
        if ray.is_initialized():
            return cls(ray, "this process's Ray connection", owned=False)
        options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False,
                                   "include_dashboard": False}
        if runtime_env is not None:
            options["runtime_env"] = dict(runtime_env)
        if is_local(address):
            where = "a local Ray instance"
            options.update(address="local", num_cpus=num_cpus)
        else:
            where = f"the Ray cluster at {address}"
            options["address"] = str(address)
            _check_reachable(str(address), where)
        try:
            ray.init(**options)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise ClusterError(f"cannot connect to {where}: {str(e).strip().splitlines()[0]}") from e
        return cls(ray, where, owned=True)

    def close(self) -> None:
        """Disconnect (stopping the instance if BOO started it)."""
        if self.owned and self._ray.is_initialized():
            self._ray.shutdown()
        self.owned = False

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the cluster has -----------------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        """The live nodes, each with its ``NodeID``, address and ``Resources``."""
        return [node for node in self._ray.nodes() if node.get("Alive")]

    def describe(self) -> str:
        """``2 nodes, 16 CPUs, 2 GPUs``."""
        nodes = self.nodes()
        cpus = sum(n["Resources"].get("CPU", 0) for n in nodes)
        gpus = sum(n["Resources"].get("GPU", 0) for n in nodes)
        parts = [_count(len(nodes), "node"), _count(int(cpus), "CPU")] + ([_count(int(gpus), "GPU")] if gpus else [])
        return ", ".join(parts)

    def _unschedulable(self, task: Task, nodes: list[dict[str, Any]]) -> str:
        """Why none of ``nodes`` can ever run ``task`` (Ray would wait for one forever), or ''."""
        needed = {"CPU": task.cpus, "GPU": float(task.gpus), **task.resources}
        needed = {name: amount for name, amount in needed.items() if amount}
        if any(all(node["Resources"].get(name, 0) >= amount for name, amount in needed.items())
               for node in nodes):
            return ""
        wanted = ", ".join(f"{amount:g} {name}" for name, amount in needed.items())
        return f"no node of the cluster ({self.describe()}) has {wanted} for {task.label or task.key}"

    # -- running tasks ------------------------------------------------------------------------

    def run(self, tasks: Iterable[Task], *, cache_dir: Path | None = None, shared: bool = False,
            retries: int = DEFAULT_RETRIES, max_in_flight: int | None = None) -> Iterator[TaskResult]:
        """Run ``tasks`` on the cluster; yield each one's :class:`TaskResult` once, as it
        finishes, after writing what it brought back into the cache at ``cache_dir``
        (default: BOO's cache).

        The tasks run with this process's settings. ``shared``: ``cache_dir`` is on a file
        system every node mounts at the same path, and tasks write into it directly (under
        the cache's locks) instead of sending files back; a node that does not see it fails
        its tasks. ``retries``: Ray's ``max_retries`` (a dead worker or node). At most
        ``max_in_flight`` tasks are submitted at once (default: all; the cluster's
        resources decide what runs).
        """
        settings = get_settings()
        cache_dir = Path(cache_dir) if cache_dir is not None else settings.cache_dir
        marker = _shared_marker(cache_dir) if shared else ""
        remote = self._remote_execute()
        nodes = self.nodes()
        queue = list(tasks)
        queue.reverse()
        pending: dict[Any, Task] = {}
        try:
            while queue or pending:
                while queue and (max_in_flight is None or len(pending) < max_in_flight):
                    task = queue.pop()
                    problem = self._unschedulable(task, nodes)
                    if problem:
                        yield TaskResult(task.key, error=problem)
                        continue
                    seed = pack(cache_dir, task.seed) if task.seed and not shared else CacheFiles()
                    call = TaskCall(task.function, tuple(task.args), settings, str(cache_dir), marker, seed)
                    options: dict[str, Any] = {"num_cpus": task.cpus, "num_gpus": task.gpus, "max_retries": retries,
                                               "retry_exceptions": False, "name": task.label or str(task.key)}
                    if task.resources:
                        options["resources"] = dict(task.resources)
                    pending[remote.options(**options).remote(call)] = task
                if not pending:
                    continue
                ready, _ = self._ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    task = pending.pop(ref)
                    yield self._receive(task, ref, cache_dir, retries)
        finally:
            for ref in pending:  # abandoned (an exception, or the caller stopped iterating)
                with suppress(Exception):
                    self._ray.cancel(ref, force=True)
            if marker:
                (cache_dir / marker).unlink(missing_ok=True)

    def _remote_execute(self) -> Any:
        if self._remote is None:
            self._remote = self._ray.remote(execute)
        return self._remote

    def _receive(self, task: Task, ref: Any, cache_dir: Path, retries: int) -> TaskResult:
        """Fetch one finished task's output and write its files (once: Ray hands a result
        over once, whichever attempt made it)."""
        try:
            output: TaskOutput = self._ray.get(ref)
        except self._ray.exceptions.RayError as e:
            return TaskResult(task.key, error=_failure(self._ray, e, retries))
        where = f"node {output.host} ({output.node[:8]})" if output.node else "the worker"
        if task.expect is not None:
            problem = key_mismatch(output.files, task.expect, where)
            if problem:
                return TaskResult(task.key, error=problem, node=output.node, host=output.host)
        try:
            report = install(cache_dir, output.files)
        except (CacheUnwritable, ClusterError) as e:
            return TaskResult(task.key, output.value, error=f"the result could not be written into {cache_dir}: {e}",
                              node=output.node, host=output.host)
        return TaskResult(task.key, output.value, written=report.written, kept=report.kept, node=output.node,
                          host=output.host, gpus=output.gpus, started=output.started, finished=output.finished)


def _check_reachable(address: str, where: str, timeout: float = 10.0) -> None:
    """Fail fast on a ``HOST:PORT`` nothing listens on (Ray itself retries for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise ClusterError(f"cannot connect to {where}: {e.strerror or e} (is its head node running? "
                           "ray start --head --port=PORT)") from None


def _shared_marker(cache_dir: Path) -> str:
    """Put a file in the shared cache that every task checks it can see."""
    name = f"{MARKER_PREFIX}{uuid.uuid4().hex}"
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        (cache_dir / name).write_text("boo preload: workers write into this cache directly\n")
    except OSError as e:
        raise ClusterError(f"shared cache {cache_dir} cannot be written: {e.strerror or e}") from e
    return name


def _failure(ray: ModuleType, error: Exception, retries: int) -> str:
    """Why a task brought nothing back, in a line or a few."""
    exceptions = ray.exceptions
    if isinstance(error, exceptions.RayTaskError):
        cause = error.cause
        first = str(cause).strip() or type(cause).__name__
        return first if isinstance(cause, ClusterError) else f"{type(cause).__name__}: {first}"
    if isinstance(error, exceptions.WorkerCrashedError):
        reason = f"the worker running it died, {1 + retries} times"
    elif isinstance(error, exceptions.NodeDiedError):
        reason = f"its node left the cluster, {1 + retries} times"
    elif isinstance(error, exceptions.OutOfMemoryError):
        reason = "Ray's memory monitor killed its worker (out of memory)"
    elif isinstance(error, exceptions.ObjectLostError):
        reason = "its result was lost with the node holding it"
    else:
        reason = "Ray could not run it"
    detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{reason} ({type(error).__name__}{': ' + detail if detail else ''})"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"
