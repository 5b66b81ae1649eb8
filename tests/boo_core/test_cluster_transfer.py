"""boo_core.cluster without a cluster: cache files in transit, the worker-side wrapper, and
the error when Ray is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from boo_core import CachePopulator, get_launchable
from boo_core.cluster import CacheFiles, ClusterError, install, key_mismatch
from boo_core.cluster.tasks import TaskCall, execute
from boo_core.cluster.transfer import collect, pack, relocate_file, snapshot
from boo_core.kernels import cache
from boo_core.kernels.integrity import seal, unseal
from boo_core.kernels.request import KernelRequest
from boo_core.kernels.target import Target
from boo_core.settings import get_settings, settings_override
from boo_core.tools.cli import main
from boo_core.verify.verdicts import VERDICTS_FILE, seal_verdict

from ..conftest import REPO
from .fake_plugins.scale_op import ScaleSignature


@pytest.fixture
def compiled(scale_registry, private_cache):
    """A real cache entry (scale, size 9) in the test's cache: (its directory, its files)."""
    [outcome] = CachePopulator(commands=["scale -n 9"], jobs=1).run()
    directory = Path(outcome.directory)
    return directory, pack(private_cache, [directory.name])


def test_an_entry_is_installed_whole_then_kept_not_written_again(compiled, tmp_path):
    directory, files = compiled
    elsewhere = tmp_path / "caller"
    report = install(elsewhere, files)
    names = ["compile_command.txt", "kernel.vmfb", "meta.json", "source.mlir"]
    assert report.written == tuple(f"{directory.name}/{n}" for n in names[:2] + names[3:] + names[2:3])  # meta last
    assert all((elsewhere / directory.name / n).read_bytes() == (directory / n).read_bytes() for n in names
               if n != "meta.json")
    theirs, ours = (json.loads((d / "meta.json").read_text()) for d in (directory, elsewhere / directory.name))
    assert {**ours, "kernel_hmac": None} == {**theirs, "kernel_hmac": None}
    assert ours["kernel_hmac"] != theirs["kernel_hmac"]  # signed under the caller's own key
    assert not (elsewhere / cache.KEY_FILE).exists() or (elsewhere / cache.KEY_FILE).read_bytes() != \
        (directory.parent / cache.KEY_FILE).read_bytes()
    entry = cache.CacheEntry(elsewhere / directory.name, cache.CacheKey(ours["key_digest"], directory.name, {}))
    assert entry.read(cache.integrity_key(elsewhere)).proven
    inodes = {n: (elsewhere / directory.name / n).stat().st_ino for n in names}

    again = install(elsewhere, files)
    assert again.written == () and sorted(again.kept) == [f"{directory.name}/{n}" for n in names]
    assert {n: (elsewhere / directory.name / n).stat().st_ino for n in names} == inodes
    assert not list((elsewhere / directory.name).glob(".*.tmp"))
    with settings_override(cache_dir=elsewhere):
        assert get_launchable(ScaleSignature(9)).cache_hit


def test_a_kernel_replaces_a_recorded_failure_but_a_failure_never_replaces_a_kernel(compiled, tmp_path):
    directory, files = compiled
    meta = json.loads((directory / cache.META_FILE).read_text())
    failure = {"format": cache.CACHE_FORMAT, "key_digest": meta["key_digest"], "key": meta["key"],
               "error": "iree-compile failed", "log": "", "command": ""}
    failed = CacheFiles({f"{directory.name}/{cache.FAILED_FILE}": json.dumps(failure).encode(),
                         f"{directory.name}/{cache.LOG_FILE}": b"it failed\n"})
    elsewhere = tmp_path / "caller"
    install(elsewhere, failed)
    assert (elsewhere / directory.name / cache.FAILED_FILE).exists()
    install(elsewhere, files)
    assert not (elsewhere / directory.name / cache.FAILED_FILE).exists()
    assert (elsewhere / directory.name / cache.META_FILE).exists()

    report = install(elsewhere, failed)
    assert report.written == () and not (elsewhere / directory.name / cache.FAILED_FILE).exists()


def test_verdicts_are_merged_device_model_by_device_model_and_sealed_by_the_receiving_cache(compiled, private_cache):
    directory, _ = compiled
    ours = {"cpu aaa": seal_verdict(directory, "cpu aaa", "pass")}
    (directory / VERDICTS_FILE).write_text(json.dumps(ours))
    worker_key = b"w" * 32  # a task's scratch cache seals with a key of its own
    theirs = {"cuda H100 sm_90": seal(worker_key, f"verdict {directory.name} cuda H100 sm_90",
                                      {"verdict": "fail: wrong"})}
    incoming = CacheFiles({f"{directory.name}/{VERDICTS_FILE}": json.dumps(theirs).encode()})
    report = install(private_cache, incoming)
    assert report.written == (f"{directory.name}/{VERDICTS_FILE}",)
    merged = json.loads((directory / VERDICTS_FILE).read_text())
    assert sorted(merged) == ["cpu aaa", "cuda H100 sm_90"]
    assert unseal(cache.integrity_key(private_cache), f"verdict {directory.name} cuda H100 sm_90",
                  merged["cuda H100 sm_90"]) == {"verdict": "fail: wrong"}
    assert install(private_cache, incoming).written == ()


def test_files_outside_entries_are_sealed_for_the_receiving_cache_and_written_atomically_once(tmp_path):
    files = CacheFiles({"tuning/conv-0123.json": json.dumps(seal(b"w" * 32, "tuning record conv-0123.json",
                                                                 {"winner": 1})).encode()})
    assert install(tmp_path, files).written == ("tuning/conv-0123.json",)
    assert install(tmp_path, files).kept == ("tuning/conv-0123.json",)
    written = json.loads((tmp_path / "tuning/conv-0123.json").read_bytes())
    assert unseal(cache.integrity_key(tmp_path), "tuning record conv-0123.json", written) == {"winner": 1}


def test_paths_are_moved_to_the_caller_s_cache_in_text_files_only(tmp_path):
    scratch, caller = Path("/tmp/boo-task-x1"), Path("/home/a user/boo cache")
    line = f"/opt/iree-compile {scratch}/e-1/source.mlir --flag -o {scratch}/e-1/kernel.vmfb\n"
    moved = relocate_file(cache.COMMAND_FILE, line.encode(), scratch, caller).decode()
    assert moved == f"/opt/iree-compile '{caller}/e-1/source.mlir' --flag -o '{caller}/e-1/kernel.vmfb'\n"
    meta = json.dumps({"command": line.strip(), "log": f"{scratch}/e-1/compile_log.txt"}).encode()
    assert json.loads(relocate_file(cache.FAILED_FILE, meta, scratch, caller)) == {
        "command": moved.strip(), "log": f"{caller}/e-1/compile_log.txt"}
    kernel = b"\x00vmfb " + str(scratch).encode() + b"/e-1/source.mlir\x00"
    assert relocate_file(cache.KERNEL_FILE, kernel, scratch, caller) == kernel  # its checksum is in meta.json


def test_an_entry_under_an_unexpected_key_is_named_with_what_differs(scale_registry, private_cache):
    request = KernelRequest.create(ScaleSignature(9), Target.parse("cpu"))
    theirs = json.loads(json.dumps(request.key.material))
    theirs["compiler"] = "3.99.0"
    other = cache.CacheKey.create(request.key.prefix, theirs)
    meta = json.dumps({"key_digest": other.digest, "key": theirs}).encode()
    files = CacheFiles({f"{other.dirname}/{cache.META_FILE}": meta})
    assert key_mismatch(files, [request.key], "node 10.0.0.7") == (
        f"node 10.0.0.7 wrote cache entry {other.dirname}, which this process does not expect (compiler: here "
        f"'3.13.0', there '3.99.0')\nThe worker computed another cache key: it needs the same installation as this "
        "machine (op packages and their versions, the IREE compiler; for target cpu, the same CPU). Nothing of this "
        "kernel was written.")
    assert key_mismatch(CacheFiles({f"{request.key.dirname}/{cache.META_FILE}": meta}), [request.key], "x") == ""


def write_some(context, name):
    """A task: an entry file and a tuning record in its cache; where it wrote them."""
    (context.cache_dir / "some-entry-0123456789abcdef01234567").mkdir(parents=True)
    (context.cache_dir / "some-entry-0123456789abcdef01234567" / cache.LOG_FILE).write_text(
        f"{context.cache_dir}/{name}\n")
    (context.cache_dir / "tuning").mkdir()
    (context.cache_dir / "tuning" / f"{name}.json").write_text("{}\n")
    return context.caller_path(context.cache_dir / name)


def test_a_task_runs_in_a_scratch_cache_with_the_caller_s_settings(private_cache, tmp_path):
    seed = CacheFiles({"seeded-0123456789abcdef01234567/kernel.vmfb": b"k"})
    with settings_override(extra_compile_flags=["--x"]):
        call = TaskCall(write_some, ("r",), get_settings(), str(tmp_path / "caller"), seed=seed)
    output = execute(call)
    assert output.value == str(tmp_path / "caller" / "r")
    assert sorted(output.files.files) == ["some-entry-0123456789abcdef01234567/compile_log.txt", "tuning/r.json"]
    assert output.files.files["some-entry-0123456789abcdef01234567/compile_log.txt"] == \
        f"{tmp_path / 'caller'}/r\n".encode()
    assert not list(Path("/tmp").glob("boo-task-*/tuning/r.json"))  # the scratch cache is gone


def test_a_shared_cache_a_node_does_not_see_fails_its_tasks(tmp_path):
    call = TaskCall(write_some, ("r",), get_settings(), str(tmp_path / "not-mounted"), shared_marker=".boo-cluster-1")
    with pytest.raises(ClusterError, match=r"shared cache: node .* does not see the cache directory .*not-mounted "
                                           r"the caller writes \(mount it at the same path on every node"):
        execute(call)


def test_snapshot_and_collect_find_what_changed(tmp_path):
    (tmp_path / "a").write_text("1")
    before = snapshot(tmp_path)
    (tmp_path / "b").write_text("2")
    (tmp_path / ".locks").mkdir()
    (tmp_path / ".locks" / "x.lock").write_text("")
    assert collect(tmp_path, before, tmp_path).files == {"b": b"2"}


HIDDEN_RAY = """
import sys
sys.modules["ray"] = None  # as if it were not installed
from boo_core.tools.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("verb", ["preload", "tune"])
def test_without_ray_the_ray_flag_says_what_to_install(tmp_path, verb):
    env = {**os.environ, "BOO_CACHE_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", HIDDEN_RAY, verb, "--ray", "auto", "softmax", "-n", "2"],
                            capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 2
    assert result.stderr.startswith(f'boo {verb}: error: --ray: running on a Ray cluster needs Ray, an optional extra '
                                    'of boo-core: pip install "boo-core[ray]" (import ray failed: ')
    assert not list(tmp_path.iterdir())  # nothing compiled


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
@pytest.mark.parametrize("args, message", [
    (["--shared-cache", "scale", "-n", "2"], "--shared-cache applies to the workers of a Ray cluster: give --ray"),
    (["--ray", "127.0.0.1:1", "--device", "cuda:0", "scale"], "device 'cuda:0': this machine has no CUDA device to "
                                                              "take the kernels' target from; with --ray, name it"),
    (["--ray", "127.0.0.1:1", "scale", "-n", "2"], "error: --ray: cannot connect to the Ray cluster at "
                                                   "127.0.0.1:1: Connection refused (is its head node running?"),
])
@pytest.mark.parametrize("verb", ["preload", "tune"])
def test_ray_usage_errors_exit_2(capsys, scale_registry, private_cache, args, message, verb):
    assert main([verb, *args]) == 2
    assert message in capsys.readouterr().err
