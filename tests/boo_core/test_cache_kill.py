"""Processes killed with SIGKILL in the middle of building a kernel, and kernels corrupted
together with their checksum (issue 19). Everything here runs in real child processes.

* kill -9 at each stage of a build (making the MLIR, inside iree-compile, writing the
  kernel, writing the metadata, making the cache's integrity key): ``boo cache info``
  reports what was left, ``boo cache clear --broken`` removes it, the next run rebuilds
  the kernel right; a process waiting for the killed one's lock goes on and builds it.
* corrupt kernel bytes whose size and SHA-256 are updated to match (the old bug: SIGSEGV
  or SIGILL when IREE ran them): the child must not crash and must rebuild a right kernel,
  because the integrity tag (an HMAC under the cache's key) no longer matches. Without a
  compiler (runtime-only), such a kernel is tried in a grandchild first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from boo_core import clear_launchables, get_launchable
from boo_core.kernels import cache
from boo_core.settings import settings_override
from boo_core.testing import isolated_registry
from boo_core.tools.cache_admin import scan

from ..conftest import REPO
from .fake_plugins import scale_op
from .fake_plugins.scale_op import ScaleSignature

BOO = str(Path(sys.executable).parent / "boo")

CHILD = r"""
import os, sys, time, pathlib, torch
from boo_core import get_launchable
from boo_core.kernels import cache, compiler, request
from boo_core.testing import isolated_registry
from tests.boo_core.fake_plugins import scale_op
from tests.boo_core.fake_plugins.scale_op import ScaleSignature

size, stage, marker = int(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])


def pause():
    marker.touch()
    time.sleep(120)


if stage == "mlir":
    real_source = request.KernelRequest.source
    request.KernelRequest.source = lambda self: (pause(), real_source(self))[1]
elif stage == "compile":
    wrapper = marker.with_suffix(".sh")
    wrapper.write_text(f"#!/bin/sh\ntouch {marker}\nsleep 120\nexec {compiler.iree_compile_path()} \"$@\"\n")
    wrapper.chmod(0o755)
    compiler.iree_compile_path = lambda: str(wrapper)
elif stage in ("kernel", "meta"):
    real_write = cache.owned.write
    name = cache.KERNEL_FILE if stage == "kernel" else cache.META_FILE

    def write(root, path, data):
        if path.name == name:  # half the bytes in the temporary file, then killed
            payload = data.encode() if isinstance(data, str) else data
            (path.parent / f".{name}.killed{cache.TEMP_SUFFIX}").write_bytes(payload[: len(payload) // 2])
            pause()
        return real_write(root, path, data)

    cache.owned.write = write
elif stage == "key":
    real_link = cache.os.link
    cache.os.link = lambda *args: (pause(), real_link(*args))[1]
with isolated_registry({"scale": scale_op}):
    launchable = get_launchable(ScaleSignature(size))
x = torch.randn(size)
assert torch.equal(launchable(x), x * 2)
print("hit" if launchable.cache_hit else "built", flush=True)
"""

STAGES = {  # what boo cache info says of the entry the killed process left
    "mlir": r"incomplete: no meta.json",
    "compile": r"no kernel: its compile was interrupted \(reproducer: source.mlir, compile_command.txt\)",
    "kernel": r"no kernel: its compile was interrupted|1 leftover temporary files",
    "meta": r"incomplete: no meta.json|1 leftover temporary files",
    "key": r"leftover temporary file",
}


def child(cache_dir: Path, size: int, stage: str, marker: Path) -> subprocess.Popen:
    env = {**os.environ, "BOO_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(size), stage, str(marker)], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"the child ended before {path.name}: {process.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {path.name} within {timeout} s")
        time.sleep(0.02)


def boo(cache_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "BOO_CACHE_DIR": str(cache_dir)}
    return subprocess.run([BOO, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=300)


def launch(size: int):
    clear_launchables()
    launchable = get_launchable(ScaleSignature(size))
    x = torch.randn(size)
    torch.testing.assert_close(launchable(x), x * 2)
    return launchable


def test_kill_9_at_every_stage_of_a_build_then_the_cache_heals(tmp_path):
    cache_dir = tmp_path / "cache"
    killed = {}
    for index, stage in enumerate(STAGES):
        if stage == "key":  # only the first write of a cache makes the key: a cache of its own
            directory = tmp_path / "fresh-cache"
        else:
            directory = cache_dir
        marker = tmp_path / f"{stage}.marker"
        process = child(directory, 80 + index, stage, marker)
        wait_for(marker, process)
        if stage == "compile":  # a second process waits for the killed one's lock, then builds
            waiter = child(directory, 80 + index, "none", tmp_path / "unused")
            time.sleep(2)
        process.send_signal(signal.SIGKILL)  # the python process alone: its compiler is orphaned
        process.wait()
        killed[stage] = (directory, 80 + index)
        if stage == "compile":
            out, err = waiter.communicate(timeout=300)
            assert waiter.returncode == 0 and out.strip() == "built", err
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the orphaned compiler wrapper, if any
    # boo cache info reports what the killed writers left; clear --broken removes it.
    for directory in (cache_dir, tmp_path / "fresh-cache"):
        info = boo(directory, "cache", "info", "--list")
        assert info.returncode == 0, info.stderr
        stages = [s for s, (d, _) in killed.items() if d == directory and s != "compile"]
        for stage in stages:
            assert re.search(STAGES[stage], info.stdout), (stage, info.stdout)
        # Killed while making the key: the entry it was committing, and the key's temporary file.
        broken = len(stages) + ("key" in stages)
        assert " broken" in info.stdout and info.stdout.count("BROKEN: ") == broken, info.stdout
        cleared = boo(directory, "cache", "clear", "--broken")
        assert cleared.returncode == 0 and f"removed {broken} entries broken" in cleared.stdout, cleared.stdout
    # The next run rebuilds each kernel, right, and the one after finds it.
    with isolated_registry({"scale": scale_op}):
        for stage, (directory, size) in killed.items():
            with settings_override(cache_dir=directory):
                first = launch(size)
                assert first.cache_hit == (stage == "compile")  # the waiter built that one
                assert launch(size).cache_hit
                assert [e.problem for e in scan(directory) if e.problem] == []
    clear_launchables()


CORRUPT = r"""
import hashlib, json, random, struct, sys, pathlib, torch
from boo_core import clear_launchables, get_launchable
from boo_core.kernels import cache
from boo_core.testing import isolated_registry
from boo_core.testing.compiles import compiling_once
from tests.boo_core.fake_plugins import scale_op
from tests.boo_core.fake_plugins.scale_op import ScaleSignature

entry, names = pathlib.Path(sys.argv[1]), sys.argv[2].split(",")
good = (entry / cache.KERNEL_FILE).read_bytes()
meta = json.loads((entry / cache.META_FILE).read_text())


def sections(data):
    # The ELF shared object the llvm-cpu kernel embeds: section name -> (offset in data, size).
    elf = data.find(b"\x7fELF")
    assert elf > 0, "no ELF executable in the kernel"
    shoff, = struct.unpack_from("<Q", data, elf + 0x28)
    entsize, count, names_index = struct.unpack_from("<HHH", data, elf + 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, elf + shoff + i * entsize) for i in range(count)]
    names_at = elf + headers[names_index][4]
    return {data[names_at + h[0]:].split(b"\0")[0].decode(): (elf + h[4], h[5]) for h in headers}


where = sections(good)
text, text_size = where[".text"]
rela, rela_size = where[".rela.dyn"]
random.seed(0)


def at(offset, data):
    return good[:offset] + data + good[offset + len(data):]


PATTERNS = {  # run without the integrity tag: SIGILL, SIGTRAP, SIGSEGV, or a silently wrong result
    "code 0xff": lambda: at(text, b"\xff" * 16),
    "code int3": lambda: at(text, b"\xcc" * 16),
    "code zeroed midway": lambda: at(text + text_size // 2, bytes(16)),
    "code random": lambda: at(text, random.randbytes(text_size)),
    "code all 0xff": lambda: at(text, b"\xff" * text_size),
    "code returns at once": lambda: at(text, b"\xc3"),
    "code jumps away": lambda: at(text, b"\xe9\x00\x00\x00\x10"),
    "code nops": lambda: at(text, b"\x90" * text_size),
    "relocations zeroed": lambda: at(rela, bytes(rela_size)),
    "relocations random": lambda: at(rela, random.randbytes(rela_size)),
    "flatbuffer head zeroed": lambda: bytes(512) + good[512:],
    "every 64th byte flipped": lambda: bytes(b ^ (0xFF if i % 64 == 0 else 0) for i, b in enumerate(good)),
    "random bytes": lambda: random.randbytes(len(good)),
    "truncated with its size updated": lambda: good[: len(good) // 2],
}
# Each pattern is healed by rebuilding the same kernel: the first rebuild runs iree-compile
# (and must give the parent's kernel, byte for byte), the others get its output again.
with isolated_registry({"scale": scale_op}), compiling_once():
    for name in names:
        data = PATTERNS[name]()
        (entry / cache.KERNEL_FILE).write_bytes(data)
        changed = {**meta, "kernel_size": len(data), "kernel_sha256": hashlib.sha256(data).hexdigest()}
        (entry / cache.META_FILE).write_text(json.dumps(changed))
        clear_launchables()
        print(name, flush=True)  # the last name printed is the pattern that crashed, if one does
        launchable = get_launchable(ScaleSignature(int(sys.argv[3])))
        x = torch.randn(launchable.signature.size)
        assert torch.equal(launchable(x), x * 2), name
        assert not launchable.cache_hit and (entry / cache.KERNEL_FILE).read_bytes() == good, name
print("all rebuilt")
"""

PATTERNS = ["code 0xff", "code int3", "code zeroed midway", "code random", "code all 0xff", "code returns at once",
            "code jumps away", "code nops", "relocations zeroed", "relocations random", "flatbuffer head zeroed",
            "every 64th byte flipped", "random bytes", "truncated with its size updated"]


@pytest.fixture
def one_entry(tmp_path):
    directory = tmp_path / "cache"
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=directory):
        launch(90)
    clear_launchables()
    [entry] = cache.entry_directories(directory)
    return directory, entry


def test_corrupt_kernels_with_a_matching_checksum_never_crash_and_are_rebuilt(one_entry):
    directory, entry = one_entry
    env = {**os.environ, "BOO_CACHE_DIR": str(directory), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", CORRUPT, str(entry), ",".join(PATTERNS), "90"], env=env,
                            cwd=REPO, capture_output=True, text=True, timeout=900)
    last = result.stdout.strip().splitlines()[-1:]
    assert result.returncode == 0, f"died with {result.returncode} at pattern {last}: {result.stderr[-2000:]}"
    assert last == ["all rebuilt"]


RUNTIME_ONLY = r"""
import json, sys, pathlib, torch
sys.modules["iree.compiler"] = None  # as if iree-base-compiler were not installed
from boo_core import CompileError, clear_launchables, get_launchable
from boo_core.testing import isolated_registry
from tests.boo_core.fake_plugins import scale_op
from tests.boo_core.fake_plugins.scale_op import ScaleSignature

with isolated_registry({"scale": scale_op}):
    try:
        launchable = get_launchable(ScaleSignature(90))
    except CompileError as e:
        print("refused:", str(e).splitlines()[0])
    else:
        x = torch.randn(90)
        assert torch.equal(launchable(x), x * 2)
        print("served", launchable.cache_hit)
"""


def test_without_a_compiler_an_unproven_kernel_is_tried_in_a_child_first(one_entry, caplog):
    directory, entry = one_entry
    good = (entry / cache.KERNEL_FILE).read_bytes()
    meta = json.loads((entry / cache.META_FILE).read_text())
    env = {**os.environ, "BOO_CACHE_DIR": str(directory), "PYTHONPATH": str(REPO)}

    def run() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", RUNTIME_ONLY], env=env, cwd=REPO, capture_output=True,
                              text=True, timeout=300)

    # Corrupt native code that crashes when run, with its checksum updated: refused, no crash.
    text = good.find(b"\x7fELF") + _text_offset(good)
    crashing = good[:text] + b"\xff" * 16 + good[text + 16:]  # an illegal instruction: SIGILL when run
    (entry / cache.KERNEL_FILE).write_bytes(crashing)
    (entry / cache.META_FILE).write_text(json.dumps(
        {**meta, "kernel_sha256": hashlib.sha256(crashing).hexdigest()}))
    result = run()
    assert result.returncode == 0, result.stderr
    assert "refused: no formulation of scale_fwd_f32_n90_f2 compiles" in result.stdout
    assert "failed a check in a child process (it crashed the child process (signal" in result.stderr

    # An intact kernel from another cache (no tag of this one): run in a child, verified
    # against PyTorch in the process, used; never signed (a runtime-only process cannot tell
    # a planted kernel from a good one), so the next process checks it again.
    (entry / cache.KERNEL_FILE).write_bytes(good)
    unsigned = json.dumps({k: v for k, v in meta.items() if k != "kernel_hmac"})
    (entry / cache.META_FILE).write_text(unsigned)
    for _ in range(2):
        result = run()
        assert result.returncode == 0 and "served True" in result.stdout, result.stderr
        assert "used only if it passes verification against PyTorch" in result.stderr
    assert (entry / cache.META_FILE).read_text() == unsigned
    shutil.rmtree(directory)


def _text_offset(data: bytes) -> int:
    """Where the code (.text) of the ELF the kernel embeds starts, from the ELF's start."""
    import struct

    elf = data.find(b"\x7fELF")
    shoff, = struct.unpack_from("<Q", data, elf + 0x28)
    entsize, count, names_index = struct.unpack_from("<HHH", data, elf + 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, elf + shoff + i * entsize) for i in range(count)]
    names_at = elf + headers[names_index][4]
    return next(h[4] for h in headers if data[names_at + h[0]:].startswith(b".text\0"))
