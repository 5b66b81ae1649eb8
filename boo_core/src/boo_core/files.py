"""Reading files that BOO did not write in this process: regular files only, of bounded size,
and, for what BOO trusts, owned by the trusted user.

Anyone may hand BOO a path (a commands file, a tuning spec, a results CSV), and a cache
directory may hold what someone else put there. Opening a FIFO blocks until a writer comes,
reading ``/dev/zero`` never ends, and a file of gigabytes exhausts memory; so every such read
goes through :func:`read_bytes` or :func:`read_text`: the file is opened without blocking,
checked on the open descriptor (no race between check and read) to be a regular file of at
most ``limit`` bytes and, with ``owner``, to belong to that user and be writable by no one
else, and read once, up to the limit. What fails raises :class:`FileRefused`, an ``OSError``
whose message names the file and the reason.

Two things BOO's own writers share live here too: :data:`TEMP_SUFFIX`, the suffix of the
temporary files they rename into place, and :func:`remove_path`, how they clear a file (or
a directory) of theirs that stands where another file must go.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from pathlib import Path

from .errors import BooError

__all__ = ["TEMP_SUFFIX", "FileRefused", "describe_owner", "read_bytes", "read_text", "remove_path", "size_text"]

#: The suffix of a file being written, before it is renamed into place.
TEMP_SUFFIX = ".tmp"

#: Size limits for the files BOO reads, by kind (none of BOO's own is near its limit).
MAX_JSON_BYTES = 1 << 20
MAX_SPEC_BYTES = 16 << 20
MAX_COMMANDS_BYTES = 64 << 20
MAX_CSV_BYTES = 256 << 20
#: A kernel's MLIR or object file (a substitution's, IREE's dumps): a large kernel's run to tens of MiB.
MAX_KERNEL_FILE_BYTES = 256 << 20

_KIND_NAMES = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class FileRefused(BooError, OSError):
    """A file BOO will not read: not a regular file, too large, a symbolic link where none
    may be, owned by another user or writable by others. The message says which."""


def size_text(size: int) -> str:
    """``size`` bytes, readably (``1 MiB``, ``300 bytes``)."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.3g} {unit}"
    return f"{size} bytes"


def describe_owner(uid: int) -> str:
    """``uid 1001 (mallory)``, or ``uid 1001`` for a uid with no name."""
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def read_bytes(path: str | os.PathLike[str], limit: int, *, what: str = "file", owner: int | None = None,
               follow_symlinks: bool = True) -> bytes:
    """The content of the regular file ``path`` (``what`` names it in errors), refusing a
    file larger than ``limit`` bytes. With ``owner`` (a uid), the file must belong to that
    user and be writable by no one else; without ``follow_symlinks``, a symbolic link is
    refused too. Raises :class:`FileRefused`, or the ``OSError`` of the open (a missing
    file is ``FileNotFoundError``)."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_symlinks:
            raise FileRefused(f"{what} {path} is a symbolic link; BOO reads only the file itself here") from None
        raise
    try:
        info = os.fstat(fd)
        _check(path, info, limit, what, owner)
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:  # it grew while being read
        raise FileRefused(f"{what} {path} is larger than the {size_text(limit)} BOO reads of it")
    return data


def read_text(path: str | os.PathLike[str], limit: int, *, what: str = "file", owner: int | None = None,
              follow_symlinks: bool = True) -> str:
    """:func:`read_bytes` decoded as UTF-8 (a byte-order mark is dropped). Raises
    :class:`FileRefused` for text that is not UTF-8."""
    data = read_bytes(path, limit, what=what, owner=owner, follow_symlinks=follow_symlinks)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise FileRefused(f"{what} {path} is not UTF-8 text (byte {e.start}: {data[e.start:e.start + 1]!r})") from None


def _check(path: Path, info: os.stat_result, limit: int, what: str, owner: int | None) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _KIND_NAMES if test(info.st_mode)), "not a regular file")
        raise FileRefused(f"{what} {path} is {kind}, not a regular file")
    if info.st_size > limit:
        raise FileRefused(f"{what} {path} is {size_text(info.st_size)}, more than the {size_text(limit)} "
                          "BOO reads of it")
    if owner is None:
        return
    if info.st_uid != owner:
        raise FileRefused(f"{what} {path} belongs to {describe_owner(info.st_uid)}, not to {describe_owner(owner)}, "
                          "whose files alone BOO trusts here")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise FileRefused(f"{what} {path} is writable by other users (mode {stat.S_IMODE(info.st_mode):04o})")


def remove_path(path: Path) -> None:
    """Remove a file, a symlink, or a directory where a file should be."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            path.unlink()
