"""Filling the kernel cache ahead of time: :class:`CachePopulator` and ``boo preload``.

Every command is parsed here; each distinct (signature, target) pair's chain is then
compiled into the disk cache, in worker processes when ``jobs > 1`` (forked where safe: see
:func:`~boo_core.kernels.pool.compile_pool`). The chain is the one selection tries at run time
(:func:`~boo_core.kernels.chain.plan_kernels`), the tuned winner included where the
target's device model is known (this machine's CPU for ``cpu``, ``device``'s model for its
target): what a launch then loads is in the cache. Targets need no device: ``cuda:sm_80``
and ``rocm:gfx942`` cross-compile on any machine. The cache's per-entry lock makes
concurrent compiles of one kernel (another ``boo preload``, a running model) happen once.

    populator = CachePopulator(commands_file="commands.txt", targets=["cpu", "cuda:sm_80"], jobs=4)
    populator.run()
    populator.get_cache_status("conv2d_fwd_bf16_...")   # {"cpu": "cache hit", "cuda:sm_80": "compiled"}
    populator.get_failures()                           # [PreloadOutcome(...), ...]

With ``ray=`` the kernels compile as tasks on a Ray cluster instead, and come back into this
process's cache (:mod:`boo_core.tools.preload_cluster`, built on :mod:`boo_core.cluster`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from concurrent.futures import as_completed
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import torch

from ..cluster import require_ray
from ..cluster.handle import ClusterHandle, cluster_device
from ..errors import BooError, is_plugins_failure
from ..kernels.pool import compile_pool
from ..kernels.target import Target
from ..kernels.tuning_records import tuned_record
from ..runtime.devices import resolve_device
from ..runtime.lookup import get_launchable
from ..settings import get_settings
from ..signatures.commands import Command, collect_commands, deduplicate
from ..signatures.signature import Signature
from ..verify.verdicts import device_identity
from .driver import error_text
from .preload_cluster import compile_on_cluster, verify_on_cluster
from .preload_kernel import CACHE_HIT, COMPILED, FAILED, PreloadJob, PreloadOutcome, compile_kernel
from .progress import ProgressBar

if TYPE_CHECKING:
    from ..cluster import RayCluster

class CachePopulator:
    """Compile the kernels of MIOpenDriver-style commands into the cache, for several targets.

    ``commands`` are full commands (strings, or :class:`~boo_core.signatures.commands.Command` objects
    that know where they came from); ``commands_file`` is read as the tools read it (``#``
    comments, ``.tsv`` with a ``command`` column); ``extra_args`` are appended to each
    command of the file. ``jobs`` processes compile in parallel (default: one per CPU).
    ``progress`` is a stream for a progress bar (None: no bar).

    ``ray`` compiles on a Ray cluster instead: True (or ``"local"``) starts a local Ray
    instance (``jobs`` CPUs, default all), ``"auto"`` joins the cluster running on this
    machine, ``"HOST:PORT"`` the one there, and a :class:`~boo_core.cluster.RayCluster`
    is used as it is; ``jobs`` then caps the tasks submitted at once (default: no cap).
    ``shared_cache``: the cache directory is mounted at the same path on every node, and
    workers write into it directly instead of sending the kernels back.
    """

    def __init__(self, *, commands_file: str | Path | None = None, commands: Sequence[str | Command] = (),
                 targets: Sequence[str] = ("cpu",), jobs: int | None = None, extra_args: Sequence[str] = (),
                 progress: TextIO | None = None, device: str | None = None,
                 ray: bool | str | RayCluster | None = None, shared_cache: bool = False) -> None:
        self.ray = ray if ray not in (None, False) else None
        if shared_cache and self.ray is None:
            raise ValueError("shared_cache applies to a Ray cluster's workers: give ray= as well")
        self.shared_cache = shared_cache
        if self.ray is not None:
            require_ray()
            self.device = cluster_device(device, targets) if device is not None else None
        else:
            self.device = resolve_device(device) if device is not None else None
        targets = list(targets)
        if self.device is not None and self.device.target.name not in targets:
            targets.append(self.device.target.name)
        if not targets:
            raise ValueError("give at least one target")
        self.targets = [Target.parse(t).name for t in targets]
        if jobs is not None and jobs < 1:
            raise ValueError(f"jobs must be at least 1, got {jobs}")
        self.jobs = jobs if jobs is not None or self.ray is not None else (os.cpu_count() or 1)
        listed = [c if isinstance(c, Command) else Command(c, f"commands[{i}]") for i, c in enumerate(commands)]
        from_file = collect_commands(extra_args, commands_file) if commands_file is not None else []
        self.commands = deduplicate(listed + from_file)
        self.progress = progress
        self.outcomes: list[PreloadOutcome] = []

    def run(self) -> list[PreloadOutcome]:
        """Parse, then compile every kernel missing from the cache; one outcome per kernel
        and target, plus one per command that did not parse."""
        if not get_settings().cache_enabled:
            raise BooError("the kernel cache is disabled (BOO_CACHE_ON=0): there is nothing to preload into")
        self.outcomes = []
        jobs: dict[tuple[Signature, str], PreloadJob] = {}
        self._signatures = jobs.keys()
        models = self._device_models()
        for command in self.commands:
            try:
                signatures = command.parse().signatures
            except BaseException as e:  # a bad command is reported; the others still compile
                if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
                    raise
                self.outcomes.append(PreloadOutcome(command.text, command.source, "", "", FAILED,
                                                    error=error_text(e)))
                continue
            for signature in signatures:
                for target in self.targets:
                    if (signature, target) not in jobs:
                        model = models.get(target)
                        tuned = tuned_record(signature, target, model) if model else None
                        jobs[(signature, target)] = PreloadJob(command, signature, target, tuned)
        if self.ray is not None:
            self.outcomes = self._run_on_cluster(list(jobs.values()))
            return self.outcomes
        self.outcomes += self._compile(list(jobs.values()))
        if self.device is not None:
            self.outcomes = [self._verify(o) if o.target == self.device.target.name and o.status != FAILED else o
                             for o in self.outcomes]
        return self.outcomes

    def _run_on_cluster(self, jobs: list[PreloadJob]) -> list[PreloadOutcome]:
        cluster = ClusterHandle(self.ray, self.jobs, self.progress)
        try:
            outcomes = self.outcomes + self._compile(jobs, cluster)
            if self.device is not None and get_settings().verifies(self.device.torch_device.type):
                outcomes = verify_on_cluster(outcomes, self._signature_named, self.device, cluster,
                                             shared=self.shared_cache)
            return outcomes
        finally:
            cluster.close()

    def _device_models(self) -> dict[str, str]:
        """The device model whose tuned kernels each target's preload builds, where it is
        known: this machine's CPU for ``cpu``; the ``device``'s model for its target."""
        models = {"cpu": device_identity(torch.device("cpu"))}
        if self.device is not None and (self.device.torch_device.type == "cpu" or torch.cuda.is_available()):
            models[self.device.target.name] = device_identity(self.device.torch_device)
        return models

    def _signature_named(self, func_name: str) -> Signature:
        return next(s for (s, target) in self._signatures if s.func_name == func_name)

    def _verify(self, outcome: PreloadOutcome) -> PreloadOutcome:
        """Select the kernel on the device, as a call would: verified (and the verdict
        recorded) where the device verifies kernels."""
        signature = self._signature_named(outcome.func_name)
        try:
            launchable = get_launchable(signature, self.device)
        except Exception as e:
            return dataclasses.replace(outcome, status=FAILED, error=error_text(e))
        passed_over = "; ".join(str(a) for a in launchable.passed_over)
        return dataclasses.replace(outcome, formulation=launchable.formulation, verified=launchable.verified,
                                   error=passed_over)

    def _compile(self, jobs: list[PreloadJob], cluster: ClusterHandle | None = None) -> list[PreloadOutcome]:
        results: list[PreloadOutcome | None] = [None] * len(jobs)
        bar = ProgressBar(len(jobs), self.progress) if self.progress is not None and jobs else None
        counts = {COMPILED: 0, CACHE_HIT: 0, FAILED: 0}

        def record(index: int, outcome: PreloadOutcome) -> None:
            results[index] = outcome
            counts[outcome.status] += 1
            if bar is not None:
                bar.update(sum(counts.values()), f"compiled {counts[COMPILED]}, cache hits {counts[CACHE_HIT]}, "
                                                 f"failed {counts[FAILED]}")

        if cluster is not None:
            compile_on_cluster(jobs, cluster, record, shared=self.shared_cache, max_in_flight=self.jobs)
        elif self.jobs == 1 or len(jobs) <= 1:  # an empty batch included: nothing to start a pool for
            for index, job in enumerate(jobs):
                record(index, compile_kernel(job))
        else:
            with compile_pool(min(self.jobs, len(jobs))) as pool:
                futures = {pool.submit(compile_kernel, job): index for index, job in enumerate(jobs)}
                for future in as_completed(futures):
                    index = futures[future]
                    try:
                        outcome = future.result()
                    except Exception as e:  # the worker died (BrokenProcessPool) or the job did not pickle
                        job = jobs[index]
                        outcome = PreloadOutcome(job.command.text, job.command.source, job.signature.func_name,
                                                 job.target, FAILED, error=error_text(e))
                    record(index, outcome)
        if bar is not None:
            bar.close()
        return [outcome for outcome in results if outcome is not None]

    def get_cache_status(self, func_name: str) -> dict[str, str]:
        """Per target, what :meth:`run` did for the kernel ``func_name``: compiled, cache hit
        or failed."""
        status = {o.target: o.status for o in self.outcomes if o.func_name == func_name}
        if not status:
            known = sorted({o.func_name for o in self.outcomes if o.func_name})
            hint = f"; preloaded kernels: {', '.join(known)}" if known else "; call run() first"
            raise LookupError(f"no kernel named {func_name!r} was preloaded{hint}")
        return status

    def get_failures(self) -> list[PreloadOutcome]:
        """The commands that did not parse and the kernels that failed to compile."""
        return [o for o in self.outcomes if o.status == FAILED]
