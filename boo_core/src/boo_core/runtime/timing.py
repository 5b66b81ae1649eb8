"""Timing a call the way the driver reports it, with one timer per device type.

A timer runs a call ``warmup`` times untimed, then ``iterations`` times timed, and returns
per-call times in microseconds. The CPU timer measures each call's wall time (the kernel
runs synchronously, on the calling thread or IREE's workers); the CUDA timer measures
device time (the kernels' own durations, from the profiler). Another device type gets its
timer from a plugin's ``boo_timers`` hook.
"""

from __future__ import annotations

import gc
import logging
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from ..errors import DeviceError
from ..plugins.registry import BooOpRegistry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TimingStats:
    """Per-call times in microseconds."""

    samples_us: tuple[float, ...]

    @property
    def iterations(self) -> int:
        return len(self.samples_us)

    @property
    def min(self) -> float:
        return min(self.samples_us)

    @property
    def median(self) -> float:
        return statistics.median(self.samples_us)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples_us)

    @property
    def max(self) -> float:
        return max(self.samples_us)

    @property
    def stddev(self) -> float:
        """Sample standard deviation (0 for a single sample)."""
        return statistics.stdev(self.samples_us) if len(self.samples_us) > 1 else 0.0


class Timer(Protocol):
    def __call__(self, call: Callable[[], object], *, device: torch.device, iterations: int,
                 warmup: int) -> TimingStats:
        """Call ``call`` ``warmup`` times untimed, then time ``iterations`` calls on ``device``."""


def cpu_timer(call: Callable[[], object], *, device: torch.device, iterations: int, warmup: int) -> TimingStats:
    """Wall time of each call, after ``warmup`` untimed calls; the garbage collector is
    paused while timing so that a collection does not land inside one sample."""
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    for _ in range(warmup):
        call()
    samples = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(iterations):
            start = time.perf_counter_ns()
            call()
            samples.append((time.perf_counter_ns() - start) / 1e3)
    finally:
        if enabled:
            gc.enable()
    return TimingStats(tuple(samples))


def cuda_timer(call: Callable[[], object], *, device: torch.device, iterations: int,
               warmup: int) -> TimingStats:
    """Device time of each call: the sum of the GPU kernels it ran, from torch.profiler
    (which sees IREE's kernels as well as torch's). One profiling session per call, so a
    sample never mixes two calls; the host time of a launch is not in it."""
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    for _ in range(warmup):
        call()
    torch.cuda.synchronize(device)
    samples = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler's notes about its own cycles
        for _ in range(iterations):
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
                call()
                torch.cuda.synchronize(device)
            samples.append(float(sum(event.device_time_total for event in profile.key_averages())))
    return TimingStats(tuple(samples))


#: BOO's own timers, per torch device type; a plugin's ``boo_timers`` hook adds others.
BUILT_IN: dict[str, Timer] = {"cpu": cpu_timer, "cuda": cuda_timer}


def timers() -> dict[str, Timer]:
    """Every timer by device type: BOO's, then the plugins' for other device types (a
    plugin's timer for a type already timed is left out, with a warning)."""
    found = dict(BUILT_IN)
    for info, device_type, timer in BooOpRegistry.default().plugins.timers():
        if device_type in found:
            logger.warning("plugin %s: a timer for %s devices exists already; its timer is skipped", info.label,
                           device_type)
            continue
        found[device_type] = timer
    return found


def timer_for(device: str | torch.device) -> Timer:
    """The timer for ``device``; :class:`~boo_core.errors.DeviceError` when there is none."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise DeviceError(f"unknown device {str(device)!r}: expected cpu or cuda:N") from None
    timer = BUILT_IN.get(device.type)
    if timer is not None:
        return timer
    available = timers()
    if device.type not in available:
        raise DeviceError(f"no timer for {device.type} devices yet (timers exist for: "
                          f"{', '.join(sorted(available))}); a plugin adds one with the boo_timers hook")
    return available[device.type]
