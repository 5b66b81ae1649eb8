"""Writing below the kernel cache directory, which a co-user may be able to write too.

Every directory BOO writes into below the cache directory (an entry, ``.locks``,
``tuning/``...) must be this user's and writable by no one else: each is reached from the
cache directory one component at a time, never through a symbolic link, and checked on the
open descriptor; each write is made relative to that descriptor (a temporary name, then a
rename). So a link, a file or a directory another user planted, or a directory of BOO's
renamed away and replaced between a check and a write, can never make BOO write anywhere
but into its own directories. A directory of this user's that others can write is made
writable by this user alone; one that belongs to another user raises
:class:`~boo_core.errors.CacheUnwritable` (the caller compiles in memory, with a warning),
since its owner could swap what BOO writes there. The cache directory itself may be shared
(the user chose it), but where others can write it, it must be sticky, as ``/tmp`` is: one
of this user's that is not is made writable by this user alone, and nothing is written into
one of another user's (:func:`_check_root`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from ..errors import CacheUnwritable
from ..files import TEMP_SUFFIX, describe_owner

__all__ = ["append", "ensure_directory", "owned_directory", "remove_tree", "write"]

#: Mode of the directories BOO makes (the umask may take more away).
DIRECTORY_MODE = 0o755
#: Mode of the files BOO writes: readable and writable by this user alone.
FILE_MODE = 0o600
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Never through a link; a FIFO in the file's place fails at once instead of blocking.
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _parts(root: Path, directory: Path) -> tuple[str, ...]:
    try:
        parts = directory.relative_to(root).parts
    except ValueError:
        parts = ("..",)
    if any(part in (".", "..") for part in parts):
        raise ValueError(f"{directory} is not below the cache directory {root}")
    return parts


def _open_step(parent: int, name: str, shown: Path) -> int:
    """The directory ``name`` in the directory ``parent``, made where missing (a link or a
    file in its place removed first, where this user may remove it): this user's, writable
    by no one else (made so, where it is this user's)."""
    made: OSError | None = None
    try:
        os.mkdir(name, DIRECTORY_MODE, dir_fd=parent)
    except FileExistsError:
        pass
    except OSError as e:  # read-only, not ours to write: it may be there all the same
        made = e
    try:
        fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
    except OSError as e:
        if made is not None and e.errno == errno.ENOENT:
            raise CacheUnwritable(f"cannot create {shown}: {made.strerror or made}") from made
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise CacheUnwritable(f"cannot open the directory {shown}: {e.strerror or e}") from e
        try:  # never followed: the link itself goes
            os.unlink(name, dir_fd=parent)
            os.mkdir(name, DIRECTORY_MODE, dir_fd=parent)
            fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
        except OSError as again:
            what = "a symbolic link" if e.errno == errno.ELOOP else "not a directory"
            raise CacheUnwritable(f"{shown} is {what}, and it cannot be replaced by a directory of BOO's "
                                  f"({again.strerror or again}): nothing is written through it") from e
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            raise CacheUnwritable(f"{shown} belongs to {describe_owner(info.st_uid)}, not to "
                                  f"{describe_owner(os.geteuid())}: BOO writes only into directories of the cache "
                                  "that are its user's own")
        if info.st_mode & _OTHERS_WRITE:
            os.fchmod(fd, stat.S_IMODE(info.st_mode) & ~_OTHERS_WRITE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_root(fd: int, root: Path) -> None:
    """The cache directory, where others can write it, must be sticky (as ``/tmp`` is), or
    they could rename BOO's own directories in it and put theirs in place between two steps
    of a build (the compiler reads an entry's files by their paths): one of this user's that
    is not is made writable by this user alone; one of another user's is not written."""
    info = os.fstat(fd)
    if not info.st_mode & _OTHERS_WRITE or info.st_mode & stat.S_ISVTX:
        return
    if info.st_uid == os.geteuid():
        os.fchmod(fd, stat.S_IMODE(info.st_mode) & ~_OTHERS_WRITE)
    else:
        raise CacheUnwritable(f"the cache directory {root} belongs to {describe_owner(info.st_uid)}, other users "
                              "can write it, and it is not sticky: they could swap BOO's files in it while a kernel "
                              f"compiles. Make it sticky (chmod +t {root}) or set BOO_CACHE_DIR to a directory of "
                              "your own")


@contextlib.contextmanager
def owned_directory(root: Path, directory: Path) -> Iterator[int]:
    """An open descriptor of ``directory`` (``root`` or below it), each directory from
    ``root`` down this user's alone (module docstring), made where missing."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CacheUnwritable(f"cannot create {root}: {e.strerror or e}") from e
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise CacheUnwritable(f"cannot open the cache directory {root}: {e.strerror or e}") from e
    shown = root
    try:
        _check_root(fd, root)
        for name in _parts(root, directory):
            shown = shown / name
            step = _open_step(fd, name, shown)
            os.close(fd)
            fd = step
        yield fd
    finally:
        os.close(fd)


def ensure_directory(root: Path, directory: Path) -> Path:
    """Make ``directory`` (below ``root``) a directory of this user's alone, or raise
    :class:`~boo_core.errors.CacheUnwritable`."""
    with owned_directory(root, directory):
        return directory


def write(root: Path, path: Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` in a directory of this user's below ``root``, atomically
    (readers see the old content or the new), never through a link planted at its name.
    Raises :class:`~boo_core.errors.CacheUnwritable` when it cannot."""
    payload = data.encode() if isinstance(data, str) else data
    with owned_directory(root, path.parent) as directory:
        scratch = f".{path.name}.{secrets.token_hex(6)}{TEMP_SUFFIX}"
        try:
            fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE,
                         dir_fd=directory)
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            os.replace(scratch, path.name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(scratch, dir_fd=directory)
            if isinstance(e, OSError):
                raise CacheUnwritable(f"cannot write {path}: {e.strerror or e}") from e
            raise
    return path


def remove_tree(root: Path, path: Path) -> None:
    """Remove ``path`` (a file, a link or a directory and all it holds) from a directory of
    this user's below ``root``, relative to open descriptors throughout: nothing outside it
    is ever removed, whatever links it holds. Nothing there: nothing to do."""
    with owned_directory(root, path.parent) as directory:
        try:
            _remove_at(directory, path.name)
        except OSError as e:
            raise CacheUnwritable(f"cannot remove {path}: {e.strerror or e}") from e


def _remove_at(directory: int, name: str) -> None:
    try:
        fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=directory)
    except FileNotFoundError:
        return
    except OSError:  # a file or a link: removed itself, never what a link points to
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=directory)
        return
    try:
        with os.scandir(fd) as entries:
            names = [entry.name for entry in entries]
        for inner in names:
            _remove_at(fd, inner)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=directory)


def append(root: Path, path: Path, text: str) -> None:
    """Append ``text`` to the regular file ``path`` (made if missing) in a directory of this
    user's below ``root``, never through a link planted at its name."""
    with owned_directory(root, path.parent) as directory:
        try:
            try:
                fd = os.open(path.name, _APPEND_FLAGS, FILE_MODE, dir_fd=directory)
            except OSError as e:
                if e.errno != errno.ELOOP:
                    raise
                os.unlink(path.name, dir_fd=directory)  # a link at its name: the link goes, not what it names
                fd = os.open(path.name, _APPEND_FLAGS, FILE_MODE, dir_fd=directory)
        except OSError as e:
            raise CacheUnwritable(f"cannot write {path}: {e.strerror or e}") from e
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise CacheUnwritable(f"{path} is not a regular file")
            f.write(text)
            f.flush()
