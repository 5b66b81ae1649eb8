"""The kernel cache: hits, misses, corruption, concurrency, runtime-only launches."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time

import pytest
import torch

from boo_core import CompileError, clear_launchables, configure, get_launchable
from boo_core.kernels.cache import entry_directories
from boo_core.settings import settings_override

from ..conftest import REPO
from .fake_plugins.scale_op import ScaleSignature


def entries(cache_dir):
    return entry_directories(cache_dir)


def launch_fresh(signature):
    """Forget in-memory launchables, then get one (from disk or compiled) and check it."""
    clear_launchables()
    launchable = get_launchable(signature)
    x = torch.randn(signature.size)
    torch.testing.assert_close(launchable(x), x * signature.factor)
    return launchable


def test_miss_then_hit_and_the_entry_holds_its_reproducer(scale_registry, private_cache):
    signature = ScaleSignature(10)
    first = launch_fresh(signature)
    assert not first.cache_hit and first.compile_seconds > 0
    [entry] = entries(private_cache)
    assert entry.name.startswith(signature.func_name[:40]) and len(entry.name) <= 64 + 1 + 24
    assert {p.name for p in entry.iterdir()} >= {"kernel.vmfb", "source.mlir", "compile_command.txt", "meta.json"}
    command = (entry / "compile_command.txt").read_text()
    assert "iree-compile" in command and str(entry / "source.mlir") in command and "--iree-input-type=torch" in command
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["key"]["signature"]["fields"]["size"] == 10 and meta["key"]["compiler"]

    second = launch_fresh(signature)
    assert second.cache_hit and second.compile_seconds == 0
    assert entries(private_cache) == [entry]


def test_in_memory_cache_returns_the_same_launchable(scale_registry, private_cache):
    signature = ScaleSignature(3)
    assert get_launchable(signature) is get_launchable(ScaleSignature(3))


def test_key_covers_signature_and_flags(scale_registry, private_cache):
    launch_fresh(ScaleSignature(6))
    launch_fresh(ScaleSignature(6, factor=3.0))
    with settings_override(extra_compile_flags=["--iree-opt-level=O1"]):
        launch_fresh(ScaleSignature(6))
    assert len(entries(private_cache)) == 3


@pytest.mark.parametrize("damage, log_message", [
    (lambda e: (e / "kernel.vmfb").write_bytes((e / "kernel.vmfb").read_bytes()[:100]), "truncated"),
    (lambda e: (e / "kernel.vmfb").write_bytes(bytes(b ^ 0xFF for b in (e / "kernel.vmfb").read_bytes())),
     "checksum mismatch"),
    (lambda e: (e / "meta.json").unlink(), "missing or invalid meta.json"),
    (lambda e: (e / "meta.json").write_text("{not json"), "missing or invalid meta.json"),
])
def test_damaged_entry_is_detected_logged_and_rebuilt(scale_registry, private_cache, caplog, damage, log_message):
    signature = ScaleSignature(12)
    launch_fresh(signature)
    [entry] = entries(private_cache)
    damage(entry)
    with caplog.at_level(logging.DEBUG, logger="boo_core"):
        rebuilt = launch_fresh(signature)  # numerics checked inside
    assert not rebuilt.cache_hit
    assert log_message in caplog.text
    assert launch_fresh(signature).cache_hit


@pytest.mark.parametrize("signed", [False, True])
def test_kernel_that_checks_out_but_does_not_load_is_rebuilt(scale_registry, private_cache, caplog, signed):
    # Garbage whose checksum is recorded: its integrity tag tells (unsigned), or, signed with
    # this cache's own key (as if BOO had written it), loading it does.
    import hashlib

    from boo_core.kernels import cache

    signature = ScaleSignature(13)
    launch_fresh(signature)
    [entry] = entries(private_cache)
    garbage = b"not a flatbuffer" * 10
    (entry / "kernel.vmfb").write_bytes(garbage)
    meta = json.loads((entry / "meta.json").read_text())
    meta.update(kernel_size=len(garbage), kernel_sha256=hashlib.sha256(garbage).hexdigest())
    if signed:
        meta["kernel_hmac"] = cache.integrity_tag(cache.integrity_key(private_cache), meta["key_digest"], garbage)
    (entry / "meta.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.DEBUG, logger="boo_core"):
        rebuilt = launch_fresh(signature)
    assert not rebuilt.cache_hit
    assert ("unusable" if signed else "its integrity tag does not match this cache's key") in caplog.text


def test_cache_off_writes_nothing(scale_registry, private_cache, monkeypatch):
    with settings_override(cache_enabled=False):
        launchable = launch_fresh(ScaleSignature(14))
    assert not launchable.cache_hit and launchable.cache_directory is None
    assert entries(private_cache) == []


def test_cache_settings_come_from_the_environment_and_python(monkeypatch, tmp_path):
    import boo_core.settings as config

    monkeypatch.setenv("BOO_CACHE_ON", "0")
    monkeypatch.setenv("BOO_CACHE_DIR", str(tmp_path / "env"))
    settings = config.reload_from_environment()
    assert settings.cache_enabled is False and settings.cache_dir == tmp_path / "env"
    assert configure(cache_enabled=True, cache_dir=tmp_path / "py").cache_dir == tmp_path / "py"
    monkeypatch.setenv("BOO_CACHE_ON", "maybe")
    with pytest.raises(ValueError, match=r"BOO_CACHE_ON='maybe': expected 0 or 1"):
        config.reload_from_environment()
    monkeypatch.undo()
    config.reload_from_environment()


WORKER = """
import os, sys, time, pathlib, torch
from boo_core import get_launchable
from boo_core.testing import isolated_registry
from tests.boo_core.fake_plugins import scale_op
from tests.boo_core.fake_plugins.scale_op import ScaleSignature

size, rendezvous = int(sys.argv[1]), pathlib.Path(sys.argv[2])
(rendezvous / f"ready-{os.getpid()}").touch()
while not (rendezvous / "go").exists():
    time.sleep(0.002)
with isolated_registry({"scale": scale_op}):
    launchable = get_launchable(ScaleSignature(size))
x = torch.randn(size)
print("hit" if launchable.cache_hit else "compiled", torch.equal(launchable(x), x * 2))
"""


def test_four_processes_launching_one_new_signature_compile_it_once(private_cache, tmp_path):
    rendezvous = tmp_path / "rendezvous"
    rendezvous.mkdir()
    env = {**os.environ, "BOO_CACHE_DIR": str(private_cache), "PYTHONPATH": str(REPO)}
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, "4097", str(rendezvous)], env=env, cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    deadline = time.monotonic() + 120
    while len(list(rendezvous.glob("ready-*"))) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    (rendezvous / "go").touch()
    outputs = [w.communicate(timeout=180) for w in workers]
    for worker, (_, err) in zip(workers, outputs):
        assert worker.returncode == 0, err
    results = sorted(out.split()[0] for out, _ in outputs)
    assert results == ["compiled", "hit", "hit", "hit"]
    assert all(out.split()[1] == "True" for out, _ in outputs)
    assert len(entries(private_cache)) == 1


RUNTIME_ONLY = """
import sys
sys.modules["iree.compiler"] = None  # as if iree-base-compiler were not installed
import torch
from boo_core import CompileError, get_launchable
from boo_core.kernels.compiler import compiler_available
from boo_core.testing import isolated_registry
from tests.boo_core.fake_plugins import scale_op
from tests.boo_core.fake_plugins.scale_op import ScaleSignature

assert not compiler_available()
with isolated_registry({"scale": scale_op}):
    launchable = get_launchable(ScaleSignature(15))
    x = torch.randn(15)
    assert launchable.cache_hit and torch.equal(launchable(x), x * 2)
    try:
        get_launchable(ScaleSignature(16))
    except CompileError as e:
        print("uncached:", e)
print("runtime-only ok")
"""


def test_runtime_only_launch_from_a_populated_cache(scale_registry, private_cache):
    launch_fresh(ScaleSignature(15))
    env = {**os.environ, "BOO_CACHE_DIR": str(private_cache), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", RUNTIME_ONLY], env=env, cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "runtime-only ok" in result.stdout
    assert "uncached: no formulation of scale_fwd_f32_n16_f2 compiles" in result.stdout
    assert "scale_fwd_f32_n16_f2 is not in the kernel cache and the IREE compiler is not installed" in result.stdout


RUNTIME_ONLY_PLANTED = """
import sys, warnings
sys.modules["iree.compiler"] = None  # as if iree-base-compiler were not installed
import torch
from boo_core import get_launchable
from boo_core.testing import isolated_registry
from tests.boo_core.fake_plugins import scale_op
from tests.boo_core.fake_plugins.scale_op import ScaleSignature

with isolated_registry({"scale": scale_op}), warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    launchable = get_launchable(ScaleSignature(18))
    x = torch.randn(18)
    print("right" if torch.equal(launchable(x), x * 2) else "WRONG", type(launchable).__name__)
    print("\\n".join(str(w.message) for w in caught))
"""


def test_runtime_only_never_serves_nor_signs_a_kernel_it_cannot_prove(scale_registry, private_cache):
    """A kernel swapped in with its checksum (here: one computing x * 3 for x * 2) runs fine in
    a child process; without a compiler to rebuild it, it is verified against PyTorch in the
    process, refused, and left unsigned, with no verdict recorded for anyone else."""
    from boo_core.kernels import cache
    from boo_core.testing import isolated_registry

    from .fake_plugins import wrong_kernel

    right = launch_fresh(ScaleSignature(18)).cache_directory
    with isolated_registry({"scale": wrong_kernel}):
        clear_launchables()
        wrong = get_launchable(ScaleSignature(18)).cache_directory  # CPU kernels are not verified by default
    assert right != wrong
    planted = (wrong / cache.KERNEL_FILE).read_bytes()
    meta = json.loads((right / cache.META_FILE).read_text())
    meta.update(kernel_size=len(planted), kernel_sha256=hashlib.sha256(planted).hexdigest())
    (right / cache.KERNEL_FILE).write_bytes(planted)
    (right / cache.META_FILE).write_text(json.dumps(meta))
    before = (right / cache.META_FILE).read_bytes()
    env = {**os.environ, "BOO_CACHE_DIR": str(private_cache), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", RUNTIME_ONLY_PLANTED], env=env, cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("right ReferenceLaunchable"), result.stdout
    assert "unproven cached kernel: fail" in result.stdout
    assert (right / cache.META_FILE).read_bytes() == before  # not signed
    assert not (right / cache.VERDICTS_FILE).exists()  # nothing vouched for to other processes


def test_uncached_compile_error_without_compiler_is_clear(scale_registry, private_cache, monkeypatch):
    import boo_core.kernels.request

    monkeypatch.setattr(boo_core.kernels.request, "compiler_available", lambda: False)
    with pytest.raises(CompileError, match="scale_fwd_f32_n17_f2 is not in the kernel cache and the IREE "
                                           "compiler is not installed"):
        get_launchable(ScaleSignature(17))
