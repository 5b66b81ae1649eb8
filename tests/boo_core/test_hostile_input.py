"""Hostile command lines in ``boo driver`` and ``boo numerics``: reported, never a traceback,
and never the end of the batch; a plugin's signature with astronomical counts is reported too."""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace

import pytest
import torch

from boo_core.testing import isolated_registry
from boo_core.tools.cli import main
from boo_core.tools.driver import MAX_COMMAND_ITERATIONS
from boo_core.tools.report import si

from .fake_plugins import scale_op

HOSTILE = [
    ("scale -n " + "1" * 309, "flag -n/--size 1111111111111111111111111111111111111111... must be at most "
                              "9223372036854775807"),
    ('scale -n "3', "cannot split the command into arguments: No closing quotation"),
    ("scale -n ١٢", "bad value '١٢' for flag -n/--size: expected an integer"),
    ("scale -n 8 -f 1e999", "flag -f/--factor 1e999 must be finite"),
    ("scale -n 0", "scale_fwd_f32_n0_f2: tensor x of shape (0,) has no elements"),
    ("scale -n 9223372036854775807", "would take 3.69e+19 bytes; BOO accepts tensors of up to 2**48 bytes (256 TiB)"),
    (f"scale -n 8 -i {MAX_COMMAND_ITERATIONS + 1}",
     f"the command's -i/--iter is {MAX_COMMAND_ITERATIONS + 1}: at most {MAX_COMMAND_ITERATIONS} (the tool's --iter "
     "option overrides it)"),
    ("scale -n 8 --size", "flag -n/--size needs a value"),
    ("scalefp8 -n 8", "unknown op 'scalefp8'"),
]


@pytest.fixture
def commands_file(tmp_path):
    """A commands file: a good command, each hostile one, and a good one at the end."""
    path = tmp_path / "cmds.txt"
    path.write_text("scale -n 8\n" + "".join(f"{line}\n" for line, _ in HOSTILE) + "scale -n 4 -f 3\n")
    return path


def test_driver_reports_each_hostile_line_and_runs_the_rest(capsys, commands_file, scale_registry, tmp_path):
    table = tmp_path / "out.csv"
    status = main(["driver", "--commands-file", str(commands_file), "--backend", "torch", "--warmup", "0",
                   "--csv", str(table)])
    out, err = capsys.readouterr()
    assert status == 1 and "Traceback" not in out + err
    for number, (_, message) in enumerate(HOSTILE, 2):
        assert f"  error ({commands_file}:{number}): " in out and message in out, message
    assert out.count("time (us):") == 2  # the first and the last command ran
    assert f"summary: {len(HOSTILE) + 2} commands, 2 runs (mode x backend), {len(HOSTILE)} failed" in out
    rows = list(csv.DictReader(table.open()))
    assert [r["status"] for r in rows] == ["ok", *["error"] * len(HOSTILE), "ok"]


def test_numerics_reports_each_hostile_line_and_checks_the_rest(capsys, commands_file, scale_registry, private_cache):
    status = main(["numerics", "--commands-file", str(commands_file)])
    out, err = capsys.readouterr()
    assert status == 1 and "Traceback" not in out + err
    for _, message in HOSTILE:
        assert message in out
    assert f"summary: 2 PASS, 0 FAIL, {len(HOSTILE)} ERROR" in out


def test_preload_reports_each_hostile_line(capsys, commands_file, scale_registry, private_cache):
    assert main(["preload", "-j", "1", "--commands-file", str(commands_file)]) == 1
    out, err = capsys.readouterr()
    # The -i line compiles (preload has no use for -i); the other hostile lines are reported once each.
    assert "Traceback" not in out + err and f"compiled 2, cache hits 0, failed {len(HOSTILE) - 1} in " in out
    assert "cannot split the command into arguments: No closing quotation\n" in out


@dataclass(frozen=True)
class HugeSignature(scale_op.ScaleSignature):
    """A plugin's signature whose FLOP count no float holds."""

    op_name = "huge"

    @property
    def flops(self) -> int:
        return 10**400


@dataclass(frozen=True)
class NamelessSignature(scale_op.ScaleSignature):
    """A plugin's signature that cannot say its name (a plugin bug)."""

    op_name = "nameless"

    def readable_name(self) -> str:
        raise KeyError("no name")


def plugin(name: str, signature_class: type) -> scale_op.ScalePlugin:
    parser = type(f"{name}Parser", (scale_op.ScaleParser,), {"signature_class": signature_class})()
    return scale_op.ScalePlugin(name=name, keywords=(name,), signature_class=signature_class, parser=parser)


def test_a_signature_with_astronomical_counts_is_printed_and_the_batch_goes_on(capsys, tmp_path):
    path = tmp_path / "cmds.txt"
    path.write_text("huge -n 8\nnameless -n 8\nscale -n 8\n")
    plugins = {"huge": plugin("huge", HugeSignature), "nameless": plugin("nameless", NamelessSignature),
               "scale": scale_op}
    with isolated_registry(plugins):
        status = main(["driver", "--commands-file", str(path), "--backend", "torch", "--iter", "1", "--warmup", "0"])
    out, err = capsys.readouterr()
    assert status == 1 and "Traceback" not in out + err
    assert "[mode fwd, over 1e308 FLOP, 64 B per call]" in out and "throughput: inf TFLOP/s" in out
    assert f"  error ({path}:2): cannot report its results: KeyError: 'no name'" in out
    assert "summary: 3 commands, 2 runs (mode x backend), 1 failed" in out


@pytest.mark.parametrize("value, text", [(4.5e8, "450 MFLOP"), (10**400, "over 1e308 FLOP"), (0, "0 FLOP"),
                                         (float("inf"), "inf TFLOP")])
def test_si_never_overflows(value, text):
    assert si(value, "FLOP") == text


def test_the_scale_plugin_helper_registers_under_its_name():
    spec = plugin("huge", HugeSignature).spec
    assert spec == replace(spec, name="huge") and spec.signature_class is HugeSignature
    assert torch.float32 in spec.parser.dtypes


def test_a_command_too_large_for_the_devices_memory_is_refused_before_allocating(capsys, scale_registry):
    """2**44 floats in and out: within BOO's 2**48-byte bound, beyond any host's memory."""
    size = 2**44
    status = main(["driver", "--backend", "torch", "--backend", "boo", "scale", "-n", str(size)])
    out, err = capsys.readouterr()
    assert status == 1 and "Traceback" not in out + err
    error = (f"error: scale -n {size}: the tensors of scale_fwd_f32_n{size}_f2 take 1.41e+05 GB (inputs and "
             "outputs), more than the ")
    assert out.count(error) == 2 and "GB of memory of cpu\n" in out  # one line per backend
    assert "summary: 1 command, 2 runs (mode x backend), 1 failed" in out


def test_an_allocation_that_fails_is_one_line_naming_the_command_and_the_size(capsys, scale_registry, monkeypatch):
    def out_of_memory(self, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                           "memory: you tried to allocate 137438953408 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(scale_op.ScaleSignature, "get_sample_args", out_of_memory)
    monkeypatch.setattr("boo_core.tools.driver.device_memory", lambda device: None)
    assert main(["driver", "--backend", "torch", "scale", "-n", "1000000000"]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "RuntimeError" not in out
    assert ("    torch: error: scale -n 1000000000: cannot allocate the inputs of scale_fwd_f32_n1000000000_f2 (4 GB) "
            "on cpu: out of memory\n") in out
