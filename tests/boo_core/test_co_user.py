"""A hostile co-user: another real user who can write the cache directory (a shared or sticky
one) plants an integrity key, kernels, verdicts, launch plans and tuning records. Nothing
planted is served or run: a foreign key refuses the cache with an error naming its owner;
under this user's key every planted file is refused and the kernel rebuilt.

The co-user is a throwaway account made for the test (``useradd``); its writes run in a
child process that has dropped to its uid and gid, so the files are really its own and the
kernel's permission checks apply (it cannot read this user's key).
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from boo_core import BooOpRegistry, clear_launchables, get_launchable
from boo_core.errors import CacheUntrusted
from boo_core.kernels import cache, launch_plan
from boo_core.kernels.integrity import seal
from boo_core.settings import settings_override
from boo_core.testing import isolated_registry
from boo_core.verify.verdicts import device_identity

from .fake_plugins import scale_op, wrong_kernel
from .fake_plugins.scale_op import ScaleSignature

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="making a second user needs root and useradd (CI runs as root)")

EVIL_FLAG = "--iree-llvmcpu-embedded-linker-path={script}"


@pytest.fixture(scope="module")
def co_user():
    """A throwaway user: (uid, gid, name); removed afterwards."""
    name = f"boo-co-{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True,
                   capture_output=True)
    try:
        entry = pwd.getpwnam(name)
        yield entry.pw_uid, entry.pw_gid, name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def shared_dir():
    """A world-writable sticky directory both users reach (as /tmp is): the shared cache."""
    directory = Path(tempfile.mkdtemp(prefix="boo-shared-", dir="/tmp"))
    os.chmod(directory, 0o1777)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def as_user(user: tuple[int, int, str], action: Callable[[], None]) -> None:
    """Run ``action`` in a child process with the co-user's uid and gid (fork, drop, act)."""
    uid, gid, _ = user
    pid = os.fork()
    if pid == 0:  # the child: no return from here
        code = 1
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            action()
            code = 0
        except BaseException as e:  # reported through the exit status and stderr
            os.write(2, f"co-user action failed: {type(e).__name__}: {e}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the co-user's action failed (see stderr)"


def evil_script(directory: Path) -> tuple[Path, Path]:
    """A program that leaves a marker if anything ever runs it, and the marker's path."""
    marker = directory / "evil-ran"
    script = directory / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    return script, marker


def planted_record(signature: ScaleSignature, cache_dir: Path, script: Path, secret: bytes) -> tuple[Path, bytes]:
    """A tuning record for ``signature`` whose winner's flags run ``script``, sealed under
    ``secret``: its path and content."""
    from boo_core.kernels.compiler import compiler_version
    from boo_core.kernels.tuning_records import TuningRecord, record_path

    device = device_identity(torch.device("cpu"))
    path = record_path(signature, "cpu", device, cache_dir=cache_dir)
    record = TuningRecord(signature.func_name, signature.canonical(), "cpu", compiler_version(), device, "default",
                          flags=(EVIL_FLAG.format(script=script),), label="planted")
    return path, json.dumps(seal(secret, f"tuning record {path.name}", record.to_json())).encode()


def write_file(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def test_a_key_the_co_user_made_first_refuses_the_cache_and_nothing_planted_runs(co_user, shared_dir):
    signature = ScaleSignature(23)
    script, marker = evil_script(shared_dir)
    with isolated_registry({"scale": wrong_kernel}), settings_override(cache_dir=shared_dir / "elsewhere"):
        clear_launchables()
        planted = get_launchable(signature)  # x * 3: the kernel the co-user wants served
        kernel = (planted.cache_directory / cache.KERNEL_FILE).read_bytes()
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=shared_dir):
        from boo_core.kernels.request import KernelRequest
        from boo_core.kernels.target import Target

        key = KernelRequest.create(signature, Target.parse("cpu")).key
        secret = b"m" * 32
        record_path, record = planted_record(signature, shared_dir, script, secret)

        def plant() -> None:
            write_file(shared_dir / cache.KEY_FILE, secret, 0o600)
            entry = shared_dir / key.dirname
            write_file(entry / cache.KERNEL_FILE, kernel)
            meta = {"format": cache.CACHE_FORMAT, "key_digest": key.digest, "key": key.material,
                    "kernel_size": len(kernel), "kernel_sha256": hashlib.sha256(kernel).hexdigest(),
                    "kernel_hmac": cache.integrity_tag(secret, key.digest, kernel)}
            write_file(entry / cache.META_FILE, json.dumps(meta).encode())
            write_file(record_path, record)

        as_user(co_user, plant)
        assert (shared_dir / cache.KEY_FILE).stat().st_uid == co_user[0]
        clear_launchables()
        with pytest.raises(CacheUntrusted, match=rf"integrity key {shared_dir / cache.KEY_FILE} belongs to "
                                                 rf"uid {co_user[0]} \({co_user[2]}\), not to uid 0 .*BOO refuses "
                                                 r"this cache"):
            get_launchable(signature)
        # the key is never replaced, whoever asks
        assert (shared_dir / cache.KEY_FILE).read_bytes() == secret
        boo = Path(sys.executable).parent / "boo"
        result = subprocess.run([str(boo), "driver", "--backend", "boo", "gemm", "-m", "4", "-n", "4", "-k", "4"],
                                env={**os.environ, "BOO_CACHE_DIR": str(shared_dir)}, capture_output=True,
                                text=True, timeout=300)
        info = subprocess.run([str(boo), "cache", "info"], env={**os.environ, "BOO_CACHE_DIR": str(shared_dir)},
                              capture_output=True, text=True, timeout=300)
    assert not marker.exists()
    assert result.returncode != 0
    assert "belongs to uid" in result.stdout + result.stderr and "Traceback" not in result.stderr
    assert info.returncode == 1 and "boo cache: error: the kernel cache's integrity key" in info.stderr
    assert "Traceback" not in info.stderr


def test_under_this_users_key_a_co_users_planted_kernel_verdict_plan_and_record_are_refused(co_user, shared_dir):
    script, marker = evil_script(shared_dir)
    signature, checked = ScaleSignature(24), ScaleSignature(25)
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=shared_dir):
        clear_launchables()
        served = get_launchable(signature)  # this user's kernel: the cache's key is now this user's
        entry = served.cache_directory
        key_file = shared_dir / cache.KEY_FILE
        assert key_file.stat().st_uid == 0 and (key_file.stat().st_mode & 0o777) == 0o600
    with isolated_registry({"scale": wrong_kernel}), settings_override(cache_dir=shared_dir, verify="all"):
        clear_launchables()
        with pytest.warns(UserWarning, match="computes with PyTorch"):
            refused = get_launchable(checked)  # x * 3 fails verification: verdict "fail", sealed
        assert refused.passed_over[0].stage == "verification"
        [wrong_entry] = [p for p in cache.entry_directories(shared_dir) if p.name.startswith(checked.func_name)]
        assert json.loads((wrong_entry / cache.VERDICTS_FILE).read_text())[device_identity(torch.device("cpu"))]
    with isolated_registry({"scale": wrong_kernel}), settings_override(cache_dir=shared_dir / "elsewhere"):
        clear_launchables()
        wrong = (get_launchable(signature).cache_directory / cache.KERNEL_FILE).read_bytes()
    cuda = cuda_entry(shared_dir)
    record_path, record = planted_record(signature, shared_dir, script, b"m" * 32)
    device = device_identity(torch.device("cpu"))

    meta = json.loads((entry / cache.META_FILE).read_text())
    meta.update(kernel_size=len(wrong), kernel_sha256=hashlib.sha256(wrong).hexdigest(), kernel_hmac="0" * 64)
    plan = json.loads((cuda / launch_plan.PLAN_FILE).read_text())
    plan["commands"][0]["grid"] = [65535, 1, 1]  # far past its buffers
    forged_plan = seal(b"m" * 32, f"launch plan {plan['kernel_sha256']}", plan)
    forged_verdict = {device: "pass"}  # the form an unsealed verdict took

    def plant() -> None:
        try:
            key_file.read_bytes()
        except PermissionError:
            pass
        else:
            raise AssertionError("the co-user could read this user's key")
        planted = ((entry, cache.KERNEL_FILE, wrong), (entry, cache.META_FILE, json.dumps(meta).encode()),
                   (wrong_entry, cache.VERDICTS_FILE, json.dumps(forged_verdict).encode()),
                   (cuda, launch_plan.PLAN_FILE, json.dumps(forged_plan).encode()))
        for directory, name, data in planted:
            (directory / name).unlink()  # the entry's directory is writable by all here; its files are not
            write_file(directory / name, data)
        write_file(record_path, record)

    for directory in (entry, wrong_entry, cuda):
        directory.chmod(0o777)  # as a group-writable or careless shared cache would be
    as_user(co_user, plant)
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=shared_dir):
        clear_launchables()
        launchable = get_launchable(signature)
        x = torch.randn(24)
        assert torch.equal(launchable(x), x * 2)  # rebuilt, not the planted x * 3
        assert not launchable.cache_hit
    with isolated_registry({"scale": wrong_kernel}), settings_override(cache_dir=shared_dir, verify="all"):
        clear_launchables()
        with pytest.warns(UserWarning, match="computes with PyTorch"):
            again = get_launchable(checked)  # the forged "pass" is not read: verified again, and refused
        x = torch.randn(25)
        assert torch.equal(again(x), x * 2)
    kernel = (cuda / cache.KERNEL_FILE).read_bytes()
    assert launch_plan.read_plan(cuda, kernel) is None
    assert not marker.exists()


def cuda_entry(cache_dir: Path) -> Path:
    """A CUDA kernel's entry (compiled without a GPU) with its launch plan, in ``cache_dir``."""
    from boo_core.kernels.request import KernelRequest
    from boo_core.kernels.target import Target

    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=cache_dir):
        kernel = KernelRequest.create(ScaleSignature(26), Target.parse("cuda:sm_80")).fetch()
    assert isinstance(launch_plan.read_plan(kernel.directory, kernel.vmfb), launch_plan.LaunchPlan)
    return kernel.directory


def test_a_key_others_can_read_refuses_the_cache(shared_dir):
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=shared_dir):
        clear_launchables()
        get_launchable(ScaleSignature(27))
        (shared_dir / cache.KEY_FILE).chmod(0o644)
        clear_launchables()
        from boo_core.kernels import integrity

        integrity._secrets.clear()
        with pytest.raises(CacheUntrusted, match=r"has mode 0644: other users can read or write it.*chmod 600"):
            get_launchable(ScaleSignature(27))


def test_a_shared_cache_is_read_with_its_owners_key_and_never_written(co_user, shared_dir):
    """BOO_CACHE_OWNER: entries the named owner signed are served; a miss is compiled in
    memory, and nothing is written into the owner's cache."""
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=shared_dir):
        clear_launchables()
        get_launchable(ScaleSignature(28))
    for path in [shared_dir, *shared_dir.rglob("*")]:  # as if the owner had compiled it
        os.chown(path, co_user[0], co_user[1], follow_symlinks=False)
    (shared_dir / cache.KEY_FILE).chmod(0o644)  # readable by its users, writable by its owner alone
    shared_dir.chmod(0o755)
    from boo_core.kernels import integrity

    before = sorted(p.relative_to(shared_dir) for p in shared_dir.rglob("*"))
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=shared_dir):
        integrity._secrets.clear()
        clear_launchables()
        with pytest.raises(CacheUntrusted, match="belongs to uid"):
            get_launchable(ScaleSignature(28))
        with settings_override(cache_owner=co_user[2]):
            clear_launchables()
            hit = get_launchable(ScaleSignature(28))
            miss = get_launchable(ScaleSignature(29))
    assert hit.cache_hit and miss.cache_directory is None
    assert sorted(p.relative_to(shared_dir) for p in shared_dir.rglob("*")) == before


def _entry_of(signature: ScaleSignature, cache_dir: Path) -> Path:
    from boo_core.kernels.request import KernelRequest
    from boo_core.kernels.target import Target

    return cache_dir / KernelRequest.create(signature, Target.parse("cpu")).key.dirname


def _own_files(directory: Path, names: tuple[str, ...]) -> dict[Path, str]:
    """Files of this user's (mode 0600) in a directory of its own: what no write of BOO's may touch."""
    directory.mkdir()
    files = {directory / name: f"this user's own {name}\n" for name in names}
    for path, text in files.items():
        path.write_text(text)
        path.chmod(0o600)
    return files


def _unchanged(files: dict[Path, str]) -> bool:
    directory = next(iter(files)).parent
    return sorted(directory.iterdir()) == sorted(files) and all(p.read_text() == t for p, t in files.items())


def test_an_entry_the_co_user_made_first_is_never_compiled_in(co_user, shared_dir):
    """The owner of an entry's directory can rename files in it: had BOO compiled there, the
    co-user could swap the MLIR under the compiler and have this user sign the result. BOO
    compiles only in directories of its user's own: this kernel is built in memory."""
    signature = ScaleSignature(31)
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=shared_dir):
        entry = _entry_of(signature, shared_dir)

        def plant() -> None:
            entry.mkdir()
            entry.chmod(0o777)

        as_user(co_user, plant)
        clear_launchables()
        owner = re.escape(f"{entry} belongs to uid {co_user[0]} ({co_user[2]})")
        with pytest.warns(cache.BooCacheWarning, match=rf"cannot be written \({owner}, not to uid 0"):
            launchable = get_launchable(signature)
        x = torch.randn(31)
        assert torch.equal(launchable(x), x * 2)
        assert launchable.cache_directory is None
    assert list(entry.iterdir()) == []  # no MLIR, no kernel, nothing signed in the co-user's directory


def test_a_link_the_co_user_plants_at_an_entrys_name_is_never_written_through(co_user, shared_dir, tmp_path):
    signature = ScaleSignature(32)
    own = _own_files(tmp_path / "project", (cache.META_FILE, cache.KERNEL_FILE, cache.MLIR_FILE))
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=shared_dir):
        entry = _entry_of(signature, shared_dir)
        as_user(co_user, lambda: os.symlink(tmp_path / "project", entry))
        clear_launchables()
        with warnings.catch_warnings():  # root may replace the link, another user builds in memory
            warnings.simplefilter("ignore", cache.BooCacheWarning)
            launchable = get_launchable(signature)
        x = torch.randn(32)
        assert torch.equal(launchable(x), x * 2)
    assert _unchanged(own)


@pytest.mark.parametrize("locks_owner", ["co-user", "this user, writable by all"])
def test_a_link_planted_at_a_lock_holders_name_is_never_written_through(co_user, shared_dir, tmp_path, locks_owner):
    signature = ScaleSignature(33)
    own = _own_files(tmp_path / "home", ("settings.conf",))
    locks = shared_dir / cache.LOCKS_DIR
    with isolated_registry({"scale": scale_op}), settings_override(cache_dir=shared_dir):
        holder = locks / f"{_entry_of(signature, shared_dir).name}.holder"
        if locks_owner != "co-user":
            locks.mkdir()
            locks.chmod(0o777)

        def plant() -> None:
            if locks_owner == "co-user":
                locks.mkdir()
                locks.chmod(0o777)
            os.symlink(tmp_path / "home" / "settings.conf", holder)

        as_user(co_user, plant)
        clear_launchables()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", cache.BooCacheWarning)
            launchable = get_launchable(signature)
        x = torch.randn(33)
        assert torch.equal(launchable(x), x * 2)
    assert _unchanged(own)
    built = [w for w in caught if issubclass(w.category, cache.BooCacheWarning)]
    if locks_owner == "co-user":  # its directory: no lock is taken there, the kernel is built in memory
        assert launchable.cache_directory is None and "belongs to uid" in str(built[0].message)
    else:  # this user's: made writable by this user alone, the planted link replaced, not followed
        assert built == [] and launchable.cache_directory is not None
        assert locks.stat().st_mode & 0o777 == 0o755 and not holder.is_symlink()


def test_a_tune_never_writes_through_links_planted_in_the_tuning_directory(co_user, shared_dir, tmp_path):
    from boo_core.tune import tuner as tuner_module

    own = _own_files(tmp_path / "home", ("notes.txt",))
    signature = BooOpRegistry.parse_command("gemm -m 4 -n 4 -k 4")
    with settings_override(cache_dir=shared_dir):
        progress = tuner_module._progress_path(signature, "cpu", device_identity(torch.device("cpu")))

    def plant() -> None:
        progress.parent.mkdir(parents=True)
        for directory in (progress.parent, progress.parent.parent):
            directory.chmod(0o777)
        os.symlink(tmp_path / "home" / "notes.txt", progress)

    as_user(co_user, plant)
    boo = Path(sys.executable).parent / "boo"
    result = subprocess.run([str(boo), "tune", "gemm", "-m", "4", "-n", "4", "-k", "4"],
                            env={**os.environ, "BOO_CACHE_DIR": str(shared_dir)}, capture_output=True, text=True,
                            timeout=600)
    assert _unchanged(own)
    assert "Traceback" not in result.stderr
    # The tuning directory is the co-user's: no record can be kept there, and the tune says so.
    assert result.returncode != 0 and f"{progress.parent.parent} belongs to uid {co_user[0]}" in result.stderr


def test_a_worker_process_imports_nothing_from_the_directory_it_starts_in(co_user, shared_dir):
    """``python -c`` puts its working directory first on ``sys.path``: a worker started in a
    directory a co-user can write would import their ``boo_core``, as this user."""
    marker = shared_dir / "planted-code-ran"

    def plant() -> None:
        package = shared_dir / "boo_core"
        package.mkdir()
        (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")

    as_user(co_user, plant)
    boo = Path(sys.executable).parent / "boo"
    result = subprocess.run([str(boo), "-v", "driver", "--backend", "boo", "gemm", "-m", "4", "-n", "4", "-k", "4"],
                            cwd=shared_dir, env={**os.environ, "BOO_CACHE_DIR": str(shared_dir / "cache"),
                                                 "BOO_VERIFY": "1", "BOO_WORKER": "1"},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not marker.exists()
    assert "worker process did not start" not in result.stdout + result.stderr


def test_a_cache_directory_others_can_write_is_written_only_if_sticky_or_made_this_users_alone(co_user, tmp_path):
    """In a directory others can write and that is not sticky, they can rename BOO's own
    entries away and put theirs in their place while a kernel compiles."""
    theirs, mine = tmp_path / "theirs", tmp_path / "mine"
    theirs.mkdir()
    os.chown(theirs, co_user[0], co_user[1])
    theirs.chmod(0o777)
    mine.mkdir()
    mine.chmod(0o777)
    x = torch.randn(34)
    with isolated_registry({"scale": scale_op}):
        with settings_override(cache_dir=theirs):
            clear_launchables()
            with pytest.warns(cache.BooCacheWarning, match=re.escape(f"not sticky: they could swap BOO's files in it "
                                                                     f"while a kernel compiles. Make it sticky "
                                                                     f"(chmod +t {theirs})")):
                launchable = get_launchable(ScaleSignature(34))
            assert torch.equal(launchable(x), x * 2) and launchable.cache_directory is None
            assert list(theirs.iterdir()) == []
            theirs.chmod(0o1777)
            clear_launchables()
            assert get_launchable(ScaleSignature(34)).cache_directory is not None
        with settings_override(cache_dir=mine):
            clear_launchables()
            assert get_launchable(ScaleSignature(34)).cache_directory is not None
    assert mine.stat().st_mode & 0o7777 == 0o755
