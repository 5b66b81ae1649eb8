"""Fault injection into the kernel cache (issue 19): real files damaged in every way found,
then the kernel must still come out right, and the cache must heal.

Each damage is applied to a copy of one good cache (one compiled entry). Then: ``boo cache
info`` (``scan``) reports what it should; a launch computes right (rebuilding what needs
it); the next launch is a cache hit; ``boo cache clear --broken`` removes what the runtime
leaves alone (a damaged reproducer), and the cache ends with no broken entry.

Read-only and full disks, kill -9 during a compile and corrupt kernels with a matching
checksum are in test_cache_disks.py and test_cache_kill.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from boo_core import clear_launchables, get_launchable
from boo_core.kernels import cache
from boo_core.settings import settings_override
from boo_core.testing import isolated_registry
from boo_core.tools.cache_admin import clear, scan

from .fake_plugins import scale_op
from .fake_plugins.scale_op import ScaleSignature

SIZE = 33
OTHER = 34  # a second entry, whose files some damages borrow


def launch(size: int = SIZE):
    """A launchable from the disk cache (nothing in memory), checked against x * 2."""
    clear_launchables()
    launchable = get_launchable(ScaleSignature(size))
    x = torch.randn(size)
    torch.testing.assert_close(launchable(x), x * 2)
    return launchable


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    """A cache holding two good entries (and its integrity key), compiled once."""
    directory = tmp_path_factory.mktemp("golden") / "cache"
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=directory):
        launch(SIZE)
        launch(OTHER)
    clear_launchables()
    return directory


@pytest.fixture
def damaged_cache(golden, tmp_path):
    """A fresh copy of the golden cache, the process using it, the scale op registered."""
    directory = tmp_path / "cache"
    shutil.copytree(golden, directory, symlinks=True)
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=directory):
        yield directory
    clear_launchables()


def entry_of(cache_dir: Path, size: int = SIZE) -> Path:
    return next(p for p in cache_dir.iterdir() if p.name.startswith(f"scale_fwd_f32_n{size}_"))


# -- damages ---------------------------------------------------------------------------------------


def meta_text(text: str | bytes) -> Callable[[Path, Path], None]:
    def apply(entry: Path, cache_dir: Path) -> None:
        path = entry / cache.META_FILE
        path.write_bytes(text if isinstance(text, bytes) else text.encode())

    return apply


def meta_fields(**changes: object) -> Callable[[Path, Path], None]:
    def apply(entry: Path, cache_dir: Path) -> None:
        meta = json.loads((entry / cache.META_FILE).read_text())
        for name, value in changes.items():
            if value is _DELETE:
                del meta[name]
            else:
                meta[name] = value(meta) if callable(value) else value
        (entry / cache.META_FILE).write_text(json.dumps(meta))

    return apply


_DELETE = object()


def kernel_bytes(change: Callable[[bytes], bytes]) -> Callable[[Path, Path], None]:
    def apply(entry: Path, cache_dir: Path) -> None:
        path = entry / cache.KERNEL_FILE
        path.write_bytes(change(path.read_bytes()))

    return apply


def directory_instead_of(name: str) -> Callable[[Path, Path], None]:
    def apply(entry: Path, cache_dir: Path) -> None:
        path = entry / name
        if path.exists():
            path.unlink()
        (path / "inner").mkdir(parents=True)
        (path / "inner" / "file").write_text("x")

    return apply


def symlink_instead_of(name: str, target: str) -> Callable[[Path, Path], None]:
    def apply(entry: Path, cache_dir: Path) -> None:
        (entry / name).unlink()
        (entry / name).symlink_to(target)

    return apply


def fifo_instead_of(name: str) -> Callable[[Path, Path], None]:
    def apply(entry: Path, cache_dir: Path) -> None:
        (entry / name).unlink()
        os.mkfifo(entry / name)

    return apply


def entry_replaced_by(kind: str) -> Callable[[Path, Path], None]:
    def apply(entry: Path, cache_dir: Path) -> None:
        shutil.rmtree(entry)
        if kind == "file":
            entry.write_text("not a directory")
        elif kind == "dangling link":
            entry.symlink_to(cache_dir / "nowhere")
        elif kind == "link to a file":
            (cache_dir / "a-file").write_text("x")
            entry.symlink_to(cache_dir / "a-file")

    return apply


def from_other_entry(*names: str) -> Callable[[Path, Path], None]:
    """Files of the other entry copied over this one's (a mix-up between entries)."""
    def apply(entry: Path, cache_dir: Path) -> None:
        for name in names:
            shutil.copyfile(entry_of(cache_dir, OTHER) / name, entry / name)

    return apply


def foreign_kernel_with_checksum(entry: Path, cache_dir: Path) -> None:
    """Another entry's kernel, with this entry's size and checksum updated to match it."""
    import hashlib

    data = (entry_of(cache_dir, OTHER) / cache.KERNEL_FILE).read_bytes()
    (entry / cache.KERNEL_FILE).write_bytes(data)
    meta_fields(kernel_size=len(data), kernel_sha256=hashlib.sha256(data).hexdigest())(entry, cache_dir)


def in_cache_dir(change: Callable[[Path], None]) -> Callable[[Path, Path], None]:
    return lambda entry, cache_dir: change(cache_dir)


def replace_with_file(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    path.write_text("in the way")


def lock_is_directory(cache_dir: Path) -> None:
    lock = cache.lock_path(cache_dir, entry_of(cache_dir).name)
    if lock.exists():
        lock.unlink()
    (lock / "inner").mkdir(parents=True)


def leftover(name: str, where: str = "entry") -> Callable[[Path, Path], None]:
    def apply(entry: Path, cache_dir: Path) -> None:
        ((entry if where == "entry" else cache_dir) / name).write_bytes(b"left by a killed writer")

    return apply


def both(*damages: Callable[[Path, Path], None]) -> Callable[[Path, Path], None]:
    def apply(entry: Path, cache_dir: Path) -> None:
        for damage in damages:
            damage(entry, cache_dir)

    return apply


def remove(name: str) -> Callable[[Path, Path], None]:
    return lambda entry, cache_dir: (entry / name).unlink()


def failure_record(record: object) -> Callable[[Path, Path], None]:
    """A failed.json of some shape in place of the metadata (as if the key had not compiled)."""
    def apply(entry: Path, cache_dir: Path) -> None:
        meta = json.loads((entry / cache.META_FILE).read_text())
        value = record(meta) if callable(record) else record
        (entry / cache.META_FILE).unlink()
        (entry / cache.FAILED_FILE).write_text(json.dumps(value))

    return apply


@dataclass(frozen=True)
class Damage:
    """``apply(entry, cache_dir)``; ``reported``: a regex of what ``boo cache info`` says
    about the entry before it heals (None: nothing to report, the entry is fine as it is)."""

    id: str
    apply: Callable[[Path, Path], None]
    reported: str | None
    every_entry: bool = False  # the damage is to the whole cache: every entry is rebuilt


UNREADABLE = r"unreadable meta.json \(not a JSON object with a key\)"
WRONG_TYPES = r"meta.json has fields of the wrong types"
UNPROVEN = r"its integrity tag does not match this cache's key"

DAMAGES = [
    # meta.json: valid JSON that is not an object, or not JSON
    *(Damage(f"meta.json holds {text}", meta_text(text), UNREADABLE)
      for text in ("null", "[]", "42", '"x"', "true", "1e999", "{}")),
    Damage("meta.json empty", meta_text(""), UNREADABLE),
    Damage("meta.json truncated", lambda e, c: meta_text((e / cache.META_FILE).read_bytes()[:40])(e, c), UNREADABLE),
    Damage("meta.json invalid UTF-8", meta_text(b'{"format": "\xff\xfe"}'), UNREADABLE),
    Damage("meta.json NUL bytes", meta_text(b"\0" * 64), UNREADABLE),
    Damage("meta.json nested 100000 deep", meta_text("[" * 100000 + "]" * 100000), UNREADABLE),
    Damage("meta.json 2 MiB", meta_text(" " * (2 << 20) + "{}"), UNREADABLE),
    # meta.json: an object with fields of the wrong type or value
    Damage("format is a string", meta_fields(format="3"), r"cache format '3'"),
    Damage("format of an older BOO", meta_fields(format=2), r"cache format 2 \(this BOO reads format 3\)"),
    Damage("key_digest is a number", meta_fields(key_digest=42), UNREADABLE),
    Damage("key_digest of another key", meta_fields(key_digest="0" * 64), None),
    Damage("kernel_size is a string", meta_fields(kernel_size=lambda m: str(m["kernel_size"])), "says '"),
    Damage("kernel_size is true", meta_fields(kernel_size=True), "says True"),
    Damage("kernel_size is a float", meta_fields(kernel_size=lambda m: float(m["kernel_size"])), WRONG_TYPES),
    Damage("kernel_size negative", meta_fields(kernel_size=-1), "says -1"),
    Damage("kernel_sha256 is a number", meta_fields(kernel_sha256=7), WRONG_TYPES),
    Damage("kernel_sha256 too short", meta_fields(kernel_sha256="abc"), WRONG_TYPES),
    Damage("kernel_hmac is a list", meta_fields(kernel_hmac=["x"]), WRONG_TYPES),
    Damage("kernel_hmac missing", meta_fields(kernel_hmac=_DELETE), UNPROVEN),
    Damage("key is a list", meta_fields(key=[1, 2]), UNREADABLE),
    # kernel.vmfb
    Damage("kernel missing", remove(cache.KERNEL_FILE), r"kernel.vmfb is missing"),
    Damage("kernel empty", kernel_bytes(lambda b: b""), r"kernel.vmfb is 0 bytes, meta.json says \d+"),
    Damage("kernel truncated", kernel_bytes(lambda b: b[: len(b) // 3]), r"\(truncated\?\)"),
    Damage("kernel with bytes appended", kernel_bytes(lambda b: b + b"tail"), r"\(truncated\?\)"),
    Damage("kernel one byte flipped", kernel_bytes(lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:]),
           r"kernel checksum mismatch \(corrupt\)"),
    Damage("kernel zeroed", kernel_bytes(lambda b: bytes(len(b))), r"kernel checksum mismatch"),
    Damage("kernel a FIFO", fifo_instead_of(cache.KERNEL_FILE), r"kernel.vmfb is missing"),
    Damage("kernel a link to /dev/zero", symlink_instead_of(cache.KERNEL_FILE, "/dev/zero"), r"kernel.vmfb is missing"),
    Damage("meta.json a link to /dev/zero", symlink_instead_of(cache.META_FILE, "/dev/zero"), UNREADABLE),
    Damage("kernel and meta.json of another entry", from_other_entry(cache.KERNEL_FILE, cache.META_FILE),
           r"meta.json describes another entry"),
    Damage("kernel of another entry, checksum updated", foreign_kernel_with_checksum, UNPROVEN),
    # directories where files should be, and the reverse
    *(Damage(f"{name} is a directory", directory_instead_of(name),
             r"a directory where a file should be|kernel.vmfb is missing|unreadable meta.json|incomplete")
      for name in (cache.KERNEL_FILE, cache.META_FILE, cache.MLIR_FILE, cache.COMMAND_FILE, cache.VERDICTS_FILE,
                   cache.FAILED_FILE, cache.LOG_FILE)),
    Damage("entry is a file", entry_replaced_by("file"), r"not a directory"),
    Damage("entry is a dangling link", entry_replaced_by("dangling link"), r"not a directory"),
    Damage("entry is a link to a file", entry_replaced_by("link to a file"), r"not a directory"),
    Damage(".locks is a file", in_cache_dir(lambda c: replace_with_file(c / cache.LOCKS_DIR)), None),
    Damage("the entry's lock is a directory", in_cache_dir(lock_is_directory), None),
    # the integrity key
    Damage("integrity key removed", in_cache_dir(lambda c: (c / cache.KEY_FILE).unlink()), UNPROVEN, every_entry=True),
    Damage("integrity key the wrong size", in_cache_dir(lambda c: (c / cache.KEY_FILE).write_bytes(b"short")),
           UNPROVEN, every_entry=True),
    Damage("integrity key a directory", in_cache_dir(lambda c: directory_instead_of(cache.KEY_FILE)(c, c)), UNPROVEN,
           every_entry=True),
    # failure records
    *(Damage(f"failed.json holds {value!r:.30}", failure_record(value), r"incomplete: no meta.json|no kernel")
      for value in (None, [], 42)),
    Damage("failed.json fields of the wrong types", failure_record(lambda m: {
        "format": cache.CACHE_FORMAT, "key_digest": m["key_digest"], "error": 42, "log": ["x"], "command": {}}),
        r"compile failed|incomplete"),
    Damage("failed.json of an older format", failure_record(lambda m: {
        "format": 2, "key_digest": m["key_digest"], "error": "old", "log": "", "command": ""}), None),
    # what killed writers leave
    Damage("leftover kernel temp file", leftover(".kernel.vmfb.abc123.tmp"), r"1 leftover temporary files"),
    Damage("leftover meta temp file", leftover(".meta.json.abc123.tmp"), r"1 leftover temporary files"),
    Damage("leftover key temp file", leftover(".integrity-key.abc123.tmp", "cache"), None),
]


@pytest.mark.parametrize("damage", DAMAGES, ids=[d.id for d in DAMAGES])
def test_a_damaged_cache_serves_a_right_kernel_and_heals(damaged_cache, damage):
    entry = entry_of(damaged_cache)
    damage.apply(entry, damaged_cache)
    if damage.reported is not None:
        found = [e.problem or e.state for e in scan(damaged_cache)]
        assert any(re.search(damage.reported, text) for text in found), found
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a writable cache never falls back to memory
        with _alarm(60):
            launch()
        assert launch().cache_hit
    clear(damaged_cache, broken_only=True)
    assert launch().cache_hit or launch().cache_hit  # rebuilt once if clear removed it
    assert [e.problem for e in scan(damaged_cache) if e.problem] == []
    # The neighbour was never touched (or, after damage to the whole cache, is rebuilt once).
    assert launch(OTHER).cache_hit or (damage.every_entry and launch(OTHER).cache_hit)


class _alarm:
    """Fail instead of hanging (a reader blocked on a FIFO, say)."""

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        def hung(signum, frame):
            raise TimeoutError(f"hung for {self.seconds} s")

        self.previous = signal.signal(signal.SIGALRM, hung)
        signal.alarm(self.seconds)

    def __exit__(self, *exc: object) -> None:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.previous)


def test_a_cache_directory_that_is_a_file_compiles_in_memory_and_leaves_the_file_alone(tmp_path):
    path = tmp_path / "not-a-dir"
    path.write_text("the user's file")
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=path):
        with pytest.warns(cache.BooCacheWarning, match="cannot be written .*compiling scale_fwd_f32_n33_f2 in memory"):
            launchable = launch()
        assert launchable.cache_directory is None and not launchable.cache_hit
    assert path.read_text() == "the user's file"


def test_a_verdicts_file_of_any_shape_is_rechecked_and_rewritten(damaged_cache):
    entry = entry_of(damaged_cache)
    for text in ("null", "[]", '{"cpu": 42}', "{"):
        (entry / cache.VERDICTS_FILE).write_text(text)
        with settings_override(verify=True):
            assert launch().verified
        verdicts = json.loads((entry / cache.VERDICTS_FILE).read_text())
        assert [sealed["verdict"] for sealed in verdicts.values() if isinstance(sealed, dict)] == ["pass"]


def test_a_key_another_process_replaced_is_read_again_not_fought(damaged_cache):
    # This process read the key; another replaced it (the old one was damaged, say) and
    # signed the entry with the new one: this process must take the new key, not rebuild
    # the entry over and over.
    assert launch().cache_hit
    entry = entry_of(damaged_cache)
    new_key = os.urandom(32)
    (damaged_cache / cache.KEY_FILE).write_bytes(new_key)
    meta = json.loads((entry / cache.META_FILE).read_text())
    data = (entry / cache.KERNEL_FILE).read_bytes()
    meta["kernel_hmac"] = cache.integrity_tag(new_key, meta["key_digest"], data)
    (entry / cache.META_FILE).write_text(json.dumps(meta))
    assert launch().cache_hit
