"""Cross-process locks of cache entries, and what a waiter does when the holder is gone.

One process compiles a new kernel while the others wait on the entry's lock (an advisory
lock on ``<cache>/.locks/<entry>.lock``, released by the kernel when its holder dies). Beside
it, the holder writes ``<entry>.holder``: its host and pid. A waiter looks at that holder
while it waits: one that is stopped (SIGSTOP, a suspended job) for longer than
:data:`STOPPED_GRACE` seconds, or that still holds the lock after ``BOO_LOCK_TIMEOUT``
seconds (hung), is given up on: :func:`entry_lock` raises :class:`EntryLocked`, a
:class:`~boo_core.errors.CacheUnwritable`, and the caller compiles in memory with a
warning, as it does for a cache it cannot write.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import filelock

from ..errors import CacheUnwritable
from ..files import read_bytes
from ..settings import get_settings
from . import owned

LOCKS_DIR = ".locks"
#: Seconds a waiter lets a stopped holder stay stopped before it stops waiting.
STOPPED_GRACE = 5.0
#: Seconds between two looks at the holder while waiting.
_POLL = 0.25
_HOLDER_BYTES = 4096


class EntryLocked(CacheUnwritable):
    """Another process holds an entry's lock and is not making progress (stopped past the
    grace, or holding it past ``BOO_LOCK_TIMEOUT``): the entry cannot be written now."""


def lock_path(cache_dir: Path, dirname: str) -> Path:
    return cache_dir / LOCKS_DIR / f"{dirname}.lock"


def holder_path(cache_dir: Path, dirname: str) -> Path:
    return cache_dir / LOCKS_DIR / f"{dirname}.holder"


@contextlib.contextmanager
def entry_lock(cache_dir: Path, dirname: str, timeout: float | None = None) -> Iterator[None]:
    """Hold the cross-process lock of one entry (module docstring). A file where the
    ``.locks`` directory should be, or a directory where a lock file should be, is BOO's
    own leftover and replaced. Raises :class:`EntryLocked` when the holder is stopped or
    hung, :class:`CacheUnwritable` when the lock cannot be made."""
    timeout = get_settings().lock_timeout if timeout is None else timeout
    path = lock_path(cache_dir, dirname)
    _prepare(cache_dir, path)
    lock = filelock.FileLock(str(path), timeout=timeout)
    _acquire(lock, holder_path(cache_dir, dirname), dirname, timeout)
    holder = holder_path(cache_dir, dirname)
    with contextlib.suppress(OSError):  # never through a link planted at its name (owned)
        owned.write(cache_dir, holder, json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            holder.unlink()
        lock.release()


def _prepare(cache_dir: Path, path: Path) -> None:
    """Make ``.locks`` a directory of this user's alone, replacing a file or a link in its
    place (:mod:`.owned`: another user's directory raises :class:`CacheUnwritable`), and
    clear a directory standing where the lock file ``path`` goes."""
    if path.is_dir() and not path.is_symlink():
        owned.remove_tree(cache_dir, path)
    else:
        owned.ensure_directory(cache_dir, path.parent)


def _acquire(lock: filelock.FileLock, holder: Path, dirname: str, timeout: float) -> None:
    """Take ``lock``, looking at its holder between tries (module docstring)."""
    deadline = time.monotonic() + timeout
    stopped_since: float | None = None
    while True:
        try:
            lock.acquire(timeout=min(_POLL, max(deadline - time.monotonic(), 0.0)))
            return
        except filelock.Timeout:
            pass
        except OSError as e:
            raise CacheUnwritable(f"cannot lock {lock.lock_file}: {e.strerror or e}") from e
        now = time.monotonic()
        pid = _local_holder(holder)
        if pid is not None and _stopped(pid):
            stopped_since = stopped_since if stopped_since is not None else now
            if now - stopped_since >= STOPPED_GRACE:
                raise EntryLocked(f"the lock of cache entry {dirname} is held by process {pid}, which has been "
                                  f"stopped for {now - stopped_since:.0f} s")
        else:
            stopped_since = None
        if now >= deadline:
            raise EntryLocked(f"the lock of cache entry {dirname} has been held by another process for "
                              f"{timeout:.0f} s (BOO_LOCK_TIMEOUT){f', process {pid}' if pid else ''}")


def _local_holder(holder: Path) -> int | None:
    """The pid in the holder file when the holder runs on this host."""
    try:
        data = json.loads(read_bytes(holder, _HOLDER_BYTES, what="lock holder", follow_symlinks=False))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("host") != socket.gethostname():
        return None
    pid = data.get("pid")
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (job control or a tracer), from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read(4096).rsplit(b")", 1)[-1].split()
    except OSError:
        return False
    return bool(fields) and fields[0] in (b"T", b"t")


def lock_held(cache_dir: Path, dirname: str) -> bool:
    """Whether another process holds the entry's lock now (it is compiling that entry)."""
    path = lock_path(cache_dir, dirname)
    if not path.is_file():
        return False
    lock = filelock.FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        return True
    except OSError:
        return False
    lock.release()
    return False
