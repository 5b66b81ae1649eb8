"""The tuner: candidates verified and timed, the fastest verified one recorded and used by
launches; resumable; records per compiler version; tuning specs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from boo_core import Formulation, clear_launchables, get_launchable
from boo_core.kernels.request import KernelRequest
from boo_core.kernels.target import Target
from boo_core.kernels.tuning_records import read_record, record_path, write_record
from boo_core.settings import settings_override
from boo_core.testing import isolated_registry
from boo_core.tune import tuner as tuner_module
from boo_core.tune.space import TuningCandidate
from boo_core.tune.spec import export_spec
from boo_core.tune.tuner import TuneOptions, Tuner
from boo_core.verify.verdicts import device_identity

from ..conftest import REPO
from .fake_plugins.scale_op import ScalePlugin, ScaleSignature
from .fake_plugins.wrong_kernel import TRIPLE
from .substitutions import NUDGED, ScaleLibrary

CPU = Target.parse("cpu")
DEVICE = device_identity(torch.device("cpu"))


def wrong_but_fast(signature):
    """x * 3 for a signature of factor 2: wrong (and no slower than the right kernel)."""
    return Formulation("wrong_fast", mlir=lambda: TRIPLE.format(name=signature.func_name, n=signature.size))


def tiles(signature, target):
    return [TuningCandidate(config={"distribution": [64], "vector_common_parallel": [16]}),
            TuningCandidate(config={"distribution": [256], "vector_common_parallel": [8]})]


PLUGIN = ScalePlugin(formulations=lambda s, t: (Formulation("default"), wrong_but_fast(s),
                                               Formulation("halved", computation=lambda x: (x * 0.5) * 4.0)),
                     tuning_space=tiles)


def tune(*signatures, **options):
    tuner = Tuner(TuneOptions(iterations=5, warmup=1, **options))
    return tuner.tune([(s.to_command(), s) for s in signatures])


def test_the_fastest_verified_candidate_wins_and_a_wrong_one_never_does(private_cache):
    signature = ScaleSignature(4096)
    with isolated_registry({"scale": PLUGIN}):
        [result] = tune(signature)
        labels = {r.label: r for r in result.results}
        assert set(labels) == {"default", "wrong_fast", "halved", "default/dist64_vec16", "default/dist256_vec8"}
        assert labels["wrong_fast"].verdict.startswith("fail: y: max abs error")
        assert labels["wrong_fast"].time_us is None
        passing = {k: r.time_us for k, r in labels.items() if r.verdict == "pass"}
        ties = [r.label for r in result.results if r.label in passing
                and passing[r.label] <= min(passing.values()) * (1 + tuner_module.TIE_FRACTION)]
        assert len(passing) == 4 and result.winner == ties[0]  # the fastest, or the first of its ties
        assert result.baseline == "default" and result.torch_us > 0
        record = read_record(signature, "cpu", DEVICE)
        assert record.label == result.winner and record.time_us == passing[result.winner]
        # Launches use the winner from now on (verified: the tuner's verdict is reused).
        clear_launchables()
        launchable = get_launchable(signature)
        assert launchable.formulation == record.formulation and launchable.verified
        x = torch.randn(4096)
        torch.testing.assert_close(launchable(x), x * 2)
        with settings_override(use_tuned=False):
            assert get_launchable(signature).formulation == "default"


@pytest.mark.parametrize(("times", "winner"), [
    ({"default": 100.0, "halved": 99.5, "default/dist64_vec16": 99.2, "default/dist256_vec8": 120.0}, "default"),
    ({"default": 100.0, "halved": 97.0, "default/dist64_vec16": 96.5, "default/dist256_vec8": 96.2}, "halved"),
])
def test_candidates_within_timing_noise_of_the_fastest_tie_and_the_first_in_order_wins(times, winner, private_cache,
                                                                                       monkeypatch):
    original = tuner_module.Tuner._verify_and_time

    def fixed_times(self, signature, candidate, result, timer):
        original(self, signature, candidate, result, timer)
        if result.time_us is not None:
            result.time_us = times[candidate.label]

    monkeypatch.setattr(tuner_module.Tuner, "_verify_and_time", fixed_times)
    with isolated_registry({"scale": PLUGIN}):
        [result] = tune(ScaleSignature(1024))
    assert result.winner == winner
    assert read_record(ScaleSignature(1024), "cpu", DEVICE).label == winner


def test_a_kernel_librarys_kernel_is_a_candidate_and_a_wrong_one_never_wins(private_cache):
    signature = ScaleSignature(4096)
    library = ScaleLibrary("3.000000e+00")  # a library kernel computing x * 3: wrong
    with isolated_registry({"scale": PLUGIN, "library": library}):
        [result] = tune(signature)
        wrong = result.result("default with times3.000000e+00")
        assert wrong.verdict.startswith("fail:") and wrong.substitution and result.winner != wrong.label
        assert result.baseline == "default"  # what an untuned launch ends up with: the library's kernel fails
        record = read_record(signature, "cpu", DEVICE)
        assert record.library == (wrong.substitution,) and record.substitution == ""
        # The record was timed against this library: it goes first, and the wrong kernel is not even tried.
        clear_launchables()
        launchable = get_launchable(signature)
        assert launchable.substitution is None and launchable.passed_over == ()
        x = torch.randn(4096)
        torch.testing.assert_close(launchable(x), x * 2)


def test_a_right_library_kernel_is_timed_and_the_faster_serves(private_cache):
    signature = ScaleSignature(4096)
    with isolated_registry({"scale": PLUGIN, "library": ScaleLibrary(NUDGED)}):
        [result] = tune(signature)
        mine = result.result(f"default with times{NUDGED}")
        assert mine.verdict == "pass" and mine.time_us > 0
        assert result.baseline == mine.label  # an untuned launch uses the library's kernel
        record = read_record(signature, "cpu", DEVICE)
        assert record.library == (mine.substitution,)
        assert record.substitution == (mine.substitution if result.winner == mine.label else "")
        clear_launchables()
        launchable = get_launchable(signature)
        assert (launchable.substitution is not None) == (result.winner == mine.label)
        assert launchable.verified and launchable.passed_over == ()


def test_a_record_made_without_a_library_does_not_displace_it(private_cache):
    # Tuned before the library was installed: the record never timed the library's kernel,
    # so the library's kernel keeps its place first.
    signature = ScaleSignature(512)
    with isolated_registry({"scale": PLUGIN}):
        tune(signature)
    with isolated_registry({"scale": PLUGIN, "library": ScaleLibrary(NUDGED)}):
        clear_launchables()
        launchable = get_launchable(signature)
        assert launchable.substitution is not None and launchable.verified


def test_a_tuned_record_never_runs_a_wrong_kernel(private_cache):
    # A record naming the wrong formulation (a stale or tampered database): its kernel is
    # verified on first use even with verification off, and the op's chain serves instead.
    signature = ScaleSignature(64)
    with isolated_registry({"scale": PLUGIN}), settings_override(verify=False):
        write_record(tuner_module.TuningRecord(signature.func_name, signature.canonical(), "cpu",
                                               tuner_module._compiler(), DEVICE, "wrong_fast", label="wrong_fast",
                                               time_us=1.0), signature)
        launchable = get_launchable(signature)
        assert launchable.formulation == "default"
        [attempt] = launchable.passed_over
        assert attempt.formulation == "tuned wrong_fast" and attempt.stage == "verification"
        x = torch.randn(64)
        torch.testing.assert_close(launchable(x), x * 2)


def test_a_record_whose_flags_run_a_program_is_refused_and_the_program_never_runs(private_cache, tmp_path, caplog):
    signature = ScaleSignature(66)
    marker = tmp_path / "ran"
    script = tmp_path / "linker.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    script.chmod(0o755)
    with isolated_registry({"scale": PLUGIN}):
        write_record(tuner_module.TuningRecord(signature.func_name, signature.canonical(), "cpu",
                                               tuner_module._compiler(), DEVICE, "default",
                                               flags=(f"--iree-llvmcpu-embedded-linker-path={script}",),
                                               label="default/evil"), signature)  # sealed: this user's own file
        assert read_record(signature, "cpu", DEVICE) is None
        assert "flag '--iree-llvmcpu-embedded-linker-path=" in caplog.text and "is not one BOO's tuning" in caplog.text
        launchable = get_launchable(signature)
        assert launchable.formulation == "default" and launchable.passed_over == ()
    assert not marker.exists()


def test_a_record_not_sealed_by_this_cache_is_ignored(private_cache, caplog):
    signature = ScaleSignature(67)
    with isolated_registry({"scale": PLUGIN}):
        record = tuner_module.TuningRecord(signature.func_name, signature.canonical(), "cpu",
                                           tuner_module._compiler(), DEVICE, "halved", label="halved")
        path = write_record(record, signature)
        assert read_record(signature, "cpu", DEVICE) == record
        path.write_text(json.dumps(record.to_json()))  # the same record, written by hand: no seal
        assert read_record(signature, "cpu", DEVICE) is None
        assert "is not sealed by this cache's key" in caplog.text
        [result] = tune(signature)  # and it is tuned again, not kept
        assert not result.reused and result.results


def test_a_record_whose_winner_is_no_longer_offered_is_tuned_again_not_kept(private_cache):
    signature = ScaleSignature(68)
    with isolated_registry({"scale": PLUGIN}):
        write_record(tuner_module.TuningRecord(signature.func_name, signature.canonical(), "cpu",
                                               tuner_module._compiler(), DEVICE, "retired", label="retired"),
                     signature)
        [result] = tune(signature)
        assert not result.reused and result.winner and result.winner != "retired"


@pytest.mark.parametrize("flags, config, problem", [
    (("--iree-opt-data-tiling",), None, None),
    (("--iree-llvmcpu-enable-ukernels=all",), {"distribution": [32, 32], "vector_reduction": [4]}, None),
    (("--iree-llvmcpu-enable-ukernels=$(touch x)",), None, "not a plain word"),
    (("--iree-hal-executable-object-search-path=/tmp",), None, "is not one BOO's tuning spaces generate"),
    (("--load-pass-plugin=/tmp/evil.so",), None, "is not one BOO's tuning spaces generate"),
    ((), {"mma_kind": "X> hal.executable.objects"}, "not an MMA layout name"),
    ((), {"workgroup": ["1; evil"]}, "not a list of tile sizes"),
    ((), {"objects": "/tmp/evil.o"}, "'objects' is not one"),
    ((), {"workgroup_size": [64, 1]}, "not three thread counts"),
    ((), {"thread": [1, 8], "reductions": {"workgroup": [8, 2, 32], "workgroup_size": [128, 1, 1]}}, None),
    ((), {"reductions": {"workgroup": ["8 evil"]}}, "'reductions' configuration: configuration field 'workgroup'"),
    ((), {"reductions": {"reductions": {"workgroup": [1]}}}, "'reductions' is not one"),
    ((), {"reductions": [8, 2, 32]}, "'reductions' configuration: configuration is not an object"),
])
def test_a_records_flags_and_configuration_must_be_ones_the_tuning_spaces_generate(flags, config, problem):
    from boo_core.kernels.allowed_tunings import config_problem, flags_problem

    found = flags_problem(flags) or config_problem(config)
    assert (found is None) if problem is None else (problem in found)


def test_a_record_from_another_compiler_version_is_not_used(private_cache):
    signature = ScaleSignature(32)
    with isolated_registry({"scale": PLUGIN}):
        record = tuner_module.TuningRecord(signature.func_name, signature.canonical(), "cpu", "0.0.1", DEVICE,
                                           "halved", label="halved")
        path = record_path(signature, "cpu", DEVICE)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record.to_json()))  # where this compiler's record would be
        assert read_record(signature, "cpu", DEVICE) is None
        assert get_launchable(signature).formulation == "default"


KILLED = """
import sys, time
from boo_core.testing import isolated_registry
from boo_core.tune import tuner as tuner_module
from tests.boo_core.test_tune import PLUGIN, tune
from tests.boo_core.fake_plugins.scale_op import ScaleSignature

checkpoint = tuner_module._checkpoint
def stop_after_the_first(*args):
    checkpoint(*args)
    print("measured", flush=True)
    time.sleep(60)  # killed here, once the first candidate was measured and checkpointed
tuner_module._checkpoint = stop_after_the_first
with isolated_registry({"scale": PLUGIN}):
    tune(ScaleSignature(2048))
"""


def test_a_killed_tune_resumes_without_redoing_finished_candidates(private_cache, monkeypatch):
    env = {**os.environ, "BOO_CACHE_DIR": str(private_cache), "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", KILLED], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "measured"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    measured, compiled = [], []
    original_measure, original_compile = tuner_module.Tuner._verify_and_time, tuner_module.compile_candidate

    def counting_measure(self, signature, candidate, result, timer):
        measured.append(candidate.label)
        return original_measure(self, signature, candidate, result, timer)

    def counting_compile(*args):
        seconds, error = original_compile(*args)
        compiled.append((args[2], seconds))
        return seconds, error

    monkeypatch.setattr(tuner_module.Tuner, "_verify_and_time", counting_measure)
    monkeypatch.setattr(tuner_module, "compile_candidate", counting_compile)
    with isolated_registry({"scale": PLUGIN}):
        [result] = tune(ScaleSignature(2048))
    assert len(result.results) == 5 and result.winner
    assert "default" not in measured and len(measured) == 4  # default was finished before the kill
    assert len(compiled) == 4  # every candidate but the finished one, all found in the cache
    assert all(seconds < 5 for _, seconds in compiled)


def test_a_kernel_with_a_record_is_kept_unless_retuned(private_cache):
    signature = ScaleSignature(256)
    with isolated_registry({"scale": PLUGIN}):
        tune(signature)
        [again] = tune(signature)
        assert again.reused and again.results == []
        [forced] = tune(signature, retune=True)
        assert not forced.reused and len(forced.results) == 5


def test_export_then_tuning_spec_path_changes_the_kernel_and_its_key(private_cache, tmp_path):
    from boo_core import BooOpRegistry

    signature = BooOpRegistry.parse_command("gemm -m 128 -n 96 -k 64")
    config = {"distribution": [32, 32], "vector_common_parallel": [4, 8], "vector_reduction": [4]}
    spec = tmp_path / "spec.mlir"
    write_record(tuner_module.TuningRecord(signature.func_name, signature.canonical(), "cpu", tuner_module._compiler(),
                                           DEVICE, "default", config, label="default/tiles"), signature)
    KernelRequest.create(signature, CPU, config=config).fetch()  # what the tuner compiled
    assert export_spec(spec, [signature], "cpu", DEVICE) == 1
    text = spec.read_text()
    assert "vector_common_parallel = [4, 8, 0]" in text and "@__kernel_config" in text
    plain = KernelRequest.create(signature, CPU)
    with settings_override(tuning_spec=spec):
        tuned = KernelRequest.create(signature, CPU)
        assert tuned.key.digest != plain.key.digest
        assert f"--iree-codegen-tuning-spec-path={spec}" in tuned.flags
        kernel = tuned.fetch()
        clear_launchables()
        launchable = get_launchable(signature)
        a, b = signature.get_sample_args()
        torch.testing.assert_close(launchable(a, b), a @ b)
    assert kernel.vmfb != plain.fetch().vmfb
    # The compiler reads the spec as it was read for the key, from a copy in the entry (the
    # user's file could change in between): the reproducer names the copy.
    copy = kernel.directory / "tuning_spec.mlir"
    assert copy.read_text() == text
    assert f"--iree-codegen-tuning-spec-path={copy}" in (kernel.directory / "compile_command.txt").read_text()
    with settings_override(tuning_spec=spec):
        request = KernelRequest.create(signature, CPU)
    spec.write_text("module { this is not a spec }")
    assert request.fetch(rebuild=True).vmfb == kernel.vmfb
    # The spec's content is in the key: editing it makes another kernel.
    spec.write_text(text.replace("vector_common_parallel = [4, 8, 0]", "vector_common_parallel = [8, 8, 0]"))
    with settings_override(tuning_spec=spec):
        assert KernelRequest.create(signature, CPU).key.digest != tuned.key.digest


def test_a_bad_tuning_spec_is_an_error_naming_the_file(private_cache, tmp_path):
    from boo_core import CompileError

    spec = tmp_path / "broken-spec.mlir"
    spec.write_text("module { this is not a spec }")
    with isolated_registry({"scale": PLUGIN}), settings_override(tuning_spec=spec):
        with pytest.raises(CompileError, match=rf"BOO_TUNING_SPEC_PATH={spec}: iree-compile rejected the tuning spec"):
            KernelRequest.create(ScaleSignature(8), CPU).fetch()
    with settings_override(tuning_spec=tmp_path / "missing.mlir"):
        with pytest.raises(CompileError, match=r"BOO_TUNING_SPEC_PATH=.*missing.mlir: cannot read the tuning spec"):
            KernelRequest.create(ScaleSignature(8), CPU)
