"""The tuner: for each kernel, every candidate compiled (in parallel processes), verified
against float64 PyTorch into poisoned outputs, and timed with the driver's timer; the
fastest verified one recorded in the tuning database, which every launch then uses
(candidates within 1% of the fastest tie, and the first of them in the candidates' order wins).

A wrong candidate is recorded as such (its verdict kept in its cache entry too) and never
chosen, however fast. Progress is checkpointed per kernel (``<cache>/tuning/progress``),
so a killed run resumes without recompiling (kernels are cached) or re-measuring finished
candidates; a kernel with a record is not tuned again unless asked (``retune``).

With ``TuneOptions.ray`` the compiles (and, on a GPU, the measurements) run as tasks on a
Ray cluster instead (:mod:`boo_core.tune.cluster`); the caller checkpoints, chooses and
records as it does locally.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import as_completed
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from ..cluster import ClusterError, TaskContext, require_ray
from ..cluster.handle import ClusterHandle, cluster_device
from ..errors import BooError, is_plugins_failure
from ..files import MAX_CSV_BYTES, FileRefused, read_text
from ..kernels import owned
from ..kernels.compiler import compiler_version
from ..kernels.pool import compile_pool
from ..kernels.request import KernelRequest
from ..kernels.tuning_records import TuningRecord, read_record, record_path, tuning_dir, write_record
from ..runtime.devices import BooDevice, resolve_device
from ..runtime.launchable import load_launchable
from ..runtime.timing import timer_for
from ..runtime.worker import verify_and_time
from ..settings import get_settings, settings_override
from ..signatures.signature import Signature
from ..verify import verdicts
from .candidates import (
    CLUSTER_FAILURE,
    PASS,
    CandidateResult,
    KernelTune,
    TuneOptions,
    candidates_for,
    compile_arguments,
    compile_candidate,
)
from .cluster import Compiled, compile_on_cluster, measure_on_cluster, place_gpu_tasks
from .space import ResolvedCandidate

#: Candidates within this fraction of the fastest time tie (timing noise: repeated tunes of
#: one kernel on an H100 moved by up to 0.6%); the first of them in the candidates' order
#: wins, so a record does not flip between runs, or between a local and a Ray tune, on noise.
TIE_FRACTION = 0.01


def _progress_path(signature: Signature, target: str, device: str) -> Path:
    record = record_path(signature, target, device)
    return tuning_dir() / "progress" / record.with_suffix(".jsonl").name


def _finished(path: Path) -> dict[str, CandidateResult]:
    found: dict[str, CandidateResult] = {}
    try:  # one result per line, like a results CSV (a FIFO or a huge file here is refused, naming it)
        lines = read_text(path, MAX_CSV_BYTES, what="tuning progress file").splitlines()
    except FileRefused:
        raise
    except OSError:
        return found
    for line in lines:
        try:
            result = CandidateResult.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by a kill: that candidate runs again
        found[result.label] = result
    return found


def _record_usable(record: TuningRecord | None, candidates: Sequence[ResolvedCandidate]) -> bool:
    """Whether ``record``'s winner can still be built: its formulation, and its library
    substitution if it has one, are among the ``candidates`` offered now. A record that
    cannot be used is tuned again, not kept."""
    if record is None:
        return False
    return any(c.formulation.name == record.formulation and c.substitution_digest == record.substitution
               for c in candidates)


def _resumable(result: CandidateResult | None, candidate: ResolvedCandidate) -> bool:
    """Whether a checkpointed ``result`` is ``candidate``'s: what it records of the kernel
    (formulation, configuration, flags) must be what the tuning space offers now, so a
    progress file never puts a kernel of its own into a record."""
    return result is not None and result.formulation == candidate.formulation.name and \
        result.substitution == candidate.substitution_digest and \
        tuple(result.flags) == tuple(candidate.flags) and \
        _plain(result.config) == _plain(dict(candidate.config) if candidate.config else None)


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))


def _checkpoint(path: Path, result: CandidateResult) -> None:
    """Append ``result`` to the progress file ``path`` (``<cache>/tuning/progress/``)."""
    owned.append(path.parents[2], path, json.dumps(result.to_json(), sort_keys=True) + "\n")


class Tuner:
    """Tunes kernels on one device. ``progress(done, total, note)`` is told of each
    candidate finished; ``log`` of the Ray cluster used, if any."""

    def __init__(self, options: TuneOptions, progress: Callable[[int, int, str], None] | None = None,
                 log: TextIO | None = None) -> None:
        if options.ray is False:
            options = replace(options, ray=None)
        if options.shared_cache and options.ray is None:
            raise ValueError("shared_cache applies to a Ray cluster's workers: give ray= as well")
        self.options = options
        self.progress = progress
        self.log = log  # where a cluster is announced
        self._placement: Any = None  # where GPU tasks run, on a cluster
        #: The GPU tasks' results of a tune on a cluster (where and when each ran).
        self.gpu_tasks: list[Any] = []
        self._total = self._done = 0
        try:
            self.device: BooDevice = resolve_device(options.device)
            self.device_name = verdicts.device_identity(self.device.torch_device)
        except BooError:
            if options.ray is None:
                raise
            require_ray()
            self.device = cluster_device(options.device, (), "BOO_CUDA_TARGET=sm_80")  # a GPU only the cluster has
            self.device_name = ""  # its model, from the cluster (tune)
        if options.ray is not None:
            require_ray()

    def tune(self, kernels: Sequence[tuple[str, Signature]]) -> list[KernelTune]:
        """Tune ``(command, signature)`` pairs; one :class:`KernelTune` each."""
        target = self.device.target.name
        cluster = self._cluster()
        try:
            return self._tune(kernels, target, cluster)
        finally:
            if cluster is not None:
                cluster.close()

    def _cluster(self) -> Any:
        """A handle on the cluster of ``options.ray`` (connected on first use), or None."""
        if self.options.ray is None:
            return None
        return ClusterHandle(self.options.ray, self.options.jobs or None, self.log)

    def _on_gpus(self, cluster: Any) -> bool:
        """Whether candidates are measured by GPU tasks of ``cluster`` (tuning for a GPU on one)."""
        return cluster is not None and self.device.torch_device.type == "cuda"

    def _tune(self, kernels: Sequence[tuple[str, Signature]], target: str, cluster: Any) -> list[KernelTune]:
        if self._on_gpus(cluster) and self._placement is None:
            self._placement = place_gpu_tasks(cluster, self._cuda_target(), self.device_name)
            self.device_name = self._placement.model
        tunes, pending = [], []
        for command, signature in kernels:
            tune = KernelTune(signature, command, target, self.device_name)
            tunes.append(tune)
            candidates = candidates_for(signature, self.device.target)
            if not self.options.retune and _record_usable(read_record(signature, target, self.device_name),
                                                          candidates):
                tune.reused = True
                continue
            done = {} if self.options.retune else _finished(_progress_path(signature, target, self.device_name))
            for candidate in candidates:
                if _resumable(done.get(candidate.label), candidate):
                    tune.results.append(done[candidate.label])
                else:
                    pending.append((tune, candidate))
        self._total, self._done = len(pending), 0
        compiled = self._compile(pending, cluster)
        measured = [(tune, [(candidate, compiled[id(candidate)]) for t, candidate in pending if t is tune])
                    for tune in tunes if not tune.reused]
        if self._on_gpus(cluster):
            self._measure_on_cluster(measured, cluster)
            return tunes
        for tune, mine in measured:
            self._measure(tune, mine)
            self._choose(tune)
        return tunes

    def _cuda_target(self) -> str | None:
        return self.device.target.arch if self.device.torch_device.type == "cuda" else None

    def _measure_on_cluster(self, measured: list[tuple[KernelTune, list[tuple[ResolvedCandidate, tuple[float, str]]]]],
                            cluster: Any) -> None:
        """Each kernel measured by a GPU task; its results checkpointed here and the winner recorded."""
        kernels = [(tune, [(c.label, done) for c, done in mine if not done[1].startswith(CLUSTER_FAILURE)])
                   for tune, mine in measured]
        for torch_us, results, task in measure_on_cluster(kernels, self.options, self._placement, self._cuda_target(),
                                                          cluster, measure_task, shared=self.options.shared_cache):
            self.gpu_tasks.append(task)
            (tune, mine), error = measured[task.key], task.error
            tune.torch_us = torch_us
            by_label = {r.label: r for r in results}
            for candidate, (seconds, compile_error) in mine:
                result = by_label.get(candidate.label)
                if result is None:  # not compiled on the cluster, or its GPU task failed: not checkpointed
                    result = self._result(candidate, seconds)
                    result.verdict = "compile error" if compile_error else "error"
                    result.error = (compile_error.removeprefix("compile error: ") if compile_error
                                    else f"measuring on the Ray cluster: {error}")
                elif result.verdict != "skipped":
                    _checkpoint(_progress_path(tune.signature, tune.target, self.device_name), result)
                self._finish(tune, result)
            self._choose(tune)

    # -- phases ------------------------------------------------------------------------------

    def _compile(self, pending: list[tuple[KernelTune, ResolvedCandidate]],
                 cluster: Any = None) -> dict[int, tuple[float, str]]:
        """Compile every pending candidate, in parallel processes or on ``cluster``; (seconds, error) by id."""
        results: dict[int, tuple[float, str]] = {}
        args = [compile_arguments(t.signature, t.target, c) for t, c in pending]
        if cluster is not None:
            return compile_on_cluster({id(c): arguments for (_, c), arguments in zip(pending, args)}, cluster,
                                      shared=self.options.shared_cache, max_in_flight=self.options.jobs or None)
        if self.options.jobs <= 1 or len(pending) <= 1:
            for (_, candidate), arguments in zip(pending, args):
                results[id(candidate)] = compile_candidate(*arguments)
            return results
        with compile_pool(min(self.options.jobs, len(pending))) as pool:
            futures = {pool.submit(compile_candidate, *arguments): candidate
                       for (_, candidate), arguments in zip(pending, args)}
            for future in as_completed(futures):
                try:
                    results[id(futures[future])] = future.result()
                except Exception as e:  # a worker that died: this candidate failed to compile
                    results[id(futures[future])] = (0.0, f"compile error: {type(e).__name__}: {e}")
        return results

    def _measure(self, tune: KernelTune, compiled: list[tuple[ResolvedCandidate, tuple[float, str]]],
                 checkpoint: bool = True) -> None:
        """Verify and time each compiled candidate of one kernel (and PyTorch); checkpoint each
        result (a GPU task of a cluster does not: its caller does)."""
        signature, options = tune.signature, self.options
        progress = _progress_path(signature, tune.target, self.device_name)
        start = time.perf_counter()
        inputs = signature.get_sample_args(device=self.device.torch_device)
        timer = timer_for(self.device.torch_device)
        tune.torch_us = self._time_torch(signature, inputs, timer)
        for candidate, (seconds, error) in compiled:
            result = self._result(candidate, seconds)
            over = options.budget_seconds is not None and time.perf_counter() - start > options.budget_seconds
            if error:
                result.verdict, result.error = "compile error", error.removeprefix("compile error: ")
            elif over:
                result.verdict = "skipped"
                result.error = f"the kernel's time budget ({options.budget_seconds:g} s) ran out"
            else:
                self._verify_and_time(signature, candidate, result, timer)
            # A compile the cluster lost is not the candidate's verdict: a resumed tune tries it again.
            if checkpoint and result.verdict != "skipped" and not error.startswith(CLUSTER_FAILURE):
                _checkpoint(progress, result)
            self._finish(tune, result)
        if tune.torch_us is not None and compiled:
            # Timed again after the candidates, the lower of the two kept: a shared machine's noise
            # only adds time, and torch.compile weighs the winner against this time.
            tune.torch_us = min(tune.torch_us, self._time_torch(signature, inputs, timer) or math.inf)

    def _time_torch(self, signature: Signature, inputs: tuple, timer: Any) -> float | None:
        """The median µs of PyTorch's own kernel for ``signature`` (None where it cannot run it)."""
        try:
            return statistics.median(timer(lambda: signature.eager(*inputs), device=self.device.torch_device,
                                           iterations=self.options.iterations, warmup=self.options.warmup).samples_us)
        except BaseException as e:  # PyTorch itself may not run this (a dtype on this device): no baseline
            if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
                raise
            return None

    @staticmethod
    def _result(candidate: ResolvedCandidate, seconds: float) -> CandidateResult:
        return CandidateResult(candidate.label, candidate.formulation.name,
                               dict(candidate.config) if candidate.config else None, candidate.flags,
                               round(seconds, 3), substitution=candidate.substitution_digest)

    def _finish(self, tune: KernelTune, result: CandidateResult) -> None:
        tune.results.append(result)
        self._done += 1
        if self.progress is not None:
            self.progress(self._done, self._total,
                          f"{tune.signature.func_name[:40]}: {result.label} {result.verdict}")

    def _verify_and_time(self, signature: Signature, candidate: ResolvedCandidate, result: CandidateResult,
                         timer: Any) -> None:
        """Build the candidate, then check and time it (in the worker process: a kernel that
        crashes or hangs fails there) and record its verdict."""
        driver = self.device.driver_for(signature.flops, get_settings().cpu_driver)
        request = KernelRequest.create(signature, self.device.target, candidate.formulation,
                                       config=candidate.config, extra_flags=candidate.flags,
                                       substitution=candidate.substitution)
        try:
            launchable = load_launchable(signature, self.device, request, driver)
        except BooError as e:
            result.verdict, result.error = "compile error", str(e).splitlines()[0]
            return
        start = time.perf_counter()
        found = verify_and_time(launchable, timer, self.options.iterations, self.options.warmup)
        verdicts.record_checked(launchable, found.verdict, time.perf_counter() - start)
        result.verdict = found.verdict
        if found.samples_us:
            result.time_us = statistics.median(found.samples_us)

    def _choose(self, tune: KernelTune) -> None:
        """The fastest verified candidate wins (of ties, the first in order: :data:`TIE_FRACTION`);
        the record is written atomically."""
        passing = [r for r in tune.results if r.verdict == PASS and r.time_us is not None]
        plain = [r for r in passing if r.config is None and not r.flags]
        candidates = candidates_for(tune.signature, self.device.target)
        order = [c.label for c in candidates]

        def position(result: CandidateResult) -> float:
            return order.index(result.label) if result.label in order else math.inf

        plain.sort(key=position)
        if not passing:
            return
        fastest = min(r.time_us for r in passing)
        tied = [r for r in passing if r.time_us <= fastest * (1 + TIE_FRACTION)]
        winner = min(tied, key=position)
        tune.winner = winner.label
        tune.baseline = plain[0].label if plain else ""
        baseline = tune.result(tune.baseline)
        library = tuple(c.substitution_digest for c in candidates if c.substitution is not None)
        record = TuningRecord(tune.signature.func_name, tune.signature.canonical(), tune.target,
                              _compiler(), self.device_name, winner.formulation, winner.config, winner.flags,
                              winner.label, winner.time_us, baseline.time_us if baseline else 0.0,
                              substitution=winner.substitution, library=library, torch_us=tune.torch_us or 0.0)
        write_record(record, tune.signature)


def _compiler() -> str:
    return compiler_version()


def measure_task(context: TaskContext, options: TuneOptions, model: str, cuda_target: str | None,
                 signature: Signature, target: str, compiled: list[tuple[str, Compiled]]
                 ) -> tuple[float | None, list[CandidateResult]]:
    """On a Ray worker with a GPU (:func:`~boo_core.tune.cluster.measure_on_cluster`): the
    local tuner's measurement of one kernel, without checkpoints (the caller writes them)."""
    with settings_override(cuda_target=cuda_target) if cuda_target else nullcontext():
        tuner = Tuner(options)
        if tuner.device_name != model:
            raise ClusterError(f"node {context.host} has a {tuner.device_name}, the tune is for a {model}")
        candidates = {c.label: c for c in candidates_for(signature, tuner.device.target)}
        tune = KernelTune(signature, "", target, model)
        tuner._measure(tune, [(candidates[label], done) for label, done in compiled], checkpoint=False)
    for result in tune.results:
        result.error = context.relocate(result.error)
    return tune.torch_us, tune.results
