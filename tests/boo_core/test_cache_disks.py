"""A kernel cache that cannot be written: read-only, full, out of inodes (issue 19).

Real failures where the machine allows them, simulated ones everywhere:

* read-only: ``chmod`` for a normal user; as root (which ``chmod`` does not stop) a tmpfs
  remounted read-only, which refuses root too. Skipped when neither is possible.
* full: a small tmpfs filled up to a few KiB of its end (free space swept in 4 KiB steps,
  so the write that fails moves through MLIR, command, kernel and metadata), and a tmpfs
  out of inodes. Needs root (``mount``); skipped otherwise.
* simulated: ``ENOSPC`` from the n-th write call of the cache, for every n a build makes,
  through monkeypatched ``os`` functions (runs everywhere).

Each time the kernel must come out right, compiled once (in memory when the cache cannot
take it, with a BooCacheWarning), and once space is back the cache must heal.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from boo_core import clear_launchables, get_launchable
from boo_core.kernels import cache, compiler
from boo_core.settings import settings_override
from boo_core.testing import isolated_registry
from boo_core.tools.cache_admin import clear, scan

from .fake_plugins import scale_op
from .fake_plugins.scale_op import ScaleSignature


def launch(size: int):
    clear_launchables()
    launchable = get_launchable(ScaleSignature(size))
    x = torch.randn(size)
    torch.testing.assert_close(launchable(x), x * 2)
    return launchable


@pytest.fixture
def scale():
    with isolated_registry({"scale": scale_op}):
        yield
    clear_launchables()


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    """A cache holding the entry of size 50, compiled once for the module."""
    directory = tmp_path_factory.mktemp("golden") / "cache"
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=directory):
        launch(50)
    clear_launchables()
    return directory


@pytest.fixture
def compiles(monkeypatch) -> list[int]:
    """Counts the compiles (each is one element)."""
    calls: list[int] = []
    real = compiler.compile_to_bytes

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr("boo_core.kernels.request.compile_to_bytes", counted)
    return calls


@contextlib.contextmanager
def tmpfs(where: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``where`` (root only), unmounted after."""
    where.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.decode().strip() or 'not permitted'})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _assert_untouched(before: dict[str, bytes], directory: Path) -> None:
    after = {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()}
    assert after == before


# -- read-only ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def read_only(directory: Path, mount_point: Path) -> Iterator[Path]:
    """``directory`` (a populated cache) made read-only for this process, for real; the
    path to use."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [directory, *directory.rglob("*")]}
        for path in modes:
            path.chmod(modes[path] & ~0o222)
        try:
            yield directory
        finally:
            for path, mode in modes.items():
                path.chmod(mode)
        return
    with tmpfs(mount_point, "size=16m") as mounted:
        shutil.copytree(directory, mounted / "cache", symlinks=True)
        result = subprocess.run(["mount", "-o", "remount,ro", str(mounted)], capture_output=True)
        if result.returncode != 0:
            pytest.skip(f"cannot remount read-only: {result.stderr.decode().strip()}")
        probe = mounted / "cache" / "probe"
        with pytest.raises(OSError, match="Read-only file system"):
            probe.write_text("x")  # root cannot write it either
        yield mounted / "cache"


def test_a_read_only_cache_serves_its_kernels_and_compiles_new_ones_in_memory(scale, tmp_path, compiles):
    populated = tmp_path / "cache"
    with settings_override(cache_dir=populated):
        launch(40)
    compiles.clear()
    with read_only(populated, tmp_path / "ro") as directory, settings_override(cache_dir=directory):
        before = {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()}
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert launch(40).cache_hit  # a hit needs no write: no warning
        with pytest.warns(cache.BooCacheWarning, match=r"cannot be written .*compiling scale_fwd_f32_n41_f2 in memory"):
            fresh = launch(41)
        assert not fresh.cache_hit and fresh.cache_directory is None
        with settings_override(verify=True), pytest.warns(cache.BooCacheWarning):
            assert launch(42).verified  # its verdict cannot be kept: checked again next time, no error
        _assert_untouched(before, directory)
        assert len(compiles) == 2


# -- full disks, for real ------------------------------------------------------------------------------


def fill(directory: Path, leave: int) -> None:
    """Fill the file system of ``directory`` but ``leave`` bytes."""
    filler = directory / f"filler-{uuid.uuid4().hex}"
    with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)
    free = shutil.disk_usage(directory).free
    with open(filler, "r+b") as f:
        f.truncate(max(0, os.path.getsize(filler) - (leave - free)))
    assert abs(shutil.disk_usage(directory).free - leave) <= 4096


SLOW_LEVELS = tuple(pytest.param(kib, marks=pytest.mark.slow) for kib in (4, 12, 20, 28))


@pytest.mark.parametrize("free_kib", [0, 8, 16, 24, 32, *SLOW_LEVELS])
def test_a_full_disk_gives_a_right_kernel_compiled_once_and_the_cache_heals(scale, golden, tmp_path, compiles,
                                                                            free_kib):
    with tmpfs(tmp_path / "disk", "size=1m") as disk:
        directory = disk / "cache"
        shutil.copytree(golden, directory)  # the cache exists, with its integrity key and one entry
        with settings_override(cache_dir=directory):
            fill(disk, free_kib * 1024)
            compiles.clear()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                launchable = launch(51)
            assert len(compiles) == 1, "compiled twice: the kernel compiled before the write failed was not used"
            warned = [str(w.message) for w in caught if issubclass(w.category, cache.BooCacheWarning)]
            assert (launchable.cache_directory is None) == bool(warned), warned
            assert all("No space left on device" in m for m in warned), warned
            assert launch(50).cache_hit  # what was there still serves
            for filler in disk.glob("filler-*"):
                filler.unlink()  # space is back
            clear(directory, broken_only=True)
            assert launch(51).cache_hit or launch(51).cache_hit
            assert [e.problem for e in scan(directory) if e.problem] == []


def test_a_file_system_out_of_inodes_compiles_in_memory(scale, golden, tmp_path, compiles):
    with tmpfs(tmp_path / "disk", "size=4m,nr_inodes=32") as disk:
        directory = disk / "cache"
        shutil.copytree(golden, directory)
        with settings_override(cache_dir=directory):
            assert launch(50).cache_hit
            with contextlib.suppress(OSError):
                for index in range(100):
                    (disk / f"inode-{index}").touch()
            with pytest.warns(cache.BooCacheWarning, match="No space left on device"):
                assert launch(51).cache_directory is None
            for path in disk.glob("inode-*"):
                path.unlink()
            clear(directory, broken_only=True)
            launch(51)
            assert launch(51).cache_hit


# -- full disks, simulated ---------------------------------------------------------------------------


def _enospc_after(monkeypatch, writes: int) -> list[str]:
    """Let ``writes`` of the calls that write an entry's files through (the scratch file's
    creation, its write, its rename into place), then fail every one with ENOSPC (as a full
    disk does); the calls seen, by name."""
    seen: list[str] = []
    scratch_fds: set[int] = set()
    entry_scratch = tuple(f".{name}." for name in cache.ENTRY_FILES)

    def counted(name: str) -> None:
        seen.append(name)
        if len(seen) > writes:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real_open, real_fdopen, real_replace = os.open, os.fdopen, os.replace

    def fake_open(path, flags, *args, **kwargs):
        creates = flags & os.O_CREAT and str(path).startswith(entry_scratch)
        if creates:
            counted("open")
        fd = real_open(path, flags, *args, **kwargs)
        if creates:
            scratch_fds.add(fd)
        return fd

    def fake_fdopen(fd, *args, **kwargs):
        if fd in scratch_fds:
            scratch_fds.discard(fd)
            counted("fdopen")
        return real_fdopen(fd, *args, **kwargs)

    def fake_replace(source, *args, **kwargs):
        if str(source).startswith(entry_scratch):
            counted("replace")
        return real_replace(source, *args, **kwargs)

    for name, fake in (("open", fake_open), ("fdopen", fake_fdopen), ("replace", fake_replace)):
        monkeypatch.setattr(cache.owned.os, name, fake)
    return seen


def test_a_build_writes_this_many_times(scale, golden, tmp_path, monkeypatch):
    shutil.copytree(golden, tmp_path / "cache")
    with settings_override(cache_dir=tmp_path / "cache"):
        seen = _enospc_after(monkeypatch, 10**6)
        launch(71)
    # MLIR, command (mkstemp, fdopen, replace each), kernel, meta: the sweep below covers each.
    assert len(seen) == 12, seen


@pytest.mark.parametrize("writes", range(12))
def test_enospc_at_every_write_of_a_build(scale, golden, tmp_path, monkeypatch, compiles, writes):
    directory = tmp_path / "cache"
    shutil.copytree(golden, directory)
    with settings_override(cache_dir=directory):
        _enospc_after(monkeypatch, writes)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            launchable = launch(71)
        assert len(compiles) == 1
        assert [w for w in caught if issubclass(w.category, cache.BooCacheWarning)]
        assert launchable.cache_directory is None
        monkeypatch.undo()
        clear(directory, broken_only=True)
        assert not launch(71).cache_hit and launch(71).cache_hit
        assert [e.problem for e in scan(directory) if e.problem] == []
