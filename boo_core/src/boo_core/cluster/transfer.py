"""Kernel-cache files in transit between a Ray worker and the caller.

A task runs on a worker against a scratch cache of its own. What it wrote there comes back
as :class:`CacheFiles` (:func:`collect`, with every path in the files rewritten from the
scratch cache to the caller's), and :func:`install` writes it into the caller's cache the
way a local compile does: entry by entry under the entry's lock, every file through
:func:`~boo_core.kernels.owned.write`, ``meta.json`` (or ``failed.json``) last. An
entry the caller already holds intact is kept, never rewritten; ``verdicts.json`` is merged
(device model by device model), never replaced. What a task brings back is this user's own
work, sealed under the worker's scratch key: every sealed file (a verdict, a launch plan,
a tuning record) is sealed again under the receiving cache's key as it is written
(:func:`reseal`). :func:`pack` does the reverse for the
entries a task needs (a kernel to verify), and :func:`key_mismatch` checks that a worker
wrote only the entries the caller expects, that is, computed the same cache keys.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ..kernels import cache, integrity, owned
from ..kernels.launch_plan import PLAN_FILE, plan_purpose
from ..kernels.tuning_records import TUNING_DIR, record_purpose
from ..verify.verdicts import VERDICTS_FILE, seal_verdict

#: Files whose content names paths in the cache, and how those are rewritten.
_COMMAND_FILES = (cache.COMMAND_FILE,)
_JSON_FILES = (cache.META_FILE, cache.FAILED_FILE)
_TEXT_FILES = (cache.LOG_FILE,)
#: An entry's files other than these are data, written before them.
_LAST = (cache.META_FILE, cache.FAILED_FILE)
#: Files the caller puts in a shared cache for workers to find (never transferred).
MARKER_PREFIX = ".boo-cluster-"

Snapshot = dict[str, tuple[int, int, int]]
"""Relative path -> (size, mtime_ns, inode) of every file of a cache (:func:`snapshot`)."""


@dataclass(frozen=True)
class CacheFiles:
    """Files of a kernel cache by path relative to its root (``<entry>/kernel.vmfb``,
    ``tuning/<record>.json``): what a task brings back, or what it is seeded with."""

    files: Mapping[str, bytes] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.files)

    def entries(self) -> dict[str, dict[str, bytes]]:
        """Files inside cache entries, by entry name, then path in the entry
        (``kernel.vmfb``, ``substitution/binaries/k.ptx``)."""
        grouped: dict[str, dict[str, bytes]] = {}
        for relative, data in self.files.items():
            parts = PurePosixPath(relative).parts
            if len(parts) >= 2 and cache.is_entry_name(parts[0]):
                grouped.setdefault(parts[0], {})["/".join(parts[1:])] = data
        return grouped

    def others(self) -> dict[str, bytes]:
        """Files outside cache entries (tuning records...)."""
        inside = {f"{name}/{file}" for name, files in self.entries().items() for file in files}
        return {relative: data for relative, data in self.files.items() if relative not in inside}


@dataclass(frozen=True)
class InstallReport:
    """What :func:`install` did: files written, and files the cache already held."""

    written: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()


def _walk(root: Path) -> Iterable[tuple[str, Path]]:
    """Regular files under ``root`` (relative posix path, path), leaving out locks and the
    temporary files of writes in progress."""
    if not root.is_dir():
        return
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [d for d in subdirectories if d != cache.LOCKS_DIR]
        for name in files:
            if name.endswith(cache.TEMP_SUFFIX) or name.startswith(MARKER_PREFIX) or name == cache.KEY_FILE:
                continue
            path = Path(directory, name)
            if path.is_file() and not path.is_symlink():
                yield path.relative_to(root).as_posix(), path


def snapshot(root: Path) -> Snapshot:
    """What is in the cache at ``root`` now (to find what a task then wrote)."""
    state: Snapshot = {}
    for relative, path in _walk(root):
        stat = path.stat()
        state[relative] = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
    return state


def collect(root: Path, before: Snapshot, caller_root: Path) -> CacheFiles:
    """The files of the cache at ``root`` written since ``before``, with paths in them
    rewritten from ``root`` to ``caller_root``."""
    changed: dict[str, bytes] = {}
    for relative, path in _walk(root):
        stat = path.stat()
        if before.get(relative) != (stat.st_size, stat.st_mtime_ns, stat.st_ino):
            changed[relative] = relocate_file(path.name, path.read_bytes(), root, caller_root)
    return CacheFiles(changed)


def pack(root: Path, dirnames: Iterable[str]) -> CacheFiles:
    """The files of the named entries of the cache at ``root`` (those that exist)."""
    files: dict[str, bytes] = {}
    for dirname in dirnames:
        for relative, path in _walk(root / dirname):
            files[f"{dirname}/{relative}"] = path.read_bytes()
    return CacheFiles(files)


def unpack(root: Path, files: CacheFiles) -> None:
    """Write ``files`` into the fresh, private cache at ``root`` (a worker's scratch cache)."""
    for relative, data in files.files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name == VERDICTS_FILE:
            data = _resealed_verdicts(path.parent, _json(data) or {})
        path.write_bytes(reseal(root, relative, data))


def install(root: Path, files: CacheFiles) -> InstallReport:
    """Write what a task brought back into the cache at ``root`` (module docstring)."""
    written: list[str] = []
    kept: list[str] = []
    for dirname, members in sorted(files.entries().items()):
        done, held = _install_entry(root, dirname, members)
        written += [f"{dirname}/{name}" for name in done]
        kept += [f"{dirname}/{name}" for name in held]
    for relative, data in sorted(files.others().items()):
        path = root / relative
        data = reseal(root, relative, data)
        try:
            if path.read_bytes() == data:
                kept.append(relative)
                continue
        except OSError:
            pass
        owned.write(root, path, data)
        written.append(relative)
    return InstallReport(tuple(written), tuple(kept))


def _install_entry(root: Path, dirname: str, members: Mapping[str, bytes]) -> tuple[list[str], list[str]]:
    meta, failed = _json(members.get(cache.META_FILE)), _json(members.get(cache.FAILED_FILE))
    written: list[str] = []
    kept: list[str] = []
    with cache.entry_lock(root, dirname):
        # The key is the incoming metadata's, else (verdicts alone, a compile cut short) the entry's own.
        ours = cache.read_json_object(root / dirname / cache.META_FILE) or {}
        digest = str((meta or failed or ours).get("key_digest", ""))
        entry = cache.CacheEntry(root / dirname, cache.CacheKey(digest, dirname, {}))
        has_kernel = bool(digest) and entry.read(cache.integrity_key(root)).data is not None
        has_failure = bool(digest) and entry.read_failure() is not None
        data = {name: content for name, content in members.items() if name not in (*_LAST, VERDICTS_FILE)}
        # Keep what the cache holds: an intact kernel over anything, a recorded failure over
        # the same failure. Otherwise write the data files, then the file that completes the entry.
        if has_kernel or (meta is None and has_failure):
            kept += [name for name in members if name != VERDICTS_FILE]
        else:
            entry.prepare()
            for name, content in sorted(data.items()):  # a substitution's files in folders of the entry too
                owned.write(root, entry.directory / name, reseal(root, f"{dirname}/{name}", content))
                written.append(name)
            if meta is not None:
                owned.remove_tree(root, entry.directory / cache.FAILED_FILE)
            for name in _LAST:
                if name in members:
                    content = _signed(root, meta, members) if name == cache.META_FILE else members[name]
                    owned.write(root, entry.directory / name, content)
                    written.append(name)
        if VERDICTS_FILE in members and _merge_verdicts(entry.directory, members[VERDICTS_FILE]):
            written.append(VERDICTS_FILE)
    return written, kept


def _signed(root: Path, meta: dict[str, Any] | None, members: Mapping[str, bytes]) -> bytes:
    """The incoming ``meta.json`` with the kernel's integrity tag under the caller's cache key
    (a worker signs with its scratch cache's own), when the kernel matches its checksum; else
    as it came, so the cache checks the kernel on first use."""
    kernel = members.get(cache.KERNEL_FILE)
    if meta is None or kernel is None or hashlib.sha256(kernel).hexdigest() != meta.get("kernel_sha256"):
        return members[cache.META_FILE]
    secret = cache.integrity_key(root, create=True)
    if secret is None:
        return members[cache.META_FILE]
    signed = {**meta, "kernel_hmac": cache.integrity_tag(secret, str(meta.get("key_digest", "")), kernel)}
    return (json.dumps(signed, indent=2, sort_keys=True) + "\n").encode()


def _merge_verdicts(directory: Path, incoming: bytes) -> bool:
    """Add the incoming device models' verdicts to the entry's (the entry's lock is held),
    sealed under this cache's key: the worker that made them is this user's own."""
    theirs = _resealed_verdicts(directory, _json(incoming) or {})
    ours = cache.read_json_object(directory / VERDICTS_FILE) or {}
    merged = {**ours, **theirs}
    if merged == ours:
        return False
    owned.write(directory.parent, directory / VERDICTS_FILE, json.dumps(merged, indent=2, sort_keys=True) + "\n")
    return True


def _resealed_verdicts(directory: Path, theirs: Mapping[str, Any]) -> dict[str, Any]:
    """Each verdict of ``theirs`` (sealed by a worker) sealed for ``directory``'s cache."""
    found = {}
    for model, sealed in theirs.items():
        verdict = sealed.get("verdict") if isinstance(sealed, dict) else None
        if isinstance(verdict, str):
            found[model] = seal_verdict(directory, model, verdict)
    return found


def reseal(root: Path, relative: str, data: bytes) -> bytes:
    """A sealed file from another cache of this user's (a worker's), sealed under the key of
    the cache at ``root``: a launch plan or a tuning record. Other files are returned as
    they are; verdicts are merged by :func:`_merge_verdicts`."""
    parts = PurePosixPath(relative).parts
    record = len(parts) == 2 and parts[0] == TUNING_DIR and parts[1].endswith(".json")
    value = _json(data) if parts[-1] == PLAN_FILE or record else None
    if value is None:
        return data
    purpose = plan_purpose(str(value.get("kernel_sha256"))) if parts[-1] == PLAN_FILE else \
        record_purpose(Path(relative))
    secret = integrity.integrity_key(root, create=True) or b""
    return (json.dumps(integrity.seal(secret, purpose, value), indent=2, sort_keys=True) + "\n").encode()


def _json(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


# -- paths inside files -----------------------------------------------------------------------


def relocate_text(text: str, old: Path, new: Path) -> str:
    """``text`` with every mention of the directory ``old`` turned into ``new``."""
    return text.replace(str(old), str(new)) if old != new else text


def relocate_command(line: str, old: Path, new: Path) -> str:
    """A shell command line with paths under ``old`` moved under ``new`` (re-quoted)."""
    if old == new or str(old) not in line:
        return line
    try:
        tokens = shlex.split(line)
    except ValueError:
        return relocate_text(line, old, new)
    return shlex.join(relocate_text(token, old, new) for token in tokens)


def relocate_file(name: str, data: bytes, old: Path, new: Path) -> bytes:
    """The content of an entry's file ``name`` with paths under ``old`` moved under ``new``:
    the reproducer command, the compile log and the metadata that quote them. Other files
    are left as they are: the kernel itself mentions where its MLIR was compiled (debug
    locations), and its size and checksum are in the metadata."""
    if old == new or name not in (*_COMMAND_FILES, *_JSON_FILES, *_TEXT_FILES) or str(old).encode() not in data:
        return data
    text = data.decode("utf-8", errors="surrogateescape")
    if name in _COMMAND_FILES:
        text = "".join(relocate_command(line, old, new) + "\n" for line in text.splitlines())
    elif name in _JSON_FILES and (value := _json(data)) is not None:
        value = {key: relocate_command(item, old, new) if key == "command" and isinstance(item, str)
                 else _relocate_value(item, old, new) for key, item in value.items()}
        text = json.dumps(value, indent=2, sort_keys=True) + "\n"
    else:
        text = relocate_text(text, old, new)
    return text.encode("utf-8", errors="surrogateescape")


def _relocate_value(value: Any, old: Path, new: Path) -> Any:
    if isinstance(value, str):
        return relocate_text(value, old, new)
    if isinstance(value, list):
        return [_relocate_value(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _relocate_value(v, old, new) for k, v in value.items()}
    return value


# -- cache keys --------------------------------------------------------------------------------


def key_mismatch(files: CacheFiles, expected: Collection[cache.CacheKey], where: str) -> str:
    """Empty when every entry in ``files`` is one of ``expected``; otherwise why not, naming
    the fields of the key material that differ (the worker computed another cache key)."""
    wanted = {key.dirname: key for key in expected}
    problems = []
    for dirname, members in sorted(files.entries().items()):
        if dirname in wanted:
            continue
        record = _json(members.get(cache.META_FILE)) or _json(members.get(cache.FAILED_FILE)) or {}
        theirs = record.get("key") if isinstance(record.get("key"), dict) else {}
        same = [k for k in expected if k.material.get("formulation") == theirs.get("formulation")]
        reference = _plain((same or list(expected) or [cache.CacheKey("", "", {})])[0].material)
        differences = [f"{name}: here {reference.get(name)!r}, there {theirs.get(name)!r}"
                       for name in sorted(set(reference) | set(theirs)) if reference.get(name) != theirs.get(name)]
        detail = "; ".join(differences) if theirs else "it has no key material"
        problems.append(f"{where} wrote cache entry {dirname}, which this process does not expect ({detail})")
    if not problems:
        return ""
    return ("\n".join(problems) + "\nThe worker computed another cache key: it needs the same installation as this "
            "machine (op packages and their versions, the IREE compiler; for target cpu, the same CPU). "
            "Nothing of this kernel was written.")


def _plain(material: Mapping[str, Any]) -> dict[str, Any]:
    """Key material as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(material, sort_keys=True))
