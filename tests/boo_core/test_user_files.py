"""Files BOO reads from paths it is given (a commands file, a results CSV) or finds in a
directory (a substitution's, IREE's dumps, a cache entry's) are checked before they are
read: a FIFO, a device, a directory or an oversized file is refused with one line naming it
and the reason, never read (a FIFO blocks its reader forever, /dev/zero never ends)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from boo_core import CompileError, SubstitutionError
from boo_core.files import FileRefused
from boo_core.tools.cli import main
from boo_core.tools.html_report import TUNE_COLUMNS, read_results

from ..conftest import REPO
from .report_csvs import write_csv, write_tune_csv

BOO = str(Path(sys.executable).parent / "boo")


def boo(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The ``boo`` console script; a read that blocks fails the test by its timeout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "boo_core" / "src"), str(REPO)])}
    return subprocess.run([BOO, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout)


def one_line_error(result: subprocess.CompletedProcess, message: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.strip() == message, result.stderr
    assert "Traceback" not in result.stdout + result.stderr


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe.csv"
    os.mkfifo(path)
    return path


def within(seconds: float, function: Callable[[], Any], fifo: Path) -> Any:
    """``function()``, failing the test if it is still running after ``seconds`` (blocked
    opening ``fifo``, which is then opened for writing so that the blocked reader ends)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function()
        except BaseException as e:
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(10)
        pytest.fail(f"still reading after {seconds} s: it opened the FIFO {fifo}")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


# -- boo report -----------------------------------------------------------------------------------


def test_boo_report_of_dev_zero_is_refused_at_once():
    one_line_error(boo("report", "/dev/zero", timeout=60),
                   "boo report: error: results CSV /dev/zero is a character device, not a regular file")


def test_boo_report_of_a_fifo_is_refused_without_waiting_for_a_writer(fifo):
    one_line_error(boo("report", str(fifo), timeout=60),
                   f"boo report: error: results CSV {fifo} is a FIFO, not a regular file")


def test_boo_report_of_an_oversized_csv_is_refused_naming_it(tmp_path, capsys, monkeypatch):
    from boo_core.tools.html_report import results

    path = write_tune_csv(tmp_path / "tune.csv")
    monkeypatch.setattr(results, "MAX_CSV_BYTES", 1000)
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"boo report: error: results CSV {path} is ") and \
        err.endswith(", more than the 1000 bytes BOO reads of it\n"), err
    assert not path.with_suffix(".html").exists()


def test_a_results_csv_with_a_byte_order_mark_is_read(tmp_path):
    path = write_tune_csv(tmp_path / "tune.csv")
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())  # as spreadsheets save "CSV UTF-8"
    results = read_results(path)
    assert results.kind == "tune" and results.columns[0] == TUNE_COLUMNS[0]


def test_a_results_csv_that_is_not_utf8_names_the_file(tmp_path, capsys):
    path = write_csv(tmp_path / "latin1.csv", TUNE_COLUMNS, [])
    path.write_bytes(path.read_bytes() + b"caf\xe9\n")
    assert main(["report", str(path)]) == 2
    assert f"boo report: error: {path}: cannot read it as CSV: 'utf-8' codec can't decode byte 0xe9" \
        in capsys.readouterr().err


# -- commands files -------------------------------------------------------------------------------


def test_boo_driver_with_a_fifo_as_commands_file_is_refused(fifo):
    one_line_error(boo("driver", "--commands-file", str(fifo), timeout=60),
                   f"boo driver: error: commands file {fifo} is a FIFO, not a regular file")


def test_boo_driver_with_a_directory_as_commands_file_is_refused(tmp_path, capsys):
    assert main(["driver", "--commands-file", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"boo driver: error: commands file {tmp_path} is a directory, not a regular file\n"


def test_an_oversized_commands_file_is_refused(tmp_path, capsys, monkeypatch):
    from boo_core.signatures import commands

    path = tmp_path / "cmds.txt"
    path.write_text("scale -n 4\n" * 20)
    monkeypatch.setattr(commands, "MAX_COMMANDS_BYTES", 100)
    assert main(["driver", "--commands-file", str(path)]) == 2
    assert capsys.readouterr().err == (f"boo driver: error: commands file {path} is 220 bytes, more than the 100 bytes "
                                       "BOO reads of it\n")


@pytest.mark.parametrize("name, content", [("cmds.txt", "scale -n 4\n"),
                                           ("cmds.tsv", "command\tnote\nscale -n 4\tx\n")])
def test_a_commands_file_with_a_byte_order_mark_works(tmp_path, capsys, scale_registry, name, content):
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + content.encode())  # Notepad's "UTF-8 with BOM"
    assert main(["driver", "--commands-file", str(path), "--backend", "torch", "-i", "1"]) == 0
    assert "1 runs (mode x backend), 0 failed" in capsys.readouterr().out


# -- directories BOO reads ------------------------------------------------------------------------


def test_a_fifo_or_oversized_file_in_a_substitution_directory_is_refused_naming_it(tmp_path, monkeypatch):
    from boo_core.substitute import Substitution, substitution

    directory = tmp_path / "mine"
    (directory / "sources").mkdir(parents=True)
    source = directory / "sources" / "exe.mlir"
    source.write_text("hal.executable public @exe {\n}\n")
    os.mkfifo(directory / "sources" / "other.mlir")
    with pytest.raises(SubstitutionError, match=rf"^substitution file {directory}/sources/other.mlir is a FIFO, "
                                                r"not a regular file$"):
        within(30, lambda: Substitution.from_directory(directory), directory / "sources" / "other.mlir")
    (directory / "sources" / "other.mlir").unlink()
    monkeypatch.setattr(substitution, "MAX_KERNEL_FILE_BYTES", 10)
    with pytest.raises(SubstitutionError, match=rf"^substitution file {source} is 31 bytes, more than the 10 bytes"):
        Substitution.from_directory(directory)


def test_a_fifo_among_dumped_executables_is_refused(tmp_path):
    from boo_core.substitute.dump import _read_executables
    from boo_core.substitute.executables import read_dumped_sources

    (tmp_path / "module_a.mlir").write_text("hal.executable public @a {\n}\n")
    os.mkfifo(tmp_path / "module_b.mlir")
    with pytest.raises(FileRefused, match=r"dumped executable .*module_b.mlir is a FIFO, not a regular file"):
        within(30, lambda: read_dumped_sources(tmp_path), tmp_path / "module_b.mlir")
    with pytest.raises(FileRefused, match=r"dumped executable .*module_b.mlir is a FIFO, not a regular file"):
        within(30, lambda: _read_executables("", {"sources": tmp_path, "configurations": tmp_path / "none"}),
               tmp_path / "module_b.mlir")


def test_a_fifo_as_tuning_progress_file_is_refused(tmp_path):
    from boo_core.tune.tuner import _finished

    os.mkfifo(tmp_path / "progress.jsonl")
    with pytest.raises(FileRefused, match=r"tuning progress file .*progress.jsonl is a FIFO"):
        within(30, lambda: _finished(tmp_path / "progress.jsonl"), tmp_path / "progress.jsonl")
    assert _finished(tmp_path / "absent.jsonl") == {}


def test_a_fifo_among_configured_executables_fails_the_compile_naming_it(tmp_path, monkeypatch):
    from boo_core.kernels import configs

    def configure(command, **kwargs):  # iree-compile "dumped" a FIFO
        os.mkfifo(tmp_path / "configured" / "module_x.mlir")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(configs.subprocess, "run", configure)
    with pytest.raises(CompileError, match=r"cannot apply configuration .*: configured executable .*module_x.mlir "
                                           "is a FIFO, not a regular file"):
        within(30, lambda: configs.compile_with_config(["iree-compile", "x.mlir"], tmp_path, {"workgroup": [1]}, 10),
               tmp_path / "configured" / "module_x.mlir")


def test_a_fifo_among_a_tuned_kernels_configurations_is_refused_by_the_spec_export(private_cache, tmp_path):
    import torch

    from boo_core import BooOpRegistry
    from boo_core.kernels.request import KernelRequest
    from boo_core.kernels.target import Target
    from boo_core.kernels.tuning_records import write_record
    from boo_core.tune import tuner
    from boo_core.tune.spec import export_spec
    from boo_core.verify.verdicts import device_identity

    device = device_identity(torch.device("cpu"))
    signature = BooOpRegistry.parse_command("gemm -m 16 -n 16 -k 16")
    config = {"distribution": [8, 8], "vector_common_parallel": [4, 4], "vector_reduction": [4]}
    write_record(tuner.TuningRecord(signature.func_name, signature.canonical(), "cpu", tuner._compiler(), device,
                                    "default", config, label="default/tiles"), signature)
    request = KernelRequest.create(signature, Target.parse("cpu"), config=config)
    request.fetch()
    [configured, *_] = sorted((request.directory / "configurations").glob("*.mlir"))
    configured.unlink()
    os.mkfifo(configured)
    message = f"configured executable {configured} is a FIFO, not a regular file"
    with pytest.raises(FileRefused, match=re.escape(message)):
        within(30, lambda: export_spec(tmp_path / "spec.mlir", [signature], "cpu", device), configured)


# -- the tuning spec --------------------------------------------------------------------------------


def test_a_fifo_as_tuning_spec_is_refused_without_waiting_for_a_writer(fifo, private_cache):
    from boo_core.kernels.request import KernelRequest
    from boo_core.kernels.target import Target
    from boo_core.settings import settings_override
    from boo_core.testing import isolated_registry

    from .fake_plugins import scale_op
    from .fake_plugins.scale_op import ScaleSignature

    with isolated_registry({"scale": scale_op}), settings_override(tuning_spec=fifo):
        with pytest.raises(CompileError, match=re.escape(f"BOO_TUNING_SPEC_PATH={fifo}: cannot read the tuning spec: "
                                                         f"tuning spec {fifo} is a FIFO, not a regular file")):
            within(30, lambda: KernelRequest.create(ScaleSignature(8), Target.parse("cpu")), fifo)
