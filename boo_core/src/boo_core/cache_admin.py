"""What the kernel cache holds, and clearing it: ``boo cache info`` and ``boo cache clear``.

Entries are described from their ``meta.json`` (target, compiler version, op); an entry
without one, or whose kernel does not match it, is listed as broken with the reason, and
is rebuilt by the next process that needs it.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import cache
from .devices import Target, host_cpu_fingerprint
from .report import si


@dataclass(frozen=True)
class EntryInfo:
    """One cache entry. ``problem`` is empty for a complete entry."""

    directory: Path
    size: int  # bytes, every file of the entry
    backend: str = ""  # llvm-cpu, cuda, rocm ("" when unknown)
    arch: str = ""
    target: str = ""  # how it is shown: cpu, cuda:sm_80, "cpu (another host CPU)"
    compiler: str = ""
    op: str = ""
    created: str = ""
    problem: str = ""

    def matches(self, target: Target) -> bool:
        """Whether this entry was compiled for ``target`` (any host CPU for ``cpu``)."""
        if self.backend != target.backend:
            return False
        return target.backend == "llvm-cpu" or self.arch == target.arch


def describe_entry(directory: Path) -> EntryInfo:
    """Read an entry's metadata; never raises for a broken entry."""
    size = sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
    meta_path = directory / cache.META_FILE
    if not meta_path.exists():
        if (directory / cache.MLIR_FILE).exists() and not (directory / cache.KERNEL_FILE).exists():
            return EntryInfo(directory, size, problem=f"no kernel: its compile failed or was interrupted "
                                                      f"(reproducer: {cache.MLIR_FILE}, {cache.COMMAND_FILE})")
        return EntryInfo(directory, size, problem=f"incomplete: no {cache.META_FILE}")
    try:
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        key = meta["key"]
        target = key["target"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return EntryInfo(directory, size, problem=f"unreadable {cache.META_FILE} ({type(e).__name__}: {e})")
    backend, arch = str(target.get("backend", "")), str(target.get("arch", ""))
    if backend == "llvm-cpu":
        shown = "cpu" if target.get("fingerprint") == host_cpu_fingerprint() else "cpu (another host CPU)"
    else:
        shown = f"{backend}:{arch}"
    info = EntryInfo(directory, size, backend, arch, shown, str(key.get("compiler", "")), str(key.get("op") or ""),
                     str(meta.get("created", "")))
    kernel = directory / cache.KERNEL_FILE
    if meta.get("format") != cache.CACHE_FORMAT:
        problem = f"cache format {meta.get('format')} (this BOO reads format {cache.CACHE_FORMAT})"
    elif not kernel.exists():
        problem = f"{cache.KERNEL_FILE} is missing"
    elif kernel.stat().st_size != meta.get("kernel_size"):
        problem = (f"{cache.KERNEL_FILE} is {kernel.stat().st_size} bytes, {cache.META_FILE} says "
                   f"{meta.get('kernel_size')} (truncated?)")
    else:
        return info
    return replace(info, problem=problem)


def scan(cache_dir: Path) -> list[EntryInfo]:
    """Every entry of the cache under ``cache_dir``."""
    return [describe_entry(directory) for directory in cache.entry_directories(cache_dir)]


def clear(cache_dir: Path, target: Target | None = None) -> list[EntryInfo]:
    """Remove every entry (only those compiled for ``target``, if given); the removed ones.

    With a target, broken entries whose target cannot be read are kept.
    """
    removed = []
    for entry in scan(cache_dir):
        if target is None or entry.matches(target):
            cache.remove_entry(entry.directory)
            removed.append(entry)
    return removed


def summary_lines(entries: list[EntryInfo]) -> list[str]:
    """``boo cache info``'s summary: counts, size, targets, compilers, ops, broken entries."""
    broken = [e for e in entries if e.problem]
    lines = [f"entries: {len(entries)} ({len(entries) - len(broken)} complete, {len(broken)} broken), "
             f"{si(sum(e.size for e in entries), 'B')}"]
    for title, values in (("targets", [e.target for e in entries if e.target]),
                          ("compiler versions", [e.compiler for e in entries if e.compiler]),
                          ("op distributions", [e.op for e in entries if e.op])):
        if values:
            counted = ", ".join(f"{value} ({count})" for value, count in sorted(Counter(values).items()))
            lines.append(f"{title}: {counted}")
    for entry in broken:
        lines.append(f"broken: {entry.directory.name}: {entry.problem}")
    return lines
