"""``boo preload --ray`` and boo_core.cluster on a real Ray cluster.

One cluster serves the module: a head node and a worker node (the worker also announces
one GPU, a Ray resource label: nothing here uses a device), each a ``ray start`` process
group on 127.0.0.1, stopped by killing those groups. This process joins it once; its
workers see the test ops through a fake distribution on their PYTHONPATH, and die where
``fake_plugins/die_once.py`` says.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
import torch

from boo_core import BooOpRegistry, CachePopulator, clear_launchables, get_launchable
from boo_core.cluster import RayCluster, Task, TaskResult
from boo_core.kernels import cache
from boo_core.kernels.compiler import compiler_version
from boo_core.kernels.tuning_records import TuningRecord, read_record, write_record
from boo_core.settings import settings_override
from boo_core.testing import write_fake_distribution
from boo_core.tools.cli import main
from boo_core.tune.cluster import gpu_task_summary
from boo_core.tune.tuner import TuneOptions, Tuner
from boo_core.verify.numerics import check_launchable
from boo_core.verify.verdicts import VERDICTS_FILE, device_identity, read_verdict

from ..conftest import REPO
from ..local_ray import local_ray_cluster
from .fake_plugins.scale_op import ScaleSignature
from .substitutions import NUDGED, NUDGED_VALUE, scale_substitution

DYING = {"scale": "tests.boo_core.fake_plugins.die_once"}

MIXED = """\
# one command per op, small sizes
conv -n 1 -c 4 -H 8 -W 8 -k 8 -y 3 -x 3 -p 1 -q 1 -F 1
convfp16 -n 1 -c 8 -H 6 -W 6 -k 4 -y 1 -x 1 -F 2
gemm -m 16 -k 8 -n 24
gemmbfp16 -m 8 -k 16 -n 8 -b 2 -u 1
layernorm -X 16x32 -o 1 -m 1 -F 1
softmax -n 2 -c 8 -H 4 -W 4 -a 1 -m 1 -F 1
conv -n 1 --bogus 3
"""


@pytest.fixture(scope="module")
def ray_site(tmp_path_factory) -> Path:
    """A fake distribution, boo-test-ray 1.0, registering the dying scale op."""
    site = tmp_path_factory.mktemp("ray-site")
    write_fake_distribution(site, "boo-test-ray", "1.0", DYING)
    return site


@pytest.fixture(scope="module")
def marks(tmp_path_factory) -> Path:
    """Where the workers' dying kernels leave their marks."""
    return tmp_path_factory.mktemp("die-once")


@pytest.fixture(scope="module")
def ray_nodes(ray_site, marks):
    env = {"PYTHONPATH": os.pathsep.join([str(ray_site), str(REPO)]), "BOO_TEST_DIE_ONCE": str(marks)}
    with local_ray_cluster(nodes=2, gpus_on_last=1, env=env) as nodes, pytest.MonkeyPatch.context() as patch:
        for name, value in nodes.auth.items():
            patch.setenv(name, value)
        yield nodes


@pytest.fixture(scope="module")
def cluster(ray_nodes):
    """This process joined to the cluster (once: a process has one Ray connection)."""
    with RayCluster.connect(ray_nodes.address) as joined:
        yield joined


@pytest.fixture
def ray_registry(ray_site, monkeypatch, fresh_default_registry):
    """This process sees the installed ops and boo-test-ray 1.0, as the workers do."""
    monkeypatch.syspath_prepend(str(ray_site))


def entries(cache_dir: Path) -> dict[str, dict]:
    """Entry name -> its key material (from meta.json, or failed.json)."""
    found = {}
    for directory in cache.entry_directories(cache_dir):
        record = cache.read_json_object(directory / cache.META_FILE) or cache.read_json_object(
            directory / cache.FAILED_FILE)
        found[directory.name] = record["key"]
    return found


def test_a_cluster_preload_fills_the_cache_as_a_local_preload_does(ray_nodes, cluster, tmp_path):
    commands = tmp_path / "mixed.txt"
    commands.write_text(MIXED)
    local_cache, cluster_cache = tmp_path / "local", tmp_path / "cluster"
    with settings_override(cache_dir=local_cache):
        local = CachePopulator(commands_file=commands, jobs=2).run()
    progress = io.StringIO()
    with settings_override(cache_dir=cluster_cache):
        populator = CachePopulator(commands_file=commands, ray=cluster, progress=progress)
        remote = populator.run()

    def summary(outcomes):
        return sorted((o.func_name, o.target, o.status, o.formulation, o.error) for o in outcomes)

    assert summary(remote) == summary(local)
    assert [o.status for o in remote].count("compiled") == 6
    assert populator.get_failures()[0].error == "unknown flag --bogus"
    assert f"Ray: the Ray cluster at {ray_nodes.address}, 2 nodes, 2 CPUs, 1 GPU\n" in progress.getvalue()
    assert "6/6  compiled 6, cache hits 0, failed 0" in progress.getvalue()

    # The same entries under the same names (keys), each a complete one in this cache.
    assert entries(cluster_cache) == entries(local_cache) and len(entries(cluster_cache)) == 6
    for outcome in (o for o in remote if o.func_name):
        directory = Path(outcome.directory)
        assert directory.parent == cluster_cache
        assert sorted(p.name for p in directory.iterdir()) == sorted(
            p.name for p in (local_cache / directory.name).iterdir())
        reproducer = (directory / cache.COMMAND_FILE).read_text()
        assert f"{directory / cache.MLIR_FILE} " in reproducer and "boo-task-" not in reproducer
    assert not list(cluster_cache.glob("*/.*.tmp"))

    # Kernels that load from this cache (nothing compiles) and compute right.
    with settings_override(cache_dir=cluster_cache):
        clear_launchables()
        for line in MIXED.splitlines()[1:-1]:
            for signature in BooOpRegistry.default().parse(line).signatures:
                launchable = get_launchable(signature)
                assert launchable.cache_hit, signature.func_name
                assert all(c.passed for c in check_launchable(launchable, seed=3)), signature.func_name
        clear_launchables()
        again = CachePopulator(commands_file=commands, ray=cluster).run()
    assert sorted(o.status for o in again) == ["cache hit"] * 6 + ["failed"]


def test_a_worker_killed_mid_task_is_retried_and_every_kernel_arrives_once(cluster, ray_registry, private_cache,
                                                                            marks):
    commands = ["scale -n 3", "scale -n 4", "scale -n 5", "scale -n 6", "scale -n 7 -F 0"]
    outcomes = CachePopulator(commands=commands, ray=cluster).run()

    names = [o.func_name for o in outcomes]
    assert sorted(names) == ["scale_bwd_f32_n7_f2", "scale_fwd_f32_n3_f2", "scale_fwd_f32_n4_f2",
                             "scale_fwd_f32_n5_f2", "scale_fwd_f32_n6_f2", "scale_fwd_f32_n7_f2"]
    # The kernels of sizes 3 and 6 each killed the worker that first built them...
    killed = {p.name: int(p.read_text()) for p in marks.iterdir()}
    assert sorted(killed) == ["scale_fwd_f32_n3_f2", "scale_fwd_f32_n6_f2"]
    for pid in killed.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # ...and arrived all the same, once, like every other kernel; size 5 fails alone.
    status = {o.func_name: o.status for o in outcomes}
    assert status.pop("scale_fwd_f32_n5_f2") == "failed"
    assert set(status.values()) == {"compiled"}
    [failure] = [o for o in outcomes if o.status == "failed"]
    assert failure.error.startswith("broken: iree-compile failed (exit 1).") and str(private_cache) in failure.error
    mlir, command = map(Path, failure.reproducer)
    assert mlir.parent.parent == private_cache and mlir.read_text() == "func.func @nonsense( {"
    assert str(mlir) in command.read_text()
    found = cache.entry_directories(private_cache)
    assert sorted(d.name.rsplit("-", 1)[0] for d in found) == sorted(names)
    # Nothing to do a second time: every kernel is in the cache, the failure recorded.
    again = CachePopulator(commands=commands, ray=cluster).run()
    assert sorted(o.status for o in again) == ["cache hit"] * 5 + ["failed"]
    assert get_launchable(ScaleSignature(6)).cache_hit


def test_a_worker_that_computes_another_key_writes_nothing(cluster, tmp_path, monkeypatch, fresh_default_registry,
                                                          private_cache):
    newer = tmp_path / "newer-site"  # this process has boo-test-ray 2.0, the workers 1.0
    write_fake_distribution(newer, "boo-test-ray", "2.0", DYING)
    monkeypatch.syspath_prepend(str(newer))
    [outcome] = CachePopulator(commands=["scale -n 8"], ray=cluster).run()
    assert outcome.status == "failed"
    assert outcome.error.startswith("on the Ray cluster: node ")
    assert "wrote cache entry scale_fwd_f32_n8_f2-" in outcome.error
    assert "op: here 'boo-test-ray 2.0 " in outcome.error and ", there 'boo-test-ray 1.0 " in outcome.error
    assert outcome.error.endswith("Nothing of this kernel was written.")
    assert cache.entry_directories(private_cache) == []


def test_verification_runs_on_the_cluster_and_the_verdict_comes_back(cluster, ray_registry, private_cache):
    with settings_override(verify="all"):
        [outcome] = CachePopulator(commands=["scale -n 10"], device="cpu", ray=cluster).run()
        assert (outcome.status, outcome.formulation, outcome.verified) == ("compiled", "default", True)
        verdicts = json.loads((Path(outcome.directory) / VERDICTS_FILE).read_text())
        assert [v["verdict"] for v in verdicts.values()] == ["pass"] and list(verdicts)[0].startswith("cpu ")
        assert read_verdict(Path(outcome.directory), torch.device("cpu")) == "pass"  # sealed by this cache
        written = (Path(outcome.directory) / VERDICTS_FILE).stat().st_mtime_ns
        assert get_launchable(ScaleSignature(10)).verified  # the recorded verdict: not checked again
        assert (Path(outcome.directory) / VERDICTS_FILE).stat().st_mtime_ns == written


def test_workers_write_into_a_shared_cache_directly(cluster, ray_registry, private_cache):
    [outcome] = CachePopulator(commands=["scale -n 11"], ray=cluster, shared_cache=True).run()
    assert outcome.status == "compiled" and Path(outcome.directory).parent == private_cache
    assert get_launchable(ScaleSignature(11)).cache_hit
    assert not list(private_cache.glob(".boo-cluster-*"))  # the visibility check's marker is gone


def test_a_substituted_kernel_comes_back_with_its_substitution_files(cluster, ray_registry, private_cache, tmp_path):
    signature = ScaleSignature(13)
    root = tmp_path / "substitutions"
    scale_substitution(root / "cpu" / signature.func_name, signature, NUDGED)
    with settings_override(substitutions=root):
        [outcome] = CachePopulator(commands=["scale -n 13"], ray=cluster).run()
        assert outcome.status == "compiled" and outcome.formulation.startswith("default with substitution ")
        entry = Path(outcome.directory)
        assert [p.name for p in (entry / "substitution" / "sources").iterdir()] == [
            p.name for p in (root / "cpu" / signature.func_name / "sources").iterdir()]
        command = (entry / cache.COMMAND_FILE).read_text()
        assert f"={entry / 'substitution'}" in command and "boo-task-" not in command
        clear_launchables()
        launchable = get_launchable(signature)
        x = torch.randn(13)
        assert launchable.cache_hit and torch.equal(launchable(x), x * NUDGED_VALUE)


def test_a_tuned_winner_is_compiled_on_the_cluster_as_a_launch_will_load_it(cluster, ray_registry, private_cache):
    # The record is in this process's cache only: the job carries the winner to the worker.
    signature = ScaleSignature(1024)
    config = {"distribution": [64], "vector_common_parallel": [16]}
    write_record(TuningRecord(signature.func_name, signature.canonical(), "cpu", compiler_version(),
                              device_identity(torch.device("cpu")), "default", config, label="default/tiles"),
                 signature)
    progress = io.StringIO()
    [outcome] = CachePopulator(commands=[signature.to_command()], ray=cluster, progress=progress).run()
    assert (outcome.status, outcome.formulation) == ("compiled", "tuned default/tiles")
    assert "Ray: the Ray cluster at " in progress.getvalue()  # a task compiled it (the caller's keys: no mismatch)
    clear_launchables()
    launchable = get_launchable(signature)
    assert launchable.cache_hit and launchable.request.config == config
    assert launchable.cache_directory == Path(outcome.directory)


def where(context, seconds):
    """A task: the node it ran on and the GPUs Ray gave it."""
    time.sleep(seconds)
    return context.node, os.environ.get("CUDA_VISIBLE_DEVICES")


def refuse(context):
    raise ValueError("no thanks")


def test_tasks_spread_over_the_nodes_gpu_tasks_go_where_gpus_are(cluster, private_cache):
    nodes = {node["NodeID"]: node["Resources"] for node in cluster.nodes()}
    [gpu_node] = [node for node, resources in nodes.items() if resources.get("GPU")]
    tasks = [Task(i, where, (1.0,)) for i in range(4)]
    tasks += [Task("gpu", where, (0,), gpus=1), Task("refuses", refuse),
              Task("tpu", where, (0,), resources={"TPU": 1}, label="a TPU task")]
    results = {}
    for result in cluster.run(tasks):
        assert result.key not in results
        results[result.key] = result
    assert sorted(results, key=str) == [0, 1, 2, 3, "gpu", "refuses", "tpu"]
    assert {results[i].value[0] for i in range(4)} == set(nodes)  # both nodes ran tasks
    assert results["gpu"].value == (gpu_node, "0") and results["gpu"].node == gpu_node
    assert results["gpu"].gpus == "0"  # where it ran, as the result says (the tuner's summary reads it)
    for i in range(4):  # and when, by the worker's clock: around its one-second sleep
        assert results[i].finished - results[i].started >= 1.0 and results[i].started > time.time() - 600
    assert results["refuses"].error == "ValueError: no thanks"
    assert results["tpu"].error == "no node of the cluster (2 nodes, 2 CPUs, 1 GPU) has 1 CPU, 1 TPU for a TPU task"


def test_the_command_line_joins_the_cluster_at_an_address(ray_nodes, cluster, tmp_path, capsys):
    status = main(["preload", "--ray", ray_nodes.address, "--cache-dir", str(tmp_path / "elsewhere"),
                   "softmax", "-n", "2", "-c", "4", "-F", "1"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert out.startswith(f"boo preload: 1 command for cpu, on the Ray cluster at {ray_nodes.address}, "
                          f"into {tmp_path / 'elsewhere'}\n")
    assert "compiled 1, cache hits 0, failed 0" in out
    assert "Ray: this process's Ray connection, 2 nodes, 2 CPUs, 1 GPU" in err
    assert len(cache.entry_directories(tmp_path / "elsewhere")) == 1


def test_without_an_address_the_command_line_starts_a_local_ray_instance(tmp_path):
    # A process of its own (this one may be connected already). Ray's token and temporary
    # directory in the environment, so that it leaves no ~/.ray/auth_token and no /tmp/ray.
    ray_tmp = tempfile.mkdtemp(prefix="boo-ray-", dir="/tmp")  # Ray's socket paths must stay short
    env = {**os.environ, "BOO_CACHE_DIR": str(tmp_path / "cache"), "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": uuid.uuid4().hex, "RAY_TMPDIR": ray_tmp}
    env.pop("RAY_ADDRESS", None)
    try:
        result = subprocess.run([sys.executable, "-m", "boo_core.tools.cli", "preload", "-j", "1", "--ray",
                                 "softmax", "-n", "2", "-c", "4", "-F", "1"], capture_output=True, text=True,
                                env=env, cwd=tmp_path, timeout=300)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"boo preload: 1 command for cpu, on a local Ray instance (at most 1 task at "
                                    f"once), into {tmp_path / 'cache'}\n")
    assert "compiled 1, cache hits 0, failed 0" in result.stdout
    assert "Ray: a local Ray instance, 1 node, 1 CPU\n" in result.stderr


def test_the_command_line_reports_failures_and_exits_1(cluster, ray_registry, private_cache, capsys):
    status = main(["preload", "--ray", "scale", "-n", "5"])
    # '--ray scale' would be an address: the word goes back to the command
    assert status == 1
    out = capsys.readouterr().out
    assert "compiled 0, cache hits 0, failed 1" in out
    assert "FAILED scale_fwd_f32_n5_f2 for cpu" in out and f"reproducer: {private_cache}/scale_fwd_f32_n5_f2-" in out


def tune_into(cache_dir: Path, sizes, **options):
    """Tune scale kernels of ``sizes`` into the cache at ``cache_dir`` (die_once's tuning space)."""
    signatures = [ScaleSignature(n) for n in sizes]
    with settings_override(cache_dir=cache_dir):
        return Tuner(TuneOptions(iterations=3, warmup=1, **options)).tune([(s.to_command(), s) for s in signatures])


def considered(tunes, cache_dir: Path):
    """What each tune tried and what became of each candidate (times left out)."""
    return [(t.signature.func_name, sorted((r.label, r.formulation, json.dumps(r.config), r.flags,
                                            r.verdict.split(":")[0], r.error.replace(str(cache_dir), "CACHE"))
                                           for r in t.results)) for t in tunes]


def test_a_cluster_tune_records_what_a_local_tune_records(cluster, ray_registry, tmp_path):
    local_cache, cluster_cache = tmp_path / "local", tmp_path / "cluster"
    local = tune_into(local_cache, (101, 104))
    remote = tune_into(cluster_cache, (101, 104), ray=cluster)
    assert considered(remote, cluster_cache) == considered(local, local_cache)
    labels = {t.signature.size: {r.label: r.verdict for r in t.results} for t in remote}
    assert set(labels[101]) == {"default", "triple", "default/dist64_vec16"}
    assert labels[101]["default/dist64_vec16"] == labels[101]["default"] == "pass"
    assert labels[101]["triple"].startswith("fail: y: max abs error")
    [bad] = [label for label in labels[104] if label not in ("default", "triple")]
    assert labels[104][bad] == "compile error"  # fails alone: the kernel's other candidates were measured
    assert labels[104]["default"] == "pass" and labels[104]["triple"].startswith("fail: ")
    # Winners: the only verified candidate for 104; for 101 the faster of two in each run.
    assert remote[1].winner == local[1].winner == "default"
    assert remote[0].winner in ("default", "default/dist64_vec16")
    for tune in remote:
        record = read_record(tune.signature, "cpu", tune.device, cache_dir=cluster_cache)
        winner = tune.result(tune.winner)
        assert (record.label, record.formulation, record.config, tuple(record.flags)) == (
            winner.label, winner.formulation, winner.config, winner.flags)
        assert record.time_us == winner.time_us
    # The same cache entries (keys), complete, verdicts included; the checkpoints are the caller's.
    assert entries(cluster_cache) == entries(local_cache) and len(entries(cluster_cache)) == 6
    for directory in cache.entry_directories(cluster_cache):
        assert sorted(p.name for p in directory.iterdir()) == sorted(
            p.name for p in (local_cache / directory.name).iterdir())
    assert sorted(p.name for p in (cluster_cache / "tuning" / "progress").iterdir()) == sorted(
        p.name for p in (local_cache / "tuning" / "progress").iterdir())
    assert not list(cluster_cache.rglob("*.tmp"))
    # Done: a second tune keeps the records and starts nothing on the cluster.
    assert all(t.reused for t in tune_into(cluster_cache, (101, 104), ray=cluster))


def test_a_cluster_tune_that_loses_its_compiles_checkpoints_nothing_and_exits_1(ray_nodes, cluster, tmp_path,
                                                                                 monkeypatch, fresh_default_registry,
                                                                                 capsys):
    newer = tmp_path / "newer-site"  # this process has boo-test-ray 2.0, the workers 1.0: every key differs
    write_fake_distribution(newer, "boo-test-ray", "2.0", DYING)
    monkeypatch.syspath_prepend(str(newer))
    cache_dir = tmp_path / "cache"
    status = main(["tune", "--ray", ray_nodes.address, "--cache-dir", str(cache_dir), "--iter", "2",
                   "scale", "-n", "103"])
    out, err = capsys.readouterr()
    assert status == 1, out + err
    assert out.startswith(f"boo tune: 1 command on cpu, compiled on the Ray cluster at {ray_nodes.address}, "
                          f"into {cache_dir}\n")
    assert "no candidate compiled and verified" in out
    assert "FAILED scale_fwd_f32_n103_f2 default: on the Ray cluster: node " in out
    assert "wrote cache entry scale_fwd_f32_n103_f2-" in out and "op: here 'boo-test-ray 2.0 " in out
    assert cache.entry_directories(cache_dir) == []
    assert not list((cache_dir / "tuning").rglob("*.json*"))  # no record, no checkpoint: a rerun tries again


def test_the_command_line_tunes_on_the_cluster(ray_nodes, cluster, ray_registry, private_cache, capsys):
    status = main(["tune", "--ray", "--iter", "2", "scale", "-n", "106"])  # '--ray scale': the word is the command's
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert "compiled on a local Ray instance" in out  # this process's connection: the cluster's
    assert "Ray: this process's Ray connection, 2 nodes, 2 CPUs, 1 GPU" in err
    [row] = [line for line in out.splitlines() if line.startswith("scale_fwd_f32_n106_f2")]
    assert row.endswith("  default")
    assert read_record(ScaleSignature(106), "cpu", device_identity(torch.device("cpu"))).label == "default"


def always_dies(context):
    os._exit(9)


def test_a_task_whose_worker_always_dies_fails_alone_once_its_retries_are_spent(cluster):
    results = {r.key: r for r in cluster.run([Task("dies", always_dies), Task("fine", where, (0,))], retries=1)}
    assert results["fine"].ok
    assert results["dies"].error.startswith("the worker running it died, 2 times (WorkerCrashedError: ")


def start_then_wait(context, started, seconds):
    """A task: leaves a file naming its node as it starts, then takes ``seconds``."""
    Path(started, f"{context.node}-{os.getpid()}-{time.monotonic_ns()}").touch()
    time.sleep(seconds)
    return context.node


def test_a_node_that_leaves_mid_batch_loses_nothing(ray_nodes, cluster, tmp_path):
    # Last in the module: the cluster has a dead node for a while after this.
    before = {node["NodeID"] for node in cluster.nodes()}
    group = ray_nodes.add_node()
    [leaving] = {node["NodeID"] for node in cluster.nodes()} - before
    started = tmp_path / "started"
    started.mkdir()

    def kill_when_busy():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(p.name.startswith(leaving) for p in started.iterdir()):
            time.sleep(0.05)
        ray_nodes.kill_node(group)

    killer = threading.Thread(target=kill_when_busy)
    killer.start()
    try:
        results = [(r.key, r.ok, r.value, r.error) for r in cluster.run([Task(i, start_then_wait, (str(started), 2.0))
                                                                           for i in range(6)])]
    finally:
        killer.join()
    assert sorted(key for key, *_ in results) == list(range(6))
    assert all(ok for _, ok, _, _ in results), results
    assert any(p.name.startswith(leaving) for p in started.iterdir())  # a task was running there
    assert leaving not in {value for _, _, value, _ in results}  # and finished elsewhere


def test_the_gpu_task_summary_counts_tasks_per_gpu_and_the_most_at_once():
    def ran(gpu: str, started: float, finished: float) -> TaskResult:
        return TaskResult("k", node="a" * 20, gpus=gpu, started=started, finished=finished)

    one_at_a_time = [ran("0", 0, 2), ran("1", 0, 3), ran("0", 2, 4), ran("1", 3, 5), ran("0", 4, 5)]
    assert gpu_task_summary(one_at_a_time) == (
        "5 GPU tasks on 2 GPUs (node aaaaaaaa GPU 0: 3, node aaaaaaaa GPU 1: 2); at most 1 at a time on a GPU")
    assert gpu_task_summary([ran("0", 0, 2), ran("0", 1, 3), TaskResult("failed", error="x")]).endswith(
        "on 1 GPU (node aaaaaaaa GPU 0: 2); at most 2 at a time on a GPU")
