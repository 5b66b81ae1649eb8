"""The on-disk kernel cache.

One directory per key, named ``<readable prefix>-<hash>``::

    <cache dir>/conv2d_f32_n2c8h8w8_k4y3x3_...-3f9c.../
        kernel.vmfb            the compiled kernel
        source.mlir            what was compiled
        compile_command.txt    the exact iree-compile command (the reproducer)
        compile_log.txt        the compiler's messages, when it failed
        meta.json              key material, formulation, size and SHA-256 of kernel.vmfb; written last
        failed.json            instead of meta.json when this key does not compile
        verdicts.json          verification verdicts per device model
    <cache dir>/.locks/<entry name>.lock

Every file is written to a temporary name and renamed into place (:func:`atomic_write`),
``meta.json`` last, so a reader never sees a partial entry. A reader checks the metadata's
shape and the kernel's size and SHA-256; anything else (truncated, corrupt, a directory
where a file should be, metadata that is not an object) is logged and rebuilt. Processes
asking for one new key compile it once: the first takes the entry's lock (a file under
``.locks``, outside the entries that ``boo cache clear`` deletes) and compiles, the others
wait, up to ``BOO_LOCK_TIMEOUT`` seconds, and then find the entry complete. A cache that
cannot be written (read-only, full) still serves: the kernel is compiled in memory, with a
warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock

from ..errors import BooError, CompileError

logger = logging.getLogger(__name__)

CACHE_FORMAT = 2
KERNEL_FILE = "kernel.vmfb"
MLIR_FILE = "source.mlir"
COMMAND_FILE = "compile_command.txt"
LOG_FILE = "compile_log.txt"
META_FILE = "meta.json"
FAILED_FILE = "failed.json"
LOCKS_DIR = ".locks"
TEMP_SUFFIX = ".tmp"
_PREFIX_LENGTH = 64
_DIGEST_LENGTH = 24  # hex digits of the key's digest in an entry's directory name
_ENTRY_NAME = re.compile(rf"^.+-[0-9a-f]{{{_DIGEST_LENGTH}}}$")


class CacheError(BooError):
    """The cache cannot be used as asked (a lock not obtained in time, say)."""


class CacheUnwritable(CacheError, OSError):
    """The cache directory cannot be written (read-only, full, or not a directory)."""


@dataclass(frozen=True)
class CacheKey:
    """A strong hash over everything that determines a kernel, plus a readable prefix."""

    digest: str
    prefix: str
    material: dict[str, Any]

    @classmethod
    def create(cls, prefix: str, material: dict[str, Any]) -> CacheKey:
        canonical = json.dumps(material, sort_keys=True, separators=(",", ":"))
        return cls(hashlib.sha256(canonical.encode()).hexdigest(), prefix[:_PREFIX_LENGTH], material)

    @property
    def dirname(self) -> str:
        return f"{self.prefix}-{self.digest[:_DIGEST_LENGTH]}"


@dataclass(frozen=True)
class CachedKernel:
    """A kernel read from (or just written to) the cache. ``directory`` is None for a kernel
    compiled in memory (cache disabled or unwritable)."""

    vmfb: bytes
    directory: Path | None
    hit: bool
    compile_seconds: float = 0.0


def atomic_write(path: Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename: readers see the old
    content or the new, never a part. Raises :class:`CacheUnwritable` when the directory
    cannot be written."""
    payload = data.encode() if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    except OSError as e:
        raise CacheUnwritable(f"cannot write in {path.parent}: {e.strerror or e}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise CacheUnwritable(f"cannot write {path}: {e.strerror or e}") from e
        raise
    return path


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when it is missing, unreadable, not JSON or not an
    object (a directory in its place included)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _remove_path(path: Path) -> None:
    """Remove a file, or a directory where a file should be."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            path.unlink()


def lock_path(cache_dir: Path, dirname: str) -> Path:
    return cache_dir / LOCKS_DIR / f"{dirname}.lock"


@contextlib.contextmanager
def entry_lock(cache_dir: Path, dirname: str, timeout: float | None = None) -> Iterator[None]:
    """Hold the cross-process lock of one entry (a file under ``.locks``)."""
    from ..settings import get_settings

    timeout = get_settings().lock_timeout if timeout is None else timeout
    path = lock_path(cache_dir, dirname)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CacheUnwritable(f"cannot create {path.parent}: {e.strerror or e}") from e
    lock = filelock.FileLock(str(path), timeout=timeout)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise CacheError(f"waited {timeout:.0f} s for the lock of cache entry {dirname} ({path}), held by another "
                         "process compiling it; raise BOO_LOCK_TIMEOUT, or remove the lock file if that process "
                         "is gone") from None
    except OSError as e:
        raise CacheUnwritable(f"cannot lock {path}: {e.strerror or e}") from e
    try:
        yield
    finally:
        lock.release()


class CacheEntry:
    """One directory of the cache."""

    def __init__(self, directory: Path, key: CacheKey) -> None:
        self.directory = directory
        self.key = key

    @property
    def kernel_path(self) -> Path:
        return self.directory / KERNEL_FILE

    @property
    def mlir_path(self) -> Path:
        return self.directory / MLIR_FILE

    def read_meta(self) -> dict[str, Any] | None:
        """``meta.json`` if it is an object describing this key in this format."""
        meta = read_json_object(self.directory / META_FILE)
        if meta is None or meta.get("format") != CACHE_FORMAT or meta.get("key_digest") != self.key.digest:
            return None
        if not isinstance(meta.get("kernel_size"), int) or not isinstance(meta.get("kernel_sha256"), str):
            return None
        return meta

    def read(self) -> bytes | None:
        """The kernel, if the entry is complete and intact; None otherwise (logged)."""
        if not self.directory.is_dir():
            return None
        meta = self.read_meta()
        if meta is None:
            if (self.directory / META_FILE).exists() or self.kernel_path.exists():
                logger.info("cache entry %s: missing or invalid %s; rebuilding", self.directory.name, META_FILE)
            return None
        try:
            data = self.kernel_path.read_bytes()
        except OSError as e:
            logger.info("cache entry %s: kernel unreadable (%s); rebuilding", self.directory.name, e)
            return None
        problem = None
        if len(data) != meta["kernel_size"]:
            problem = f"kernel is {len(data)} bytes, expected {meta['kernel_size']} (truncated?)"
        elif hashlib.sha256(data).hexdigest() != meta["kernel_sha256"]:
            problem = "kernel checksum mismatch (corrupt)"
        if problem:
            logger.info("cache entry %s: %s; rebuilding", self.directory.name, problem)
            return None
        return data

    def read_failure(self) -> dict[str, Any] | None:
        """The record of this key's failed compile, if there is one."""
        failure = read_json_object(self.directory / FAILED_FILE)
        if failure is None or failure.get("key_digest") != self.key.digest:
            return None
        return failure

    def prepare(self) -> None:
        """Make the entry a directory (replacing a file in its place) and clear files that
        are directories."""
        if self.directory.exists() and not self.directory.is_dir():
            _remove_path(self.directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CacheUnwritable(f"cannot create cache entry {self.directory}: {e.strerror or e}") from e
        for name in (KERNEL_FILE, MLIR_FILE, COMMAND_FILE, LOG_FILE, META_FILE, FAILED_FILE):
            if (self.directory / name).is_dir():
                _remove_path(self.directory / name)

    def invalidate(self) -> None:
        """Remove the metadata so the next reader rebuilds the entry."""
        for name in (META_FILE, FAILED_FILE):
            _remove_path(self.directory / name)

    def write_text(self, name: str, text: str) -> Path:
        return atomic_write(self.directory / name, text)

    def commit(self, kernel_tmp: Path, command: str, compile_seconds: float, details: dict[str, Any]) -> bytes:
        """Move a freshly compiled kernel into place and write the metadata last."""
        data = kernel_tmp.read_bytes()
        try:
            os.replace(kernel_tmp, self.kernel_path)
        except OSError as e:
            raise CacheUnwritable(f"cannot write {self.kernel_path}: {e.strerror or e}") from e
        meta = {
            "format": CACHE_FORMAT,
            "key_digest": self.key.digest,
            "key": self.key.material,
            "kernel_size": len(data),
            "kernel_sha256": hashlib.sha256(data).hexdigest(),
            "compile_seconds": round(compile_seconds, 4),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": command,
            **details,
        }
        _remove_path(self.directory / FAILED_FILE)
        self.write_text(META_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")
        return data

    def record_failure(self, error: CompileError) -> None:
        """Remember that this key does not compile (the key covers compiler, flags and the
        op's code, so the outcome would be the same), with the log and the reproducer."""
        log = self.write_text(LOG_FILE, str(error) + "\n")
        record = {"format": CACHE_FORMAT, "key_digest": self.key.digest, "key": self.key.material,
                  "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "error": str(error).splitlines()[0],
                  "log": str(log), "command": error.command or ""}
        self.write_text(FAILED_FILE, json.dumps(record, indent=2, sort_keys=True) + "\n")


Builder = Callable[[CacheEntry, Path], str]
"""Writes the entry's MLIR, compiles it into the given temporary kernel path, returns the command."""


def fetch_or_build(cache_dir: Path, key: CacheKey, build: Builder, details: dict[str, Any] | None = None, *,
                   rebuild: bool = False) -> CachedKernel:
    """The kernel for ``key`` from the cache under ``cache_dir``, compiling it if needed
    (``rebuild``: compile again whatever the cache holds). A recorded compile failure of
    this key raises its :class:`CompileError` again without compiling. A cache that cannot
    be written compiles in memory, with a warning."""
    entry = CacheEntry(cache_dir / key.dirname, key)
    if not rebuild:
        data = entry.read()
        if data is not None:
            return CachedKernel(data, entry.directory, hit=True)
        _raise_recorded_failure(entry)
    try:
        with entry_lock(cache_dir, key.dirname):
            if rebuild:
                entry.prepare()
                entry.invalidate()
            else:
                data = entry.read()  # another process may have built it while we waited
                if data is not None:
                    return CachedKernel(data, entry.directory, hit=True)
                _raise_recorded_failure(entry)
            return _build(entry, build, details or {})
    except CacheUnwritable as e:
        warnings.warn(f"BOO's kernel cache cannot be written ({e}); compiling {key.prefix} in memory",
                      BooCacheWarning, stacklevel=3)
        return build_uncached(key, build, details)


class BooCacheWarning(UserWarning):
    """The kernel cache could not be used as configured; BOO went on without it."""


def _raise_recorded_failure(entry: CacheEntry) -> None:
    failure = entry.read_failure()
    if failure is not None:
        raise CompileError(f"{failure.get('error', 'iree-compile failed')} (recorded {failure.get('created', '')}; "
                           f"log: {failure.get('log', '')})", mlir_path=str(entry.mlir_path),
                           command=failure.get("command") or None, log_path=failure.get("log"))


def build_uncached(key: CacheKey, build: Builder, details: dict[str, Any] | None = None) -> CachedKernel:
    """Compile without the disk cache, in a scratch directory kept only if compiling fails."""
    directory = Path(tempfile.mkdtemp(prefix=f"boo-{key.prefix[:40]}-"))
    entry = CacheEntry(directory, key)
    result = _build(entry, build, details or {})
    shutil.rmtree(directory, ignore_errors=True)
    return CachedKernel(result.vmfb, None, hit=False, compile_seconds=result.compile_seconds)


def _build(entry: CacheEntry, build: Builder, details: dict[str, Any]) -> CachedKernel:
    entry.prepare()
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{KERNEL_FILE}.", suffix=TEMP_SUFFIX, dir=entry.directory)
    except OSError as e:
        raise CacheUnwritable(f"cannot write in {entry.directory}: {e.strerror or e}") from e
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        start = time.perf_counter()
        try:
            command = build(entry, tmp)
        except CompileError as e:
            if e.recordable:
                with contextlib.suppress(CacheUnwritable):
                    entry.record_failure(e)
                    e.log_path = str(entry.directory / LOG_FILE)
            raise
        seconds = time.perf_counter() - start
        data = entry.commit(tmp, command, seconds, details)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return CachedKernel(data, entry.directory, hit=False, compile_seconds=seconds)


def is_entry_name(name: str) -> bool:
    """Whether ``name`` is named like a cache entry (``<prefix>-<24 hex digits>``)."""
    return bool(_ENTRY_NAME.match(name))


def entry_directories(cache_dir: Path) -> list[Path]:
    """The entries under ``cache_dir``: directories named ``<prefix>-<24 hex digits>``, sorted.
    Anything else there is not BOO's and is left alone."""
    if not cache_dir.is_dir():
        return []
    return sorted(p for p in cache_dir.iterdir() if p.is_dir() and is_entry_name(p.name))


def leftovers(directory: Path) -> list[Path]:
    """Temporary files a killed writer left in an entry."""
    try:
        return sorted(p for p in directory.iterdir() if p.name.startswith(".") and p.name.endswith(TEMP_SUFFIX))
    except OSError:
        return []


def remove_entry(cache_dir: Path, directory: Path) -> None:
    """Delete an entry, after any compile holding its lock has finished."""
    with entry_lock(cache_dir, directory.name):
        shutil.rmtree(directory, ignore_errors=True)
