"""run_command and the driver backends, in process, on the scale test op."""

from __future__ import annotations

import csv

import pytest
import torch

from boo_core import UnsupportedError
from boo_core.plugin import DriverBackend, PreparedBackend, hookimpl
from boo_core.signatures.commands import Command
from boo_core.testing import isolated_registry
from boo_core.tools.backends import backends, get_backend
from boo_core.tools.driver import DriverOptions, run_command
from boo_core.tools.report import (
    DRIVER_COLUMNS,
    DRIVER_NUMERICS_COLUMNS,
    NUMERICS_COLUMNS,
    CsvReport,
    driver_rows,
    numerics_rows,
)

from .fake_plugins import broken_mlir, wrong_kernel


def run(text: str, **options) -> object:
    return run_command(Command(text, "test"), DriverOptions(**options))


def test_every_mode_on_every_backend_with_timing_and_numerics(scale_registry, private_cache):
    result = run("scale -n 64 -F 0 -i 4", backends=("boo", "torch"), verify=True)
    assert not result.failed and result.op == "scale"
    assert [(r.signature.mode, r.backend) for r in result.runs] == [
        ("fwd", "boo"), ("fwd", "torch"), ("bwd", "boo"), ("bwd", "torch")]
    boo, eager = result.runs[:2]
    assert boo.cache == "miss" and boo.compile_seconds > 0 and eager.cache == "" and eager.compile_seconds == 0
    assert result.runs[2].cache == "miss"  # bwd is another kernel
    assert boo.timing.iterations == 4 and boo.tflops > 0 and boo.gbps > 0
    assert boo.outputs == eager.outputs and boo.outputs[0].startswith("y: shape=(64,) dtype=float32 mean=")
    assert all(r.status == "ok" and r.comparisons[0].passed for r in result.runs)
    # The same kernel again: already in memory; --iter overrides the command's -i.
    again = run("scale -n 64 -F 1 -i 4", iterations=2)
    assert again.runs[0].cache == "memory" and again.runs[0].timing.iterations == 2


def test_splat_inputs_and_seed(scale_registry, private_cache):
    [splat] = run("scale -n 8", backends=("torch",), splat_value=1.5).runs
    assert splat.outputs == ["y: shape=(8,) dtype=float32 mean=3 std=0"]
    first, second = (run("scale -n 8", backends=("torch",), seed=7).runs[0] for _ in range(2))
    assert first.outputs == second.outputs


def test_a_command_that_does_not_parse_is_recorded(scale_registry):
    result = run("scale -n 4 --sizee 5")
    assert result.failed and result.error == "unknown flag --sizee" and result.runs == []
    assert run("scale -n 4 -i 0").error == "the command's -i/--iter is 0: it must be at least 1"


def test_a_compile_failure_is_recorded_and_the_other_backends_still_run(private_cache):
    with isolated_registry({"scale": broken_mlir}):
        result = run("scale -n 5", backends=("boo", "torch"))
    boo, eager = result.runs
    assert boo.status == "error"
    assert boo.error.startswith("no formulation of scale_fwd_f32_n5_f2 compiles for cpu:\n  - broken: did not compile")
    assert eager.status == "ok" and result.failed


def test_a_wrong_kernel_fails_numerics(private_cache):
    with isolated_registry({"scale": wrong_kernel}):
        result = run("scale -n 16", verify=True)
    [boo] = result.runs
    assert boo.status == "fail" and result.failed
    [comparison] = boo.comparisons
    assert not comparison.passed and comparison.bad_elements > 0 and comparison.max_rel_error == pytest.approx(0.5)


class BackendPlugin:
    """A plugin adding driver backends through the ``boo_driver_backends`` hook."""

    def __init__(self, *backends: DriverBackend) -> None:
        self.backends = backends

    @hookimpl
    def boo_driver_backends(self):
        return self.backends


def test_a_plugins_backend_runs_beside_boos(scale_registry, private_cache):
    with pytest.raises(UnsupportedError, match="unknown backend 'tvm': choose from boo, torch, inductor, boo_inductor"):
        get_backend("tvm")
    calls = []

    def lazy(signature, device):
        def call(x):
            calls.append(x)
            return x * signature.factor
        return PreparedBackend(call, lazy=True)

    scale_registry.register_plugin(BackendPlugin(DriverBackend("lazy", "compiles on its first call", lazy)), "lazy")
    assert [b.name for b in backends()] == ["boo", "torch", "inductor", "boo_inductor", "lazy"]
    [result] = run("scale -n 8 -i 3", backends=("lazy",), warmup=1, verify=True).runs
    assert result.status == "ok" and result.lazy and result.compile_seconds > 0
    assert len(calls) == 1 + 1 + 3 + 1  # first call, warm-up, timed, numerics check


def test_a_plugin_backend_cannot_take_a_name_in_use_nor_answer_with_something_else(scale_registry, caplog):
    taken = DriverBackend("torch", "not PyTorch", lambda signature, device: PreparedBackend(lambda x: x))
    scale_registry.register_plugin(BackendPlugin(taken), "impostor")

    class Wrong:
        @hookimpl
        def boo_driver_backends(self):
            return ["gpu-backend"]

    scale_registry.register_plugin(Wrong(), "wrong")
    with caplog.at_level("WARNING"):
        listed = backends()
    assert [b.name for b in listed] == ["boo", "torch", "inductor", "boo_inductor"]
    assert get_backend("torch").description.startswith("PyTorch eager")
    assert """plugin "impostor" (registered explicitly): driver backend 'torch' is boo-core's already; it is """ \
           "skipped" in caplog.text
    assert """plugin "wrong" (registered explicitly) failed in boo_driver_backends: returned ['gpu-backend'], not """ \
           "a sequence of DriverBackend" in caplog.text


def test_a_backend_returning_the_wrong_outputs_is_an_error(scale_registry):
    scale_registry.register_plugin(BackendPlugin(DriverBackend(
        "twice", "returns one output too many", lambda signature, device: PreparedBackend(lambda x: (x * 2, x * 2)))),
        "twice")
    [timed] = run("scale -n 8", backends=("twice",)).runs
    assert timed.error == "backend twice returned 2 outputs, scale_fwd_f32_n8_f2 has 1"
    [checked] = run("scale -n 8", backends=("twice",), timed=False, verify=True).runs
    assert checked.error == "ValueError: scale_fwd_f32_n8_f2: 2 outputs, the reference has 1"


@pytest.mark.parametrize("backend", ["inductor", "boo_inductor"])
def test_torch_compile_backends_compile_on_the_first_call(scale_registry, private_cache, backend):
    [result] = run("scale -n 32 -i 2", backends=(backend,), verify=True).runs
    assert result.status == "ok", result.error
    assert result.lazy and result.compile_seconds > 0 and result.timing.iterations == 2


def test_csv_rows(scale_registry, private_cache, tmp_path):
    good = run("scale -n 8 -F 0", backends=("boo", "torch"), verify=True)
    bad = run("scale -n x")
    path = tmp_path / "out.csv"
    with CsvReport(path, DRIVER_COLUMNS + DRIVER_NUMERICS_COLUMNS) as report:
        for result in (good, bad):
            report.write(driver_rows(result, "cpu", True, torch.float64))
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == list(DRIVER_COLUMNS + DRIVER_NUMERICS_COLUMNS)
    assert [(r["mode"], r["backend"], r["status"], r["numerics"]) for r in rows] == [
        ("fwd", "boo", "ok", "PASS"), ("fwd", "torch", "ok", "PASS"), ("bwd", "boo", "ok", "PASS"),
        ("bwd", "torch", "ok", "PASS"), ("", "", "error", "")]
    assert rows[0]["func_name"] == "scale_fwd_f32_n8_f2" and rows[0]["iterations"] == "10"
    assert float(rows[0]["median_us"]) > 0 and rows[0]["flops"] == "8" and rows[0]["bytes"] == "64"
    assert rows[4]["error"] == "bad value 'x' for flag -n/--size: expected an integer"

    numerics = numerics_rows(run("scale -n 8", timed=False, verify=True), "cpu", torch.float64)
    assert set(numerics[0]) <= set(NUMERICS_COLUMNS)
    assert (numerics[0]["output"], numerics[0]["status"], numerics[0]["dtype"]) == ("y", "PASS", "f32")
