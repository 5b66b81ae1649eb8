"""The cache's integrity key, and the tags that make what BOO trusts on disk its own.

Everything BOO acts on from a cache (a kernel, its launch plan, a verification verdict, a
tuning record) carries an HMAC-SHA256 tag under ``<cache dir>/.integrity-key``: 32 random
bytes that only the cache's owner can read. A file whose tag does not match was not written
by a process of that owner through BOO, and is not used: a kernel is rebuilt, a plan or a
verdict made again, a record ignored. The tag is only as good as the key's secrecy, so the
key itself is checked on every read: a regular file (no link), of the process's own user
(or, for a shared cache, of the owner named by ``BOO_CACHE_OWNER``), readable by no one
else (a shared cache's key may be read by its group and others, never written). A key that
fails the check raises :class:`~boo_core.errors.CacheUntrusted`: someone else could have
made it, or can read it, and so could sign a kernel this process would load.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from ..errors import CacheUntrusted, CacheUnwritable
from ..files import TEMP_SUFFIX, FileRefused, describe_owner, read_bytes, remove_path
from ..settings import get_settings

__all__ = ["KEY_FILE", "TAG_FIELD", "integrity_key", "integrity_tag", "key_owner", "read_only", "seal", "unseal"]

KEY_FILE = ".integrity-key"
#: The field of a sealed JSON object that holds its tag.
TAG_FIELD = "hmac"
_SECRET_BYTES = 32

_secrets: dict[Path, bytes] = {}


def key_owner() -> int:
    """The uid whose key this process trusts: ``BOO_CACHE_OWNER``'s, else its own."""
    owner = get_settings().cache_owner
    return os.geteuid() if owner is None else owner


def read_only() -> bool:
    """Whether this process only reads the cache: ``BOO_CACHE_OWNER`` names another user,
    whose signed entries it uses and into whose cache it writes nothing."""
    return key_owner() != os.geteuid()


def integrity_key(cache_dir: Path, *, create: bool = False, fresh: bool = False) -> bytes | None:
    """The secret of the cache under ``cache_dir`` (made on its first write, with
    ``create``); None when it has none yet. It is read once per process, or again with
    ``fresh`` (another process may have replaced a damaged one). Raises
    :class:`CacheUntrusted` for a key another user made or can read."""
    if create and read_only():
        raise CacheUnwritable(f"the cache {cache_dir} is {describe_owner(key_owner())}'s (BOO_CACHE_OWNER): this "
                              "process only reads what its owner signed, and writes nothing there")
    secret = None if fresh else _secrets.get(cache_dir)
    if secret is None:
        secret = _read_secret(cache_dir / KEY_FILE)
        if secret is None and create:
            secret = _create_secret(cache_dir)
        if secret is not None:
            _secrets[cache_dir] = secret
        else:
            _secrets.pop(cache_dir, None)
    return secret


def _read_secret(path: Path) -> bytes | None:
    """The key at ``path``; None when there is none or it is this user's own damaged file
    (to be replaced). Raises :class:`CacheUntrusted` for one that is not this user's alone."""
    owner = key_owner()
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if info.st_uid != owner:
        raise CacheUntrusted(f"the kernel cache's integrity key {path} belongs to {describe_owner(info.st_uid)}, "
                             f"not to {describe_owner(owner)}: another user made it, and could sign kernels this "
                             "process would run. BOO refuses this cache: remove the file if it is not yours, or set "
                             "BOO_CACHE_DIR to a directory of your own (BOO_CACHE_OWNER names the owner of a "
                             "shared cache)")
    if stat.S_ISLNK(info.st_mode):
        raise CacheUntrusted(f"the kernel cache's integrity key {path} is a symbolic link; BOO refuses this cache "
                             "(remove the link)")
    if not stat.S_ISREG(info.st_mode):
        return None  # this user's own file, damaged (a directory): replaced on the next write
    shared = read_only()
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH if shared else stat.S_IRWXG | stat.S_IRWXO):
        raise CacheUntrusted(f"the kernel cache's integrity key {path} has mode {stat.S_IMODE(info.st_mode):04o}: "
                             f"other users can {'write' if shared else 'read or write'} it, and so sign kernels this "
                             f"process would run. BOO refuses this cache: chmod 600 {path} if no one else has read "
                             "it, else remove it (the cache's kernels are then rebuilt)")
    try:
        data = read_bytes(path, _SECRET_BYTES, what="integrity key", owner=owner, follow_symlinks=False)
    except FileRefused:
        return None  # this user's own file, damaged (a directory, too long): replaced on the next write
    except OSError:
        return None
    return data if len(data) == _SECRET_BYTES else None


def _create_secret(cache_dir: Path) -> bytes:
    """Make the cache's secret, or take the one another process made first."""
    path = cache_dir / KEY_FILE
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f"{KEY_FILE}.", suffix=TEMP_SUFFIX, dir=cache_dir)  # mode 0600
    except OSError as e:
        raise CacheUnwritable(f"cannot write in {cache_dir}: {e.strerror or e}") from e
    secret = os.urandom(_SECRET_BYTES)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secret)
        try:
            os.link(tmp, path)  # never replaces: two first writers agree on one secret
        except FileExistsError:
            existing = _read_secret(path)  # raises for another user's file: never replaced
            if existing is not None:
                return existing
            remove_path(path)  # damaged (a directory, the wrong size): this user's own file
            os.replace(tmp, path)
    except OSError as e:
        raise CacheUnwritable(f"cannot write {path}: {e.strerror or e}") from e
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return secret


def integrity_tag(secret: bytes, key_digest: str, data: bytes) -> str:
    """HMAC-SHA256 of a kernel and the key it was built for, under the cache's secret."""
    return hmac.new(secret, key_digest.encode() + b"\0" + data, hashlib.sha256).hexdigest()


def _record_tag(secret: bytes, purpose: str, payload: dict[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hmac.new(secret, purpose.encode() + b"\0" + canonical.encode(), hashlib.sha256).hexdigest()


def seal(secret: bytes, purpose: str, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with a tag over it and ``purpose`` (what it is and what it is about, so a
    sealed object is never taken for another: ``"verdict <entry>"``)."""
    body = {k: v for k, v in payload.items() if k != TAG_FIELD}
    return {**body, TAG_FIELD: _record_tag(secret, purpose, body)}


def unseal(secret: bytes | None, purpose: str, sealed: Any) -> dict[str, Any] | None:
    """The payload of ``sealed`` (without its tag) if its tag is ``purpose``'s under
    ``secret``; None otherwise (no key, no tag, another writer, another purpose)."""
    if secret is None or not isinstance(sealed, dict) or not isinstance(sealed.get(TAG_FIELD), str):
        return None
    body = {k: v for k, v in sealed.items() if k != TAG_FIELD}
    return body if hmac.compare_digest(sealed[TAG_FIELD], _record_tag(secret, purpose, body)) else None
