"""``boo preload --ray``: a preload's kernels compiled, and verified, as tasks on a Ray cluster.

For each (signature, target) job the caller first looks its chain's kernels (the tuned
winner the job carries included) up in its own cache (keys only, nothing exported): a job
whose kernels are all there, or recorded as not compiling, is settled here, without a task.
Every other job becomes a CPU task that runs the local preload's
:func:`~boo_core.tools.preload_kernel.compile_kernel` on a worker; its cache entries come back and
are written into the caller's cache (:mod:`boo_core.cluster`), after a check that the
worker computed the keys this process computes. With a device whose
kernels are verified (``BOO_VERIFY``), each compiled kernel is then verified by a task on
that kind of device (one GPU for ``cuda``), seeded with its entries; the verdict comes back
into the caller's ``verdicts.json``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from ..cluster import Task, TaskContext
from ..cluster.handle import ClusterHandle
from ..kernels.cache import CacheEntry, CacheKey, integrity_key
from ..kernels.chain import target_verifies
from ..kernels.target import Target
from ..kernels.tuning_records import TuningRecord
from ..runtime.devices import BooDevice
from ..runtime.lookup import get_launchable
from ..settings import get_settings, settings_override
from ..signatures.signature import Signature
from ..substitute.candidates import signature_plan
from .driver import error_text
from .preload_kernel import FAILED, PreloadJob, PreloadOutcome, compile_kernel


@dataclass(frozen=True)
class _Plan:
    keys: tuple[CacheKey, ...]  # every kernel's key in the chain: the entries a worker may write
    settled: bool  # the caller's cache already decides the outcome: no task needed


def _plan(signature: Signature, target_name: str, cache_dir: Path, tuned: TuningRecord | None = None) -> _Plan:
    """What the caller's cache holds for one job (as kernels.chain.compile_plan reads it)."""
    try:
        target = Target.parse(target_name)
        chain = signature_plan(signature, target, tuned=lambda: tuned)
        keys = tuple(planned.request(signature, target).key for planned in chain)
    except Exception:  # compile_kernel, run here, reports it as the local preload does
        return _Plan((), True)
    every = target_verifies(target)
    secret = integrity_key(cache_dir)
    for key in keys:
        entry = CacheEntry(cache_dir / key.dirname, key)
        if entry.read(secret).data is not None:
            if not every:
                return _Plan(keys, True)
        elif entry.read_failure() is None:
            return _Plan(keys, False)
    return _Plan(keys, True)


def compile_on_cluster(jobs: Sequence[PreloadJob], cluster: ClusterHandle,
                       record: Callable[[int, PreloadOutcome], None], *, shared: bool = False,
                       max_in_flight: int | None = None) -> None:
    """Compile ``jobs`` on ``cluster`` into this process's cache; ``record(index, outcome)``
    is called once per job, as each is settled."""
    cache_dir = get_settings().cache_dir
    tasks = []
    for index, job in enumerate(jobs):
        plan = _plan(job.signature, job.target, cache_dir, job.tuned)
        if plan.settled:
            record(index, compile_kernel(job))  # cache hits and recorded failures: nothing compiles
            continue
        tasks.append(Task(index, _compile_task, (job,), expect=plan.keys,
                          label=f"compile {job.signature.func_name} for {job.target}"))
    if not tasks:
        return
    for result in cluster.get().run(tasks, shared=shared, max_in_flight=max_in_flight):
        job = jobs[result.key]
        if result.ok:
            outcome = result.value
        else:
            outcome = PreloadOutcome(job.command.text, job.command.source, job.signature.func_name, job.target,
                                     FAILED, error=f"on the Ray cluster: {result.error}")
        record(result.key, outcome)


def _compile_task(context: TaskContext, job: PreloadJob) -> PreloadOutcome:
    """On a worker: the local preload's compile, paths reported as the caller will see them."""
    outcome = compile_kernel(job)
    return dataclasses.replace(outcome, directory=context.caller_path(outcome.directory) if outcome.directory else "",
                               reproducer=tuple(context.caller_path(p) for p in outcome.reproducer),
                               error=context.relocate(outcome.error))


def verify_on_cluster(outcomes: Sequence[PreloadOutcome], signature_of: Callable[[str], Signature],
                      device: BooDevice, cluster: ClusterHandle, *, shared: bool = False) -> list[PreloadOutcome]:
    """Verify each kernel compiled for ``device``'s target on a device of its kind on the
    cluster (a GPU task per kernel for CUDA), recording the verdicts in this process's cache."""
    cache_dir = get_settings().cache_dir
    on_gpu = device.torch_device.type == "cuda"
    worker_device = "cuda:0" if on_gpu else str(device.torch_device)
    cuda_target = device.target.arch if on_gpu else None
    tasks = []
    for index, outcome in enumerate(outcomes):
        if outcome.target != device.target.name or outcome.status == FAILED:
            continue
        signature = signature_of(outcome.func_name)
        keys = _plan(signature, outcome.target, cache_dir).keys
        tasks.append(Task(index, _verify_task, (signature, worker_device, cuda_target), gpus=1 if on_gpu else 0,
                          seed=tuple(k.dirname for k in keys), expect=keys,
                          label=f"verify {outcome.func_name} on {device.torch_device.type}"))
    verified = list(outcomes)
    for result in cluster.get().run(tasks, shared=shared) if tasks else ():
        outcome = outcomes[result.key]
        formulation, is_verified, notes, error = result.value if result.ok else ("", False, "", result.error)
        if error:
            verified[result.key] = dataclasses.replace(outcome, status=FAILED, error=f"verifying on the Ray cluster: "
                                                                                     f"{error}")
        else:
            verified[result.key] = dataclasses.replace(outcome, formulation=formulation, verified=is_verified,
                                                       error=notes)
    return verified


def _verify_task(context: TaskContext, signature: Signature, device: str,
                 cuda_target: str | None) -> tuple[str, bool, str, str]:
    """On a worker: select the kernel on ``device`` as a call would (verifying it, and
    recording the verdict); (formulation, verified, formulations passed over, error)."""
    override = settings_override(cuda_target=cuda_target) if cuda_target else nullcontext()
    try:
        with override:
            launchable = get_launchable(signature, device)
    except Exception as e:
        return "", False, "", context.relocate(error_text(e))
    passed_over = "; ".join(str(attempt) for attempt in launchable.passed_over)
    return launchable.formulation, launchable.verified, context.relocate(passed_over), ""
