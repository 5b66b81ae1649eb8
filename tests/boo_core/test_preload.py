"""CachePopulator: parallel compiles into the cache, statuses, failures with reproducers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from boo_core import BooError, CachePopulator, DeviceError, Formulation, clear_launchables, get_launchable
from boo_core.kernels import activity
from boo_core.kernels.cache import entry_directories
from boo_core.kernels.compiler import compiler_version
from boo_core.kernels.tuning_records import TuningRecord, write_record
from boo_core.settings import settings_override
from boo_core.testing import isolated_registry, write_fake_distribution
from boo_core.tools.cli import main
from boo_core.verify.verdicts import device_identity

from .fake_plugins.broken_mlir import NONSENSE
from .fake_plugins.scale_op import ScalePlugin, ScaleSignature


def broken_for_size_5(signature, target):
    """The scale op's formulations: MLIR that does not compile for size 5, the export otherwise."""
    if signature.size == 5:
        return (Formulation("broken", mlir=lambda: NONSENSE),)
    return (Formulation("default"),)


BROKEN_FOR_SIZE_5 = ScalePlugin(formulations=broken_for_size_5)


def test_compiles_in_parallel_then_finds_everything_in_the_cache(scale_registry, private_cache, tmp_path):
    commands = tmp_path / "cmds.txt"
    commands.write_text("scale -n 3\nscale -n 4 -F 0\nscale -n 3\n")
    populator = CachePopulator(commands_file=commands, commands=["scale -n 6"], jobs=2)
    outcomes = populator.run()
    assert sorted((o.func_name, o.status) for o in outcomes) == [
        ("scale_bwd_f32_n4_f2", "compiled"), ("scale_fwd_f32_n3_f2", "compiled"),
        ("scale_fwd_f32_n4_f2", "compiled"), ("scale_fwd_f32_n6_f2", "compiled")]
    assert all(Path(o.directory).parent == private_cache and o.seconds > 0 for o in outcomes)
    assert populator.get_cache_status("scale_fwd_f32_n3_f2") == {"cpu": "compiled"}
    assert populator.get_failures() == []

    again = CachePopulator(commands=["scale -n 3", "scale -n 6"], jobs=2)
    assert [o.status for o in again.run()] == ["cache hit", "cache hit"]
    assert get_launchable(ScaleSignature(6)).cache_hit  # what the driver will find


def test_preload_builds_exactly_the_kernel_the_driver_then_loads_tuned_winner_included(scale_registry, private_cache,
                                                                                      capsys):
    signature = ScaleSignature(1024)
    command = signature.to_command().split()
    config = {"distribution": [64], "vector_common_parallel": [16]}  # what a tune of this CPU found fastest
    write_record(TuningRecord(signature.func_name, signature.canonical(), "cpu", compiler_version(),
                              device_identity(torch.device("cpu")), "default", config, label="default/tiles"),
                 signature)
    assert main(["preload", "-j", "1", *command]) == 0
    assert "compiled 1, cache hits 0, failed 0" in capsys.readouterr().out
    [built] = entry_directories(private_cache)  # the tuned winner alone (the CPU verifies no untuned kernel)

    clear_launchables()
    activity.reset()
    assert main(["driver", "--iter", "1", *command]) == 0
    assert "formulation default: kernel from the cache (no compile)" in capsys.readouterr().out
    assert activity.counts()["kernel compiled"] == 0 and activity.counts()["kernel hit"] == 1
    served = get_launchable(signature)  # what the driver loaded, kept in memory
    assert served.cache_directory == built and served.request.config == config and served.verified
    assert entry_directories(private_cache) == [built]


@pytest.mark.parametrize("jobs", [1, 4])
def test_an_empty_batch_compiles_nothing_and_is_no_error(jobs, private_cache):
    assert CachePopulator(commands=[], jobs=jobs).run() == []  # -j 4 started a pool of 0 workers: ValueError


def test_failures_carry_the_error_and_the_reproducer(private_cache):
    with isolated_registry({"scale": BROKEN_FOR_SIZE_5}):
        populator = CachePopulator(commands=["scale -n 5", "scale -n 2 --bogus 1", "scale -n 7"], jobs=1)
        populator.run()
    parse_failure, compile_failure = sorted(populator.get_failures(), key=lambda o: o.func_name)
    assert (parse_failure.source, parse_failure.error, parse_failure.func_name) == (
        "commands[1]", "unknown flag --bogus", "")
    assert compile_failure.func_name == "scale_fwd_f32_n5_f2" and compile_failure.target == "cpu"
    assert compile_failure.error.startswith("broken: iree-compile failed (exit 1).")
    mlir, command = map(Path, compile_failure.reproducer)
    assert (mlir.name, command.name) == ("source.mlir", "compile_command.txt")
    assert mlir.read_text() == "func.func @nonsense( {" and "iree-compile" in command.read_text()
    assert populator.get_cache_status("scale_fwd_f32_n7_f2") == {"cpu": "compiled"}


def dying_worker(signature, target):
    os._exit(3)  # only ever called in a worker here: two jobs, two processes


def test_a_worker_that_dies_is_a_failure_not_a_crash(private_cache):
    with isolated_registry({"scale": ScalePlugin(formulations=dying_worker)}):
        populator = CachePopulator(commands=["scale -n 13", "scale -n 14"], jobs=2)
        outcomes = populator.run()
    assert [o.status for o in outcomes] == ["failed", "failed"]
    assert outcomes[0].error.startswith("BrokenProcessPool: A process in the process pool was terminated abruptly")


def test_cross_compiles_for_gpu_targets_without_a_gpu(scale_registry, private_cache):
    populator = CachePopulator(commands=["scale -n 16"], targets=["cuda:sm_80", "rocm:gfx942"], jobs=2)
    populator.run()
    assert populator.get_cache_status("scale_fwd_f32_n16_f2") == {"cuda:sm_80": "compiled",
                                                                 "rocm:gfx942": "compiled"}


def test_usage_errors(scale_registry, private_cache):
    with pytest.raises(DeviceError, match=r"unknown target 'tpu': expected cpu, cuda:<sm_NN> or rocm:<gfxNNN>"):
        CachePopulator(commands=["scale"], targets=["tpu"])
    with pytest.raises(ValueError, match="give at least one target"):
        CachePopulator(commands=["scale"], targets=[])
    with pytest.raises(ValueError, match="jobs must be at least 1, got 0"):
        CachePopulator(commands=["scale"], jobs=0)
    populator = CachePopulator(commands=["scale -n 2"])
    with pytest.raises(LookupError, match=r"no kernel named 'scale_fwd_f32_n2_f2' was preloaded; call run\(\) first"):
        populator.get_cache_status("scale_fwd_f32_n2_f2")
    with settings_override(cache_enabled=False):
        with pytest.raises(BooError, match=r"the kernel cache is disabled \(BOO_CACHE_ON=0\)"):
            populator.run()
    populator.run()
    with pytest.raises(LookupError, match="no kernel named 'nope' was preloaded; preloaded kernels: scale_fwd_f32_n2"):
        populator.get_cache_status("nope")


def test_spawned_workers_load_the_installed_plugins_and_get_this_process_settings(
        tmp_path, monkeypatch, fresh_default_registry, private_cache):
    # Workers are spawned when CUDA is initialized here (a forked child could not use it).
    site = tmp_path / "site"
    write_fake_distribution(site, "boo-test-scale", "1.0", {"scale": "tests.boo_core.fake_plugins.scale_op"})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    elsewhere = tmp_path / "configured-cache"
    with settings_override(cache_dir=elsewhere):  # set from Python only: not in the environment
        outcomes = CachePopulator(commands=["scale -n 11", "scale -n 12"], jobs=2).run()
        assert [o.status for o in outcomes] == ["compiled", "compiled"]
        assert all(Path(o.directory).parent == elsewhere for o in outcomes)
        assert get_launchable(ScaleSignature(11)).cache_hit  # same key as this process computes


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_kernel_compiled_but_not_stored_is_a_failure_saying_why(scale_registry, tmp_path, boo_env, capsys, jobs):
    # A cache that cannot be written, even by root: its directory would be under a regular file.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    boo_env(BOO_CACHE_DIR=str(blocker / "cache"))
    populator = CachePopulator(commands=["scale -n 13", "scale -n 14"], jobs=jobs)
    outcomes = populator.run()
    assert [o.status for o in outcomes] == ["failed", "failed"] and populator.get_failures() == outcomes
    for outcome in outcomes:
        assert outcome.directory == "" and outcome.formulation == "default"
        assert outcome.error.startswith("formulation default compiled, but was not stored in the cache: BOO's kernel "
                                        f"cache cannot be written (cannot create {blocker}/cache")
        assert "Not a directory" in outcome.error
    assert not (blocker / "cache").exists()
    # boo preload: says nothing was stored, and why, and exits non-zero.
    assert main(["preload", "-j", str(jobs), "scale", "-n", "15"]) == 1
    out = capsys.readouterr().out
    assert "compiled 0, cache hits 0, failed 1 in " in out
    assert "\nFAILED scale_fwd_f32_n15_f2 for cpu (command line)\n  formulation default compiled, but was not stored " \
           "in the cache: BOO's kernel cache cannot be written" in out
