"""Running commands the way MIOpenDriver does: compile, then time the kernel.

The ``boo driver`` subcommand is a thin layer over :func:`run_command`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .errors import BooError
from .launchable import get_launchable
from .registry import BooOpRegistry
from .signature import Signature


@dataclass(frozen=True)
class TimingStats:
    """Per-call times in microseconds."""

    samples_us: tuple[float, ...]

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
    def stdev(self) -> float:
        return statistics.stdev(self.samples_us) if len(self.samples_us) > 1 else 0.0


@dataclass(frozen=True)
class KernelRun:
    """One signature of a command, compiled and timed."""

    signature: Signature
    compile_seconds: float
    load_seconds: float
    cache_hit: bool
    timing: TimingStats
    output_summary: str

    @property
    def tflops(self) -> float:
        return self.signature.flops / (self.timing.median * 1e-6) / 1e12

    @property
    def gbps(self) -> float:
        return self.signature.bytes_moved / (self.timing.median * 1e-6) / 1e9


@dataclass
class CommandResult:
    command: str
    runs: list[KernelRun] = field(default_factory=list)
    error: BooError | None = None


def read_commands(path: Path) -> Iterator[str]:
    """Commands in a file: one per line; blank lines and ``#`` comments skipped."""
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            yield line


def time_launchable(launchable, args: Sequence[torch.Tensor], *, iterations: int, warmup: int) -> TimingStats:
    """Wall time of each call after ``warmup`` untimed calls."""
    for _ in range(warmup):
        launchable(*args)
    samples = []
    for _ in range(iterations):
        start = time.perf_counter()
        launchable(*args)
        samples.append((time.perf_counter() - start) * 1e6)
    return TimingStats(tuple(samples))


def summarize(tensor: torch.Tensor) -> str:
    """A one-line description of an output tensor."""
    values = tensor.detach().double()
    return (f"shape={tuple(tensor.shape)} dtype={str(tensor.dtype).removeprefix('torch.')} "
            f"mean={values.mean().item():.6g} std={values.std().item() if values.numel() > 1 else 0.0:.6g}")


def run_command(command: str, *, device: str = "cpu", iterations: int | None = None, warmup: int = 3,
                seed: int | None = None) -> CommandResult:
    """Parse, compile and time every signature of ``command``; errors are captured, not raised."""
    result = CommandResult(command)
    try:
        parsed = BooOpRegistry.parse(command)
        count = iterations if iterations is not None else int(parsed.run_options.get("iter", 10))
        if count < 1:
            raise BooError(f"iterations must be at least 1, got {count}")
        for signature in parsed.signatures:
            launchable = get_launchable(signature, device)
            args = signature.get_sample_args(device=device, seed=seed)
            outputs = launchable(*args)
            first = outputs if isinstance(outputs, torch.Tensor) else outputs[0]
            timing = time_launchable(launchable, args, iterations=count, warmup=warmup)
            result.runs.append(KernelRun(signature, launchable.compile_seconds, launchable.load_seconds,
                                         launchable.cache_hit, timing, summarize(first)))
    except BooError as e:
        result.error = e
    return result
