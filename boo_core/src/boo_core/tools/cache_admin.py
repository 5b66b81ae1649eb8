"""What the kernel cache holds, and clearing it: ``boo cache info`` and ``boo cache clear``.

Entries are described from their ``meta.json`` (target, compiler version, op, formulation,
verdicts). An entry whose compile failed is listed with its log; an entry being compiled
now (its lock is held) is listed as such; an entry that is damaged in any way (no or
invalid metadata, a kernel that does not match its size, checksum or integrity tag, a
directory where a file should be, a file where the entry should be, temporary files a
killed writer left, here or in the cache directory) is listed as broken with the reason.
The next process that needs a broken entry rebuilds it; ``boo cache clear --broken``
removes them now, each checked again under its lock (an entry finished meanwhile stays).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..kernels import cache
from ..kernels.locks import entry_lock, lock_held
from ..kernels.target import Target, host_cpu_fingerprint
from .report import si


@dataclass(frozen=True)
class EntryInfo:
    """One cache entry. ``problem`` is empty for a complete entry; ``failure`` holds the
    first line of a recorded compile failure (an entry kept so it is not compiled again)."""

    directory: Path
    size: int  # bytes, every file of the entry
    backend: str = ""  # llvm-cpu, cuda, rocm ("" when unknown)
    arch: str = ""
    target: str = ""  # how it is shown: cpu, cuda:sm_80, "cpu (another host CPU)"
    compiler: str = ""
    op: str = ""
    formulation: str = ""
    created: str = ""
    verdicts: tuple[str, ...] = ()  # "device: verdict"
    failure: str = ""
    log: str = ""
    leftovers: int = 0  # temporary files a killed writer left
    problem: str = ""
    only_leftovers: bool = False  # a complete entry whose one problem is its leftover temporary files
    substitution: str = ""  # the substitution whose executables the kernel holds (its label)
    busy: bool = False  # being compiled by another process now (its lock is held)

    def matches(self, target: Target) -> bool:
        """Whether this entry was compiled for ``target`` (any host CPU for ``cpu``)."""
        if self.backend != target.backend:
            return False
        return target.backend == "llvm-cpu" or self.arch == target.arch

    @property
    def state(self) -> str:
        """How ``boo cache info --list`` describes it."""
        if self.busy:
            return "being compiled now (its lock is held by another process)"
        if self.problem:
            return f"BROKEN: {self.problem}"
        if self.failure:
            return f"compile failed ({self.failure}; log: {self.log})"
        verdicts = f", verified: {'; '.join(self.verdicts)}" if self.verdicts else ""
        substituted = f", SUBSTITUTED executables ({self.substitution})" if self.substitution else ""
        return f"{self.target}, {self.formulation}{substituted}, {self.compiler}, {self.created}{verdicts}"


def _size(directory: Path) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for path in directory.iterdir():
            with contextlib.suppress(OSError):
                if path.is_file():
                    total += path.stat().st_size
    return total


def _target(key: Any) -> tuple[str, str, str]:
    target = key.get("target") if isinstance(key, dict) else None
    if not isinstance(target, dict):
        return "", "", ""
    backend, arch = str(target.get("backend", "")), str(target.get("arch", ""))
    if backend == "llvm-cpu":
        shown = "cpu" if target.get("fingerprint") == host_cpu_fingerprint() else "cpu (another host CPU)"
    else:
        shown = f"{backend}:{arch}"
    return backend, arch, shown


def describe_entry(directory: Path, *, check_lock: bool = True) -> EntryInfo:
    """Read an entry's metadata and check its kernel; never raises for a broken entry.
    ``check_lock``: report an entry whose lock another process holds as busy."""
    if not directory.is_dir():
        what = "a leftover temporary file" if directory.name.endswith(cache.TEMP_SUFFIX) else \
            "not a directory (a file or a dangling link where an entry should be)"
        return EntryInfo(directory, _file_size(directory), problem=what)
    size, leftovers = _size(directory), len(cache.leftovers(directory))
    if check_lock and lock_held(directory.parent, directory.name):
        return EntryInfo(directory, size, leftovers=leftovers, busy=True)
    info = _described(directory, size, leftovers)
    if info.problem:
        return info
    misplaced = [name for name in cache.ENTRY_FILES if (directory / name).is_dir()]
    if misplaced:
        return replace(info, problem=f"{', '.join(misplaced)}: a directory where a file should be")
    if leftovers:
        return replace(info, problem=f"{leftovers} leftover temporary files", only_leftovers=not info.failure)
    return info


def _described(directory: Path, size: int, leftovers: int) -> EntryInfo:
    """An entry as its metadata describes it, with the first problem found."""
    failed = cache.read_json_object(directory / cache.FAILED_FILE)
    meta_path = directory / cache.META_FILE
    if failed is not None and not meta_path.exists():
        key = failed.get("key") if isinstance(failed.get("key"), dict) else {}
        backend, arch, shown = _target(key)
        return EntryInfo(directory, size, backend, arch, shown, str(key.get("compiler", "")),
                         created=str(failed.get("created", "")), failure=str(failed.get("error", "")),
                         log=str(failed.get("log", "")), leftovers=leftovers)
    if not meta_path.exists():
        if (directory / cache.MLIR_FILE).exists() and not (directory / cache.KERNEL_FILE).exists():
            return EntryInfo(directory, size, leftovers=leftovers,
                             problem=f"no kernel: its compile was interrupted (reproducer: {cache.MLIR_FILE}, "
                                     f"{cache.COMMAND_FILE})")
        return EntryInfo(directory, size, leftovers=leftovers, problem=f"incomplete: no {cache.META_FILE}")
    meta = cache.read_json_object(meta_path)
    if meta is None or not isinstance(meta.get("key"), dict) or not isinstance(meta.get("key_digest"), str):
        return EntryInfo(directory, size, leftovers=leftovers,
                         problem=f"unreadable {cache.META_FILE} (not a JSON object with a key)")
    key = meta["key"]
    backend, arch, shown = _target(key)
    verdicts = cache.read_json_object(directory / cache.VERDICTS_FILE) or {}
    info = EntryInfo(directory, size, backend, arch, shown, str(key.get("compiler", "")), str(key.get("op") or ""),
                     str(meta.get("formulation", key.get("formulation", ""))), str(meta.get("created", "")),
                     tuple(f"{device}: {verdict}" for device, verdict in sorted(verdicts.items())), leftovers=leftovers,
                     substitution=_substitution_label(meta))
    kernel = directory / cache.KERNEL_FILE
    kernel_size = _file_size(kernel) if kernel.is_file() else None
    if not directory.name.endswith("-" + meta["key_digest"][:24]):
        problem = f"{cache.META_FILE} describes another entry (key {meta['key_digest'][:24]!r:.30})"
    elif meta.get("format") != cache.CACHE_FORMAT:
        problem = f"cache format {meta.get('format')!r:.20} (this BOO reads format {cache.CACHE_FORMAT})"
    elif kernel_size is None:
        problem = f"{cache.KERNEL_FILE} is missing"
    elif kernel_size != meta.get("kernel_size"):
        problem = (f"{cache.KERNEL_FILE} is {kernel_size} bytes, {cache.META_FILE} says "
                   f"{meta.get('kernel_size')!r:.20} (truncated?)")
    else:
        entry = cache.CacheEntry(directory, cache.CacheKey(meta["key_digest"], "", {}))
        if entry.read_meta() is None:
            problem = f"{cache.META_FILE} has fields of the wrong types"
        else:
            problem = entry.read(cache.integrity_key(directory.parent)).problem
    return replace(info, problem=problem)


def _substitution_label(meta: dict[str, Any]) -> str:
    substitution = meta.get("substitution")
    return str(substitution.get("label") or "substituted") if isinstance(substitution, dict) else ""


def _file_size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def scan(cache_dir: Path) -> list[EntryInfo]:
    """Every entry of the cache under ``cache_dir``, paths named like entries that are not
    directories, and temporary files killed writers left in the cache directory."""
    paths = [*cache.entry_directories(cache_dir), *cache.stray_entries(cache_dir), *cache.leftovers(cache_dir)]
    return [describe_entry(path) for path in sorted(paths)]


def clear(cache_dir: Path, target: Target | None = None, *, broken_only: bool = False) -> list[EntryInfo]:
    """Remove every entry (only those compiled for ``target``, if given; only broken ones
    and recorded compile failures with ``broken_only``); the removed ones.

    With a target, broken entries whose target cannot be read are kept. With
    ``broken_only``, each entry is checked again under its lock: one that another process
    was compiling, and has completed meanwhile, stays; a complete entry whose only problem
    is temporary files a killed writer left loses those files and stays (returned with
    ``only_leftovers`` set and their size).
    """
    removed = []
    for entry in scan(cache_dir):
        if broken_only and not (entry.problem or entry.failure or entry.busy):
            continue
        if target is not None and not entry.matches(target):
            continue
        if broken_only and entry.only_leftovers:
            size = _remove_leftovers(cache_dir, entry.directory)
            if size is not None:
                removed.append(replace(entry, size=size))
            continue

        def still_broken(path: Path = entry.directory) -> bool:
            again = describe_entry(path, check_lock=False)
            return bool(again.problem or again.failure)

        if cache.remove_entry(cache_dir, entry.directory, still_broken if broken_only else None):
            removed.append(entry)
    return removed


def _remove_leftovers(cache_dir: Path, directory: Path) -> int | None:
    """Delete the temporary files a killed writer left in a complete entry, under its lock,
    keeping the entry; their bytes, or None if the entry changed meanwhile."""
    with entry_lock(cache_dir, directory.name):
        if not describe_entry(directory, check_lock=False).only_leftovers:
            return None
        paths = cache.leftovers(directory)
        size = sum(_file_size(path) for path in paths)
        for path in paths:
            cache.remove_path(path)
    return size


def summary_lines(entries: list[EntryInfo], tuned: int = 0) -> list[str]:
    """``boo cache info``'s summary: counts, size, targets, compilers, ops, formulations,
    tuned kernels, failed compiles and broken entries."""
    busy = [e for e in entries if e.busy]
    broken = [e for e in entries if e.problem and not e.busy]
    failed = [e for e in entries if e.failure and not e.problem and not e.busy]
    complete = len(entries) - len(broken) - len(failed) - len(busy)
    compiling = f", {len(busy)} being compiled" if busy else ""
    lines = [f"entries: {len(entries)} ({complete} complete, {len(failed)} failed compiles, {len(broken)} broken"
             f"{compiling}), {si(sum(e.size for e in entries), 'B')}"]
    good = [e for e in entries if not e.problem and not e.failure and not e.busy]
    for title, values in (("targets", [e.target for e in good if e.target]),
                          ("compiler versions", [e.compiler for e in good if e.compiler]),
                          ("op distributions", [e.op for e in good if e.op]),
                          ("formulations", [e.formulation for e in good if e.formulation])):
        if values:
            counted = ", ".join(f"{value} ({count})" for value, count in sorted(Counter(values).items()))
            lines.append(f"{title}: {counted}")
    substituted = [e for e in good if e.substitution]
    if substituted:
        lines.append(f"substituted kernels: {len(substituted)} (executables replaced: boo cache info --list)")
    if tuned:
        lines.append(f"tuned kernels: {tuned} (boo tune records)")
    for entry in failed:
        lines.append(f"compile failed: {entry.directory.name}: {entry.failure} (log: {entry.log})")
    for entry in broken:
        lines.append(f"broken: {entry.directory.name}: {entry.problem}")
    return lines
