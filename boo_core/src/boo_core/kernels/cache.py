"""The on-disk kernel cache.

One directory per key, named ``<readable prefix>-<hash>``::

    <cache dir>/conv2d_f32_n2c8h8w8_k4y3x3_...-3f9c.../
        kernel.vmfb            the compiled kernel
        source.mlir            what was compiled
        compile_command.txt    the exact iree-compile command (the reproducer)
        compile_log.txt        the compiler's messages, when it failed
        meta.json              key material, formulation, size, SHA-256 and integrity tag of
                               kernel.vmfb, the host and pid that built it; written last
        failed.json            instead of meta.json when this key does not compile
        verdicts.json          verification verdicts per device model
    <cache dir>/.integrity-key  32 random bytes, made on the cache's first write
    <cache dir>/.locks/<entry name>.lock

Every file is written to a temporary name and renamed into place, in directories of this
user's alone (:func:`.owned.write`), ``meta.json`` last, so a reader never sees a partial
entry. A reader checks every file by type and shape before use: ``meta.json`` must be a
regular file holding a JSON object of this format with fields of the right types,
``kernel.vmfb`` a regular file of the recorded size and SHA-256. Anything else (truncated,
corrupt, a directory where a file should be, a file where the entry should be, metadata
that is not an object) is logged and rebuilt.

Integrity: a checksum catches accidents, not a kernel changed together with its checksum,
and IREE cannot verify native code: loading corrupt kernel bytes can crash the process
(SIGSEGV, SIGILL). So ``meta.json`` also holds an HMAC-SHA256 tag of the key and the kernel
under this cache's integrity key (:mod:`.integrity`, which checks that only this user can
have read or written the key), and only a kernel whose tag matches is loaded as is:
computing it costs what the checksum costs (no extra I/O, no process). A kernel whose
integrity cannot be proven that way (changed with its checksum, planted, copied from another
cache) is rebuilt. Where no compiler is installed it is first run once in a child process
(:mod:`.validate`) and, if it survives, returned *untrusted*: the caller must verify it
against PyTorch before using it, and nothing signs it (a runtime-only process cannot tell a
planted kernel from a good one, and its check never vouches for the kernel to others).

Processes asking for one new key compile it once: the first takes the entry's lock (a file
under ``.locks``, outside the entries that ``boo cache clear`` deletes) and compiles, the
others wait and then find the entry complete. A waiter whose lock holder is stopped, or
still holds the lock after ``BOO_LOCK_TIMEOUT`` seconds, compiles in memory with a warning
(:mod:`.locks`). The compiler writes the kernel to a pipe, and BOO writes it into the
entry: a cache that cannot be written (read-only, full, not a directory) still serves, the
kernel compiled in memory, with a :class:`BooCacheWarning`.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BooCacheWarning, CacheError, CacheUntrusted, CacheUnwritable, CompileError  # noqa: F401 (re-exported)
from ..files import TEMP_SUFFIX, read_bytes, remove_path
from . import activity, owned
from .integrity import KEY_FILE, integrity_key, integrity_tag, read_only
from .locks import LOCKS_DIR, EntryLocked, entry_lock, lock_held, lock_path  # noqa: F401 (re-exported)

logger = logging.getLogger(__name__)

CACHE_FORMAT = 3
KERNEL_FILE = "kernel.vmfb"
MLIR_FILE = "source.mlir"
COMMAND_FILE = "compile_command.txt"
LOG_FILE = "compile_log.txt"
META_FILE = "meta.json"
FAILED_FILE = "failed.json"
VERDICTS_FILE = "verdicts.json"
ENTRY_FILES = (KERNEL_FILE, MLIR_FILE, COMMAND_FILE, LOG_FILE, META_FILE, FAILED_FILE, VERDICTS_FILE)
_PREFIX_LENGTH = 64
_DIGEST_LENGTH = 24  # hex digits of the key's digest in an entry's directory name
_ENTRY_NAME = re.compile(rf"^.+-[0-9a-f]{{{_DIGEST_LENGTH}}}$")
_HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_MAX_JSON_BYTES = 1 << 20  # no metadata file of BOO's is near this; a bigger one is not BOO's


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
    #: False for a kernel whose integrity tag does not prove it this cache's, used only
    #: because no compiler can rebuild it: it must be verified before it is used.
    trusted: bool = True
    #: A CUDA kernel's launch plan (:class:`~boo_core.kernels.launch_plan.LaunchPlan`), or
    #: why it has none (a string); None where no plan was asked for (other targets, or
    #: launches through IREE's runtime). Read with the kernel, so loading it does no I/O.
    plan: Any = None


@dataclass(frozen=True)
class Lookup:
    """What an entry holds: ``data``, the kernel if it matches its size and checksum;
    ``proven``, whether its integrity tag proves this cache wrote it for this key;
    ``problem``, why it cannot be used as is ("" when it can)."""

    data: bytes | None
    proven: bool = False
    problem: str = ""


Builder = Callable[["CacheEntry | None"], tuple[str, bytes]]
"""Compiles the kernel; given an entry, writes its MLIR and compile command there first.
Returns the command and the kernel."""

Validator = Callable[[bytes], "str | None"]
"""Checks a kernel whose integrity cannot be proven: None if usable, else the problem."""


# -- files ------------------------------------------------------------------------------------------


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
    """The JSON object in ``path``; None when it is missing, not a regular file (a
    directory in its place), unreadable, too big, not JSON or not an object."""
    try:  # checked on the open file: a FIFO swapped in after a check cannot block the read
        value = json.loads(read_bytes(path, _MAX_JSON_BYTES, what="cache metadata"))
    except (OSError, ValueError, RecursionError):  # FileRefused is an OSError, UnicodeDecodeError a ValueError
        return None
    return value if isinstance(value, dict) else None


def _file_size(path: Path) -> int | None:
    """The size of a regular file; None for anything else (missing, a directory, a FIFO)."""
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


# -- entries ----------------------------------------------------------------------------------------


class CacheEntry:
    """One directory of the cache."""

    def __init__(self, directory: Path, key: CacheKey, *, scratch: bool = False) -> None:
        self.directory = directory
        self.key = key
        #: A scratch directory standing in for an entry (a compile with no cache): nothing
        #: in it is signed or kept.
        self.scratch = scratch

    @property
    def kernel_path(self) -> Path:
        return self.directory / KERNEL_FILE

    @property
    def mlir_path(self) -> Path:
        return self.directory / MLIR_FILE

    def read_meta(self) -> dict[str, Any] | None:
        """``meta.json`` if it is an object describing this key in this format, its fields
        of the right types."""
        meta = read_json_object(self.directory / META_FILE)
        if meta is None or meta.get("format") != CACHE_FORMAT or meta.get("key_digest") != self.key.digest:
            return None
        size, checksum, tag = meta.get("kernel_size"), meta.get("kernel_sha256"), meta.get("kernel_hmac")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            return None
        if not isinstance(checksum, str) or not _HEX_DIGEST.match(checksum):
            return None
        if tag is not None and (not isinstance(tag, str) or not _HEX_DIGEST.match(tag)):
            return None
        return meta

    def read(self, secret: bytes | None) -> Lookup:
        """What the entry holds (module docstring); a damaged entry is logged."""
        if not self.directory.is_dir():
            return Lookup(None, problem="no entry")
        meta = self.read_meta()
        data, problem = None, ""
        size = _file_size(self.kernel_path)
        if meta is None:
            problem = f"missing or invalid {META_FILE}"
        elif size is None:
            problem = f"{KERNEL_FILE} is missing or not a regular file"
        elif size != meta["kernel_size"]:
            problem = f"kernel is {size} bytes, expected {meta['kernel_size']} (truncated?)"
        else:
            try:
                data = read_bytes(self.kernel_path, meta["kernel_size"], what="kernel")
            except OSError as e:
                problem = f"kernel unreadable ({e.strerror or e})"
        tag = meta.get("kernel_hmac") if meta is not None else None
        if data is not None and secret is not None and isinstance(tag, str) and \
                hmac.compare_digest(tag, integrity_tag(secret, self.key.digest, data)):
            return Lookup(data, proven=True)  # the common case: one keyed hash, no checksum needed
        if data is not None and hashlib.sha256(data).hexdigest() != meta["kernel_sha256"]:
            data, problem = None, "kernel checksum mismatch (corrupt)"
        if data is None:
            if any(_exists(self.directory / name) for name in (META_FILE, KERNEL_FILE)):
                logger.info("cache entry %s: %s; rebuilding", self.directory.name, problem)
            return Lookup(None, problem=problem)
        return Lookup(data, problem="its integrity tag does not match this cache's key (the kernel was changed "
                                    "together with its checksum, or copied from another cache)")

    def read_failure(self) -> dict[str, Any] | None:
        """The record of this key's failed compile, if there is one of the right shape."""
        failure = read_json_object(self.directory / FAILED_FILE)
        if failure is None or failure.get("key_digest") != self.key.digest or failure.get("format") != CACHE_FORMAT:
            return None
        if not all(isinstance(failure.get(name, ""), str) for name in ("error", "created", "log", "command")):
            return None
        return failure

    def prepare(self) -> None:
        """Make the entry a directory of this user's that no one else can write, replacing
        a file or a symbolic link in its place (:mod:`.owned`; an entry another user's
        directory holds raises :class:`CacheUnwritable`), and clear its files that are
        directories."""
        owned.ensure_directory(self.directory.parent, self.directory)
        for name in ENTRY_FILES:
            path = self.directory / name
            if path.is_dir() or (path.is_symlink() and not path.exists()):
                owned.remove_tree(self.directory.parent, path)

    def invalidate(self) -> None:
        """Remove the metadata so the next reader rebuilds the entry."""
        for name in (META_FILE, FAILED_FILE):
            owned.remove_tree(self.directory.parent, self.directory / name)

    def write_text(self, name: str, text: str | bytes) -> Path:
        return owned.write(self.directory.parent, self.directory / name, text)

    def commit(self, data: bytes, command: str, compile_seconds: float, details: dict[str, Any],
               secret: bytes) -> None:
        """Write a freshly compiled kernel, then its metadata (last)."""
        owned.write(self.directory.parent, self.kernel_path, data)
        meta = {
            "format": CACHE_FORMAT,
            "key_digest": self.key.digest,
            "key": self.key.material,
            "kernel_size": len(data),
            "kernel_sha256": hashlib.sha256(data).hexdigest(),
            "kernel_hmac": integrity_tag(secret, self.key.digest, data),
            "compile_seconds": round(compile_seconds, 4),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "built_by": {"host": socket.gethostname(), "pid": os.getpid()},
            "command": command,
            **details,
        }
        owned.remove_tree(self.directory.parent, self.directory / FAILED_FILE)
        self.write_text(META_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")

    def record_failure(self, error: CompileError) -> None:
        """Remember that this key does not compile (the key covers compiler, flags and the
        op's code, so the outcome would be the same), with the log and the reproducer."""
        log = self.write_text(LOG_FILE, str(error) + "\n")
        record = {"format": CACHE_FORMAT, "key_digest": self.key.digest, "key": self.key.material,
                  "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "error": str(error).splitlines()[0],
                  "log": str(log), "command": error.command or ""}
        self.write_text(FAILED_FILE, json.dumps(record, indent=2, sort_keys=True) + "\n")


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


# -- lookup and build -------------------------------------------------------------------------------


def fetch_or_build(cache_dir: Path, key: CacheKey, build: Builder, details: dict[str, Any] | None = None, *,
                   rebuild: bool = False, validate: Validator | None = None) -> CachedKernel:
    """The kernel for ``key`` from the cache under ``cache_dir``, compiling it if needed
    (``rebuild``: compile again whatever the cache holds). A recorded compile failure of
    this key raises its :class:`CompileError` again without compiling. ``validate``
    checks a kernel whose integrity cannot be proven (instead of rebuilding it: for when
    there is no compiler). A cache that cannot be written compiles in memory, with a
    warning."""
    entry = CacheEntry(cache_dir / key.dirname, key)
    validate = _once(validate) if validate is not None else None
    if not rebuild:
        found = _usable(entry, cache_dir, validate)
        if found is not None:
            activity.count("kernel hit")
            return found
        _raise_recorded_failure(entry)
    if read_only():  # a shared cache (BOO_CACHE_OWNER): read, never written
        logger.info("%s is not in the shared cache %s; compiling it in memory", key.prefix, cache_dir)
        return build_uncached(key, build, details)
    try:
        with entry_lock(cache_dir, key.dirname):
            if rebuild:
                entry.prepare()
                entry.invalidate()
            else:
                found = _usable(entry, cache_dir, validate)  # another process may have built it while we waited
                if found is not None:
                    activity.count("kernel waited")
                    return found
                _raise_recorded_failure(entry)
            return _build(entry, build, details or {}, cache_dir)
    except EntryLocked as e:
        warnings.warn(f"BOO gave up waiting for another process: {e}; compiling {key.prefix} in memory (the cache "
                      "entry is left to that process)", BooCacheWarning, stacklevel=3)
        return build_uncached(key, build, details)
    except CacheUnwritable as e:
        warnings.warn(f"BOO's kernel cache cannot be written ({e}); compiling {key.prefix} in memory",
                      BooCacheWarning, stacklevel=3)
        return build_uncached(key, build, details)


def _once(validate: Validator) -> Validator:
    """``validate``, remembering its verdict per kernel (one child process per kernel)."""
    verdicts: dict[str, str | None] = {}

    def once(data: bytes) -> str | None:
        digest = hashlib.sha256(data).hexdigest()
        if digest not in verdicts:
            verdicts[digest] = validate(data)
        return verdicts[digest]

    return once


def _usable(entry: CacheEntry, cache_dir: Path, validate: Validator | None) -> CachedKernel | None:
    """The entry's kernel if it can be loaded: proven by its tag, or (with ``validate``,
    for a process without a compiler) checked in a child process and returned untrusted."""
    secret = integrity_key(cache_dir)
    found = entry.read(secret)
    if found.data is not None and not found.proven and integrity_key(cache_dir, fresh=True) != secret:
        found = entry.read(integrity_key(cache_dir))  # the key changed on disk since this process read it
    if found.proven:
        return CachedKernel(found.data, entry.directory, hit=True)
    if found.data is None:
        return None
    if validate is None:
        logger.info("cache entry %s: %s; rebuilding", entry.directory.name, found.problem)
        return None
    problem = validate(found.data)
    if problem is not None:
        logger.warning("cache entry %s: %s, and it failed a check in a child process (%s)", entry.directory.name,
                       found.problem, problem)
        return None
    logger.warning("cache entry %s: %s, and no compiler is installed to rebuild it; it loads and runs in a child "
                   "process, and is used only if it passes verification against PyTorch in this process (it is "
                   "never signed)", entry.directory.name, found.problem)
    return CachedKernel(found.data, entry.directory, hit=True, trusted=False)


def _raise_recorded_failure(entry: CacheEntry) -> None:
    failure = entry.read_failure()
    if failure is not None:
        raise CompileError(f"{failure.get('error') or 'iree-compile failed'} (recorded {failure.get('created', '')}; "
                           f"log: {failure.get('log', '')})", mlir_path=str(entry.mlir_path),
                           command=failure.get("command") or None, log_path=failure.get("log") or None)


def build_uncached(key: CacheKey, build: Builder, details: dict[str, Any] | None = None) -> CachedKernel:
    """Compile without the disk cache, in memory."""
    start = time.perf_counter()
    _, data = build(None)
    seconds = time.perf_counter() - start
    activity.count("kernel compiled in memory", seconds)
    return CachedKernel(data, None, hit=False, compile_seconds=seconds)


def _build(entry: CacheEntry, build: Builder, details: dict[str, Any], cache_dir: Path) -> CachedKernel:
    """Compile into ``entry``, a directory of this user's alone (:meth:`CacheEntry.prepare`:
    the compiler reads the MLIR, configurations and substituted files from there, which no
    one else can have put there). A cache that turns out unwritable once the kernel is
    compiled still returns it (in memory, with a warning) rather than compiling again."""
    entry.prepare()
    start = time.perf_counter()
    try:
        command, data = build(entry)
    except CompileError as e:
        if e.recordable:
            with contextlib.suppress(CacheUnwritable):
                entry.record_failure(e)
                e.log_path = str(entry.directory / LOG_FILE)
        raise
    seconds = time.perf_counter() - start
    try:
        entry.commit(data, command, seconds, details, integrity_key(cache_dir, create=True, fresh=True) or b"")
    except CacheUnwritable as e:
        warnings.warn(f"BOO's kernel cache cannot be written ({e}); the kernel {entry.key.prefix} compiled now is "
                      "used from memory", BooCacheWarning, stacklevel=4)
        activity.count("kernel compiled in memory", seconds)
        return CachedKernel(data, None, hit=False, compile_seconds=seconds)
    activity.count("kernel compiled", seconds)
    return CachedKernel(data, entry.directory, hit=False, compile_seconds=seconds)


# -- administration ---------------------------------------------------------------------------------


def is_entry_name(name: str) -> bool:
    """Whether ``name`` is named like a cache entry (``<prefix>-<24 hex digits>``)."""
    return bool(_ENTRY_NAME.match(name))


def entry_directories(cache_dir: Path) -> list[Path]:
    """The entries under ``cache_dir``: directories named ``<prefix>-<24 hex digits>``, sorted.
    Anything else there is not BOO's and is left alone."""
    try:
        return sorted(p for p in cache_dir.iterdir() if p.is_dir() and is_entry_name(p.name))
    except OSError:
        return []


def stray_entries(cache_dir: Path) -> list[Path]:
    """Paths named like entries that are not directories (a file, a dangling symlink)."""
    try:
        return sorted(p for p in cache_dir.iterdir() if is_entry_name(p.name) and not p.is_dir())
    except OSError:
        return []


def leftovers(directory: Path) -> list[Path]:
    """Temporary files a killed writer left in an entry (``.<file>.<random>.tmp``), or, in
    the cache directory itself, of its integrity key. Nothing else is BOO's to remove."""
    prefixes = tuple(f".{name}." for name in (*ENTRY_FILES, KEY_FILE.lstrip(".")))
    try:
        return sorted(p for p in directory.iterdir() if p.name.startswith(prefixes) and p.name.endswith(TEMP_SUFFIX))
    except OSError:
        return []


def remove_entry(cache_dir: Path, directory: Path, still: Callable[[], bool] | None = None) -> bool:
    """Delete an entry after any compile holding its lock has finished, if ``still()``
    (asked under the lock) says it should go; whether it was removed."""
    with entry_lock(cache_dir, directory.name):
        if still is not None and not still():
            return False
        if directory.is_dir() and not directory.is_symlink():
            shutil.rmtree(directory, ignore_errors=True)
        else:
            remove_path(directory)
    return True
