"""The on-disk kernel cache.

One directory per key, named ``<readable prefix>-<hash>``::

    <cache dir>/conv2d_f32_n2c8h8w8_k4y3x3_...-3f9c.../
        kernel.vmfb            the compiled kernel
        source.mlir            what was compiled
        compile_command.txt    the exact iree-compile command (the reproducer)
        meta.json              key material, size and SHA-256 of kernel.vmfb; written last
        .lock                  serializes compiles of this key across processes

Every file is written to a temporary name and renamed into place, and ``meta.json`` last,
so a reader never sees a partial entry. A reader checks size and SHA-256 of the kernel
against ``meta.json``; a truncated or corrupt entry is reported at debug level and rebuilt.
Concurrent processes asking for one new key compile it once: the first takes the entry's
lock and compiles, the others wait on the lock and then find the entry complete.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX: no cross-process lock
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

CACHE_FORMAT = 1
KERNEL_FILE = "kernel.vmfb"
MLIR_FILE = "source.mlir"
COMMAND_FILE = "compile_command.txt"
META_FILE = "meta.json"
_PREFIX_LENGTH = 64
_DIGEST_LENGTH = 24  # hex digits of the key's digest in an entry's directory name
_ENTRY_NAME = re.compile(rf"^.+-[0-9a-f]{{{_DIGEST_LENGTH}}}$")


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
    """A kernel read from (or just written to) the cache."""

    vmfb: bytes
    directory: Path
    hit: bool
    compile_seconds: float = 0.0


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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

    def read(self) -> bytes | None:
        """The kernel, if the entry is complete and intact; None otherwise."""
        meta_path = self.directory / META_FILE
        try:
            meta = json.loads(meta_path.read_text())
        except FileNotFoundError:
            if self.kernel_path.exists():
                logger.debug("cache entry %s has a kernel but no %s; rebuilding", self.directory, META_FILE)
            return None
        except (OSError, ValueError) as e:
            logger.debug("cache entry %s: unreadable %s (%s); rebuilding", self.directory, META_FILE, e)
            return None
        try:
            data = self.kernel_path.read_bytes()
        except OSError as e:
            logger.debug("cache entry %s: kernel unreadable (%s); rebuilding", self.directory, e)
            return None
        problem = None
        if meta.get("format") != CACHE_FORMAT or meta.get("key_digest") != self.key.digest:
            problem = "metadata from another key or format"
        elif len(data) != meta.get("kernel_size"):
            problem = f"kernel is {len(data)} bytes, expected {meta.get('kernel_size')} (truncated?)"
        elif hashlib.sha256(data).hexdigest() != meta.get("kernel_sha256"):
            problem = "kernel checksum mismatch (corrupt)"
        if problem:
            logger.debug("cache entry %s: %s; rebuilding", self.directory, problem)
            return None
        return data

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold this entry's cross-process lock."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            yield
            return
        with open(self.directory / ".lock", "a+b") as lock_file:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)

    def invalidate(self) -> None:
        """Remove the metadata so the next reader rebuilds the entry."""
        with contextlib.suppress(FileNotFoundError):
            (self.directory / META_FILE).unlink()

    def write_text(self, name: str, text: str) -> Path:
        path = self.directory / name
        _atomic_write(path, text.encode())
        return path

    def commit(self, kernel_tmp: Path, command: str, compile_seconds: float) -> bytes:
        """Move a freshly compiled kernel into place and write the metadata last."""
        data = kernel_tmp.read_bytes()
        os.replace(kernel_tmp, self.kernel_path)
        meta = {
            "format": CACHE_FORMAT,
            "key_digest": self.key.digest,
            "key": self.key.material,
            "kernel_size": len(data),
            "kernel_sha256": hashlib.sha256(data).hexdigest(),
            "compile_seconds": round(compile_seconds, 4),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": command,
        }
        self.write_text(META_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")
        return data


Builder = Callable[[CacheEntry, Path], str]
"""Writes the entry's MLIR, compiles it into the given temporary kernel path, returns the command."""


def fetch_or_build(cache_dir: Path, key: CacheKey, build: Builder) -> CachedKernel:
    """The kernel for ``key`` from the cache under ``cache_dir``, compiling it if needed."""
    entry = CacheEntry(cache_dir / key.dirname, key)
    data = entry.read()
    if data is not None:
        return CachedKernel(data, entry.directory, hit=True)
    with entry.locked():
        data = entry.read()  # another process may have built it while we waited
        if data is not None:
            return CachedKernel(data, entry.directory, hit=True)
        return _build(entry, build)


def rebuild(cache_dir: Path, key: CacheKey, build: Builder) -> CachedKernel:
    """Compile ``key`` again, replacing whatever the cache holds (a kernel that failed to load)."""
    entry = CacheEntry(cache_dir / key.dirname, key)
    with entry.locked():
        entry.invalidate()
        return _build(entry, build)


def build_uncached(key: CacheKey, build: Builder) -> CachedKernel:
    """Compile without the disk cache, in a scratch directory kept only if compiling fails."""
    directory = Path(tempfile.mkdtemp(prefix=f"boo-{key.prefix[:40]}-"))
    entry = CacheEntry(directory, key)
    result = _build(entry, build)
    shutil.rmtree(directory, ignore_errors=True)
    return CachedKernel(result.vmfb, directory, hit=False, compile_seconds=result.compile_seconds)


def _build(entry: CacheEntry, build: Builder) -> CachedKernel:
    entry.directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{KERNEL_FILE}.", suffix=".tmp", dir=entry.directory)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        start = time.perf_counter()
        command = build(entry, tmp)
        seconds = time.perf_counter() - start
        data = entry.commit(tmp, command, seconds)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return CachedKernel(data, entry.directory, hit=False, compile_seconds=seconds)


def entry_directories(cache_dir: Path) -> list[Path]:
    """The entries under ``cache_dir``: directories named ``<prefix>-<24 hex digits>``, sorted.
    Anything else there is not BOO's and is left alone."""
    if not cache_dir.is_dir():
        return []
    return sorted(p for p in cache_dir.iterdir() if p.is_dir() and _ENTRY_NAME.match(p.name))


def remove_entry(directory: Path) -> None:
    """Delete an entry, after any compile holding its lock has finished."""
    if fcntl is None:  # pragma: no cover - non-POSIX
        shutil.rmtree(directory, ignore_errors=True)
        return
    with open(directory / ".lock", "a+b") as lock_file:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
        shutil.rmtree(directory, ignore_errors=True)
