"""What this process did with the kernel cache: kernels compiled, found, waited for; kernels
verified, or their verdicts read. Counted per process, thread-safe.

Processes sharing a cache (ranks of a distributed job, ``boo preload -j``) each count their
own; added up they show the work a host did: every kernel compiled by one process, the
others waiting on its lock and loading it (``kernel waited``), and every kernel verified
once per device model (``verdict checked``; the others read it: ``verdict read``).
"""

from __future__ import annotations

import os
import threading
from collections import Counter

#: The events counted, and what each means.
EVENTS = {
    "kernel hit": "found complete in the cache, without waiting",
    "kernel waited": "found complete after waiting on another process's lock (that process compiled it)",
    "kernel compiled": "compiled by this process into the cache",
    "kernel compiled in memory": "compiled by this process outside the cache (disabled, unwritable or locked)",
    "verdict read": "a verification verdict recorded for this device model, used as it was",
    "verdict waited": "a verdict recorded by another process while this one waited to verify the kernel",
    "verdict checked": "verified by this process against PyTorch",
}

#: Events that mean the process needed a kernel (compiled, or loaded from a cache).
KERNEL_EVENTS = ("kernel hit", "kernel waited", "kernel compiled", "kernel compiled in memory")
#: A file every BOO process appends its kernel events to, when set (BOO's pytest plugin sets
#: it, so that kernels built in a test's child processes and Ray workers are seen too). Not a
#: ``BOO_`` setting: tests that clear those for their children keep it.
LOG_VARIABLE = "PYTEST_BOO_KERNEL_LOG"

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_seconds: Counter[str] = Counter()


def count(event: str, seconds: float = 0.0) -> None:
    """Count one ``event`` (a key of :data:`EVENTS`) that took ``seconds`` (compiling, checking)."""
    if event not in EVENTS:
        raise ValueError(f"unknown cache activity {event!r}")
    with _lock:
        _counts[event] += 1
        _seconds[event] += seconds
    log = os.environ.get(LOG_VARIABLE)
    if log and event in KERNEL_EVENTS:
        _append(log, f"{os.getpid()} {event}\n")


def _append(path: str, line: str) -> None:
    """Append ``line`` to ``path`` (one write: lines of processes appending at once stay whole)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError:
        return
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def counts() -> dict[str, int]:
    """Every event of :data:`EVENTS` with how often this process saw it since the last reset."""
    with _lock:
        return {event: _counts[event] for event in EVENTS}


def seconds() -> dict[str, float]:
    """The seconds counted with each event (summed over threads: compiles run side by side)."""
    with _lock:
        return {event: round(_seconds[event], 3) for event in EVENTS}


def reset() -> None:
    """Start counting from zero."""
    with _lock:
        _counts.clear()
        _seconds.clear()
