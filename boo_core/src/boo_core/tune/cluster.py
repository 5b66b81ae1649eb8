"""``boo tune --ray``: the tuner's compiles, and on a GPU its measurements, as Ray tasks.

Each pending candidate compiles in a CPU task that runs :func:`~boo_core.tune.candidates.compile_candidate`
on a worker and may write only the candidate's cache entry; a candidate the caller's cache
already settles (its kernel, or a recorded failure: a resumed tune) is fetched here, without a
task. Tuning on a GPU, each kernel's compiled candidates are then verified and timed by one GPU
task (``num_gpus=1``, seeded with their entries) on a node with the tune's GPU model; its
results come back (the verdicts into the entries' ``verdicts.json``), and the caller
checkpoints them and records the winner, as a local tune does. Tuning on the CPU, the caller
verifies and times: the record is for its CPU model, and a worker sharing its CPUs with other
tasks would time badly. Entries come back through :mod:`boo_core.cluster` (or, with a shared
cache, are written there by the workers).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import torch

from ..cluster import ClusterError, Task, TaskContext, TaskResult
from ..cluster.handle import ClusterHandle
from ..kernels.cache import CacheEntry, CacheKey, integrity_key
from ..kernels.target import Target
from ..settings import get_settings, settings_override
from ..verify.verdicts import device_identity
from .candidates import CLUSTER_FAILURE, candidate_request, candidates_for, compile_arguments, compile_candidate

#: What a compile gives the measurement phase: (seconds, error text).
Compiled = tuple[float, str]


def candidate_key(*arguments: Any) -> CacheKey | None:
    """The cache key of one candidate's kernel (``compile_arguments``; nothing is exported),
    or None if it has none."""
    try:
        return candidate_request(*arguments).key
    except Exception:  # compile_candidate, run here, reports it as a local tune does
        return None


def _settled(key: CacheKey) -> bool:
    """Whether the caller's cache holds the kernel of ``key`` or its recorded failure."""
    cache_dir = get_settings().cache_dir
    entry = CacheEntry(cache_dir / key.dirname, key)
    return entry.read(integrity_key(cache_dir)).data is not None or entry.read_failure() is not None


def compile_on_cluster(arguments: Mapping[int, tuple[Any, ...]], cluster: ClusterHandle, *, shared: bool = False,
                       max_in_flight: int | None = None) -> dict[int, Compiled]:
    """Compile candidates (their ``compile_candidate`` arguments by id) on ``cluster``
    into this process's cache; (seconds, error) by id."""
    results: dict[int, Compiled] = {}
    tasks = []
    for ident, args in arguments.items():
        key = candidate_key(*args)
        if key is None or _settled(key):
            results[ident] = compile_candidate(*args)
            continue
        label = f"compile {args[0].func_name} {args[2]}" + (" (configured)" if args[3] or args[4] else "") \
            + (" (substituted)" if args[5] else "")
        tasks.append(Task(ident, _compile_task, args, expect=(key,), label=label))
    for result in cluster.get().run(tasks, shared=shared, max_in_flight=max_in_flight) if tasks else ():
        results[result.key] = result.value if result.ok else (0.0, CLUSTER_FAILURE + result.error)
    return results


def _compile_task(context: TaskContext, *args: Any) -> Compiled:
    """On a worker: one candidate's compile, paths in its error as the caller will see them."""
    seconds, error = compile_candidate(*args)
    return seconds, context.relocate(error)


# -- GPU measurements ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GpuPlacement:
    """Where a tune's GPU tasks run: the device model they must have, and the Ray resource
    (``accelerator_type:...``) that puts them on nodes with it, when the cluster names one."""

    model: str
    resources: Mapping[str, float]


def place_gpu_tasks(cluster: ClusterHandle, cuda_target: str | None, model: str = "") -> GpuPlacement:
    """Ask one GPU task of the cluster which model it has (this machine's ``model`` when it has
    the device, else the first GPU node's) and which accelerator resource its node offers."""
    joined = cluster.get()
    [result] = list(joined.run([Task("probe", _probe, (cuda_target,), gpus=1, label="probe the GPU model")]))
    if not result.ok:
        raise ClusterError(f"cannot tune on the cluster's GPUs: {result.error}")
    found, node = result.value
    if model and found != model:  # no resource for this model: each task checks its GPU instead
        return GpuPlacement(model, {})
    resources = next((n["Resources"] for n in joined.nodes() if n["NodeID"] == node), {})
    accelerator = {name: 0.001 for name in resources if name.startswith("accelerator_type:")}
    return GpuPlacement(found, accelerator if len(accelerator) == 1 else {})


def _probe(context: TaskContext, cuda_target: str | None) -> tuple[str, str]:
    with settings_override(cuda_target=cuda_target) if cuda_target else nullcontext():
        return device_identity(torch.device("cuda", 0)), context.node


def measure_on_cluster(kernels: Sequence[tuple[Any, list[tuple[str, Compiled]]]], options: Any,
                       placement: GpuPlacement, cuda_target: str | None, cluster: ClusterHandle,
                       measure: Callable[..., tuple[float | None, list[Any]]], *,
                       shared: bool = False) -> Iterator[tuple[float | None, list[Any], TaskResult]]:
    """Verify and time each kernel's compiled candidates (``(tune, [(label, compiled)])``) in a
    GPU task running ``measure`` (the tuner's :func:`~boo_core.tune.tuner.measure_task`, given
    the task's context, ``options`` for the worker's device, the GPU model, the CUDA target, the
    signature, the target and the compiled candidates); yield (PyTorch's time, candidate
    results, the task's result: its ``key`` is the kernel's index, its ``error`` why it has no
    value) as each finishes."""
    worker_options = dataclasses.replace(options, device="cuda:0", ray=None, shared_cache=False)
    tasks = []
    for index, (tune, compiled) in enumerate(kernels):
        seed = []
        for label, (_, error) in compiled:
            candidate = next(c for c in candidates_for(tune.signature, Target.parse(tune.target))
                             if c.label == label)
            key = None if error else candidate_key(*compile_arguments(tune.signature, tune.target,
                                                                                   candidate))
            seed += [key] if key is not None else []
        tasks.append(Task(index, measure, (worker_options, placement.model, cuda_target, tune.signature,
                                                 tune.target, compiled),
                          gpus=1, resources=placement.resources, seed=tuple(k.dirname for k in seed),
                          expect=tuple(seed), label=f"tune {tune.signature.func_name} on {placement.model}"))
    for result in cluster.get().run(tasks, shared=shared) if tasks else ():
        torch_us, results = result.value if result.ok else (None, [])
        yield torch_us, results, result


def gpu_task_summary(results: Sequence[TaskResult]) -> str:
    """Where GPU tasks ran: ``6 GPU tasks on 2 GPUs (node 1a2b3c4d GPU 0: 3, node 1a2b3c4d GPU 1: 3);
    at most 1 at a time on a GPU`` (from the workers' own clocks and ``CUDA_VISIBLE_DEVICES``)."""
    ran = [r for r in results if r.finished]
    by_gpu: dict[str, list[TaskResult]] = {}
    for result in ran:
        by_gpu.setdefault(f"node {result.node[:8]} GPU {result.gpus or '?'}", []).append(result)
    crowded = max((_most_at_once(tasks) for tasks in by_gpu.values()), default=0)
    listing = ", ".join(f"{where}: {len(tasks)}" for where, tasks in sorted(by_gpu.items()))
    return (f"{len(ran)} GPU task{'' if len(ran) == 1 else 's'} on {len(by_gpu)} GPU{'' if len(by_gpu) == 1 else 's'} "
            f"({listing}); at most {crowded} at a time on a GPU")


def _most_at_once(tasks: Sequence[TaskResult]) -> int:
    """The most of ``tasks`` whose [started, finished) intervals overlap at one moment."""
    edges = sorted([(t.started, 1) for t in tasks] + [(t.finished, -1) for t in tasks], key=lambda e: (e[0], e[1]))
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most
