"""The tuner: for each kernel, every candidate compiled (in parallel processes), verified
against float64 PyTorch into poisoned outputs, and timed with the driver's timer; the
fastest verified one recorded in the tuning database, which every launch then uses.

A wrong candidate is recorded as such (its verdict kept in its cache entry too) and never
chosen, however fast. Progress is checkpointed per kernel (``<cache>/tuning/progress``),
so a killed run resumes without recompiling (kernels are cached) or re-measuring finished
candidates; a kernel with a record is not tuned again unless asked (``retune``).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch

from ..errors import BooError, CompileError
from ..kernels.request import KernelRequest
from ..kernels.target import Target
from ..plugins.manager import call_blamed
from ..plugins.registry import BooOpRegistry
from ..runtime.devices import BooDevice, resolve_device
from ..runtime.launchable import Launchable
from ..runtime.timing import timer_for
from ..settings import get_settings
from ..signatures.signature import Signature
from ..verify import verdicts
from .database import TuningRecord, read_record, record_path, tuning_dir, write_record
from .space import ResolvedCandidate, resolve

PASS = verdicts.PASS


@dataclass
class CandidateResult:
    """What happened to one candidate: ``verdict`` is ``pass``, ``fail: ...`` (wrong),
    ``compile error`` or ``skipped`` (the kernel's time budget ran out)."""

    label: str
    formulation: str
    config: Mapping[str, Any] | None = None
    flags: tuple[str, ...] = ()
    compile_seconds: float = 0.0
    verdict: str = ""
    time_us: float | None = None
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "formulation": self.formulation, "config": self.config, "flags": list(self.flags),
                "compile_seconds": self.compile_seconds, "verdict": self.verdict, "time_us": self.time_us,
                "error": self.error}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CandidateResult:
        return cls(str(data["label"]), str(data["formulation"]), data.get("config"),
                   tuple(data.get("flags", ())), float(data.get("compile_seconds", 0.0)), str(data["verdict"]),
                   data.get("time_us"), str(data.get("error", "")))


@dataclass
class KernelTune:
    """One kernel's tune: every candidate's result, PyTorch's time and the winner."""

    signature: Signature
    command: str
    target: str
    device: str
    results: list[CandidateResult] = field(default_factory=list)
    torch_us: float | None = None
    winner: str = ""
    baseline: str = ""  # the candidate an untuned launch uses: the first plain one that passes
    reused: bool = False  # an existing record was kept (not tuned again)

    def result(self, label: str) -> CandidateResult | None:
        return next((r for r in self.results if r.label == label), None)


@dataclass(frozen=True)
class TuneOptions:
    device: str = "cpu"
    jobs: int = 1
    budget_seconds: float | None = None  # per kernel, compile and measurement together
    iterations: int = 20
    warmup: int = 3
    retune: bool = False


def candidates_for(signature: Signature, target: Target) -> list[ResolvedCandidate]:
    """The op's formulations, then its tuning space's extra candidates."""
    registry = BooOpRegistry.default()
    formulations = registry.formulations(signature, target)
    entry = registry.op_for_signature(signature)
    extra: Sequence[Any] = ()
    if entry is not None and entry.spec.tuning_space is not None:
        where = f"op {entry.name!r} tuning_space"
        extra = call_blamed(entry.plugin, where, entry.spec.tuning_space, signature, target) or ()
        return resolve(formulations, extra, f"plugin {entry.plugin.label}: {where}")
    return resolve(formulations, extra, "tuning space")


def _compile_candidate(signature: Signature, target: str, formulation: str, config: Mapping[str, Any] | None,
                       flags: tuple[str, ...]) -> tuple[float, str]:
    """Compile one candidate into the cache (runs in a worker); (seconds, error text)."""
    start = time.perf_counter()
    try:
        parsed = Target.parse(target)
        chosen = next(f for f in BooOpRegistry.default().formulations(signature, parsed) if f.name == formulation)
        KernelRequest.create(signature, parsed, chosen, config=config, extra_flags=flags).fetch()
    except CompileError as e:
        return time.perf_counter() - start, f"compile error: {str(e).splitlines()[0]}"
    except Exception as e:  # a plugin's failure is this candidate's, not the run's
        return time.perf_counter() - start, f"compile error: {type(e).__name__}: {e}"
    return time.perf_counter() - start, ""


def _progress_path(signature: Signature, target: str, device: str) -> Path:
    record = record_path(signature, target, device)
    return tuning_dir() / "progress" / record.with_suffix(".jsonl").name


def _finished(path: Path) -> dict[str, CandidateResult]:
    found: dict[str, CandidateResult] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        try:
            result = CandidateResult.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by a kill: that candidate runs again
        found[result.label] = result
    return found


def _checkpoint(path: Path, result: CandidateResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(result.to_json(), sort_keys=True) + "\n")
        f.flush()


class Tuner:
    """Tunes kernels on one device. ``progress(done, total, note)`` is told of each
    candidate finished."""

    def __init__(self, options: TuneOptions, progress: Callable[[int, int, str], None] | None = None) -> None:
        self.options = options
        self.device: BooDevice = resolve_device(options.device)
        self.device_name = verdicts.device_identity(self.device.torch_device)
        self.progress = progress

    def tune(self, kernels: Sequence[tuple[str, Signature]]) -> list[KernelTune]:
        """Tune ``(command, signature)`` pairs; one :class:`KernelTune` each."""
        target = self.device.target.name
        tunes, pending = [], []
        for command, signature in kernels:
            tune = KernelTune(signature, command, target, self.device_name)
            tunes.append(tune)
            if not self.options.retune and read_record(signature, target, self.device_name) is not None:
                tune.reused = True
                continue
            candidates = candidates_for(signature, self.device.target)
            done = {} if self.options.retune else _finished(_progress_path(signature, target, self.device_name))
            for candidate in candidates:
                if candidate.label in done:
                    tune.results.append(done[candidate.label])
                else:
                    pending.append((tune, candidate))
        self._total, self._done = len(pending), 0
        compiled = self._compile(pending)
        for tune in tunes:
            if tune.reused:
                continue
            mine = [(candidate, compiled[id(candidate)]) for t, candidate in pending if t is tune]
            self._measure(tune, mine)
            self._choose(tune)
        return tunes

    # -- phases ------------------------------------------------------------------------------

    def _compile(self, pending: list[tuple[KernelTune, ResolvedCandidate]]) -> dict[int, tuple[float, str]]:
        """Compile every pending candidate, in parallel processes; (seconds, error) by id."""
        from ..tools.preload import _pool

        results: dict[int, tuple[float, str]] = {}
        args = [(t.signature, t.target, c.formulation.name, dict(c.config) if c.config else None, c.flags)
                for t, c in pending]
        if self.options.jobs <= 1 or len(pending) <= 1:
            for (_, candidate), arguments in zip(pending, args):
                results[id(candidate)] = _compile_candidate(*arguments)
            return results
        with _pool(min(self.options.jobs, len(pending))) as pool:
            futures = {pool.submit(_compile_candidate, *arguments): candidate
                       for (_, candidate), arguments in zip(pending, args)}
            for future in as_completed(futures):
                try:
                    results[id(futures[future])] = future.result()
                except Exception as e:  # a worker that died: this candidate failed to compile
                    results[id(futures[future])] = (0.0, f"compile error: {type(e).__name__}: {e}")
        return results

    def _measure(self, tune: KernelTune, compiled: list[tuple[ResolvedCandidate, tuple[float, str]]]) -> None:
        """Verify and time each compiled candidate of one kernel (and PyTorch)."""
        signature, options = tune.signature, self.options
        checkpoint = _progress_path(signature, tune.target, self.device_name)
        start = time.perf_counter()
        inputs = signature.get_sample_args(device=self.device.torch_device)
        timer = timer_for(self.device.torch_device)
        try:
            tune.torch_us = statistics.median(timer(lambda: signature.eager(*inputs), device=self.device.torch_device,
                                                    iterations=options.iterations, warmup=options.warmup).samples_us)
        except Exception:  # PyTorch itself may not run this (a dtype on this device): no baseline
            tune.torch_us = None
        for candidate, (seconds, error) in compiled:
            result = CandidateResult(candidate.label, candidate.formulation.name,
                                     dict(candidate.config) if candidate.config else None, candidate.flags,
                                     round(seconds, 3))
            over = options.budget_seconds is not None and time.perf_counter() - start > options.budget_seconds
            if error:
                result.verdict, result.error = "compile error", error.removeprefix("compile error: ")
            elif over:
                result.verdict = "skipped"
                result.error = f"the kernel's time budget ({options.budget_seconds:g} s) ran out"
            else:
                self._verify_and_time(signature, candidate, result, inputs, timer)
            tune.results.append(result)
            if result.verdict != "skipped":
                _checkpoint(checkpoint, result)
            self._done += 1
            if self.progress is not None:
                self.progress(self._done, self._total, f"{signature.func_name[:40]}: {result.label} {result.verdict}")

    def _verify_and_time(self, signature: Signature, candidate: ResolvedCandidate, result: CandidateResult,
                         inputs: Sequence[torch.Tensor], timer: Any) -> None:
        driver = self.device.driver_for(signature.flops, get_settings().cpu_driver)
        request = KernelRequest.create(signature, self.device.target, candidate.formulation,
                                       config=candidate.config, extra_flags=candidate.flags)
        try:
            launchable = Launchable(signature, self.device, request, driver)
        except BooError as e:
            result.verdict, result.error = "compile error", str(e).splitlines()[0]
            return
        result.verdict = verdicts.check(launchable)
        verdicts.record_verdict(launchable.cache_directory, self.device.torch_device, result.verdict)
        if result.verdict != PASS:
            return
        stats = timer(lambda: launchable(*inputs), device=self.device.torch_device,
                      iterations=self.options.iterations, warmup=self.options.warmup)
        result.time_us = statistics.median(stats.samples_us)

    def _choose(self, tune: KernelTune) -> None:
        """The fastest verified candidate wins; the record is written atomically."""
        passing = [r for r in tune.results if r.verdict == PASS and r.time_us is not None]
        plain = [r for r in passing if r.config is None and not r.flags]
        order = [c.label for c in candidates_for(tune.signature, self.device.target)]
        plain.sort(key=lambda r: order.index(r.label) if r.label in order else math.inf)
        if not passing:
            return
        winner = min(passing, key=lambda r: r.time_us)
        tune.winner = winner.label
        tune.baseline = plain[0].label if plain else ""
        baseline = tune.result(tune.baseline)
        record = TuningRecord(tune.signature.func_name, tune.signature.canonical(), tune.target,
                              _compiler(), self.device_name, winner.formulation, winner.config, winner.flags,
                              winner.label, winner.time_us, baseline.time_us if baseline else 0.0)
        write_record(record, tune.signature)


def _compiler() -> str:
    from ..kernels.compiler import compiler_version

    return compiler_version()


def write_progress_bar(stream: TextIO) -> Callable[[int, int, str], None]:
    """A progress callback drawing :class:`~boo_core.tools.progress.ProgressBar` on ``stream``."""
    from ..tools.progress import ProgressBar

    bars: dict[int, ProgressBar] = {}

    def update(done: int, total: int, note: str) -> None:
        bar = bars.setdefault(total, ProgressBar(total, stream))
        bar.update(done, note)
        if done == total:
            bar.close()

    return update
