"""The ``boo`` CLI in process: help texts, usage errors, command files, options.

The real console script is run in a subprocess by tests/integration/test_cli.py.
"""

from __future__ import annotations

import csv

import pytest

from boo_core.testing import isolated_registry
from boo_core.tools.cli import main

from .fake_plugins import wrong_kernel


def help_text(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_every_subcommand_explains_itself_with_examples(capsys):
    driver = help_text(capsys, "driver")
    assert "Backends (--backend, repeatable; default boo):" in driver
    assert "  boo_inductor  torch.compile of signature.eager with BOO's backend, iree_boo_inductor\n" in driver
    assert "'command' column holds the commands" in driver and "Examples:\n  boo driver convbfp16" in driver
    for option in ("--commands-file", "--backend", "--device", "--iter", "--warmup", "--splat-input-value",
                   "--seed", "--csv", "--verify-numerics"):
        assert option in driver
    numerics = help_text(capsys, "numerics")
    assert "atol = max|ref| * (eps(dtype) + 8 * eps(float32) * sqrt(n))" in numerics
    assert "--reference-dtype {float32,float64}" in numerics
    preload = help_text(capsys, "preload")
    assert "--target TARGET" in preload and "-j JOBS, --jobs JOBS" in preload and "CachePopulator" in preload
    assert "boo cache clear --target cuda:sm_80" in help_text(capsys, "cache")
    assert "--list" in help_text(capsys, "cache", "info")


@pytest.mark.parametrize("args, message", [
    (["driver", "--device", "xpu:0", "conv"], "boo driver: error: no timer for xpu devices yet"),
    (["driver", "--device", "meta", "--backend", "torch", "conv"], "boo driver: error: no timer for meta devices yet"),
    (["driver"], "boo driver: error: no command given: give a command (boo driver conv -n 1 -c 8 ...) "
                 "or --commands-file FILE"),
    (["numerics", "--commands-file", "/nonexistent/cmds.txt"],
     "boo numerics: error: cannot read commands file /nonexistent/cmds.txt: No such file or directory"),
    (["preload", "--target", "tpu", "conv"],
     "boo preload: error: unknown target 'tpu': expected cpu, cuda:<sm_NN> or rocm:<gfxNNN>"),
    (["cache", "clear", "--target", "cuda"],
     "boo cache: error: target 'cuda' needs an architecture, e.g. cuda:sm_80 or rocm:gfx942"),
])
def test_usage_errors_exit_2_with_a_clear_message(capsys, args, message):
    assert main(args) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["ops", "extra"], "boo: error: unrecognized arguments: extra"),
    (["driver", "--iter", "0", "conv"], "argument --iter: must be at least 1, got 0"),
    (["driver", "--warmup", "-1", "conv"], "argument --warmup: must be 0 or more, got -1"),
    (["driver", "--backend", "tvm", "conv"], "argument --backend: invalid choice: 'tvm'"),
])
def test_argument_errors(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_empty_commands_file(capsys, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing here\n")
    assert main(["driver", "--commands-file", str(empty)]) == 2
    assert f"{empty} holds no commands" in capsys.readouterr().err


def test_tsv_file_with_duplicates_and_extra_arguments(capsys, tmp_path, scale_registry, private_cache):
    commands = tmp_path / "cmds.tsv"
    commands.write_text("command\tnote\nscale -n 8 -i 50\tfirst\nscale -n 4 -F 0\t\nscale -n 8 -i 50\tagain\n")
    table = tmp_path / "out.csv"
    assert main(["driver", "--commands-file", str(commands), "--backend", "torch", "--backend", "boo",
                 "--csv", str(table), "-i", "2"]) == 0
    out = capsys.readouterr().out
    assert "boo driver: 2 commands on cpu; backends: torch, boo; timed calls: -i/--iter of each command" in out
    assert f"\nscale -n 8 -i 50 -i 2\n  (repeated at {commands}:4: run once)\n" in out
    assert "    torch: eager (nothing to compile)\n" in out
    assert "    boo: formulation default: kernel compiled in " in out
    rows = list(csv.DictReader(table.open()))
    assert [(r["source"], r["mode"], r["backend"], r["iterations"]) for r in rows] == [
        (f"{commands}:2", "fwd", "torch", "2"), (f"{commands}:2", "fwd", "boo", "2"),
        (f"{commands}:3", "fwd", "torch", "2"), (f"{commands}:3", "fwd", "boo", "2"),
        (f"{commands}:3", "bwd", "torch", "2"), (f"{commands}:3", "bwd", "boo", "2")]
    assert "summary: 2 commands, 6 runs (mode x backend), 0 failed" in out


def test_verify_numerics_in_the_driver_fails_the_run_on_a_wrong_kernel(capsys, tmp_path, private_cache):
    table = tmp_path / "out.csv"
    with isolated_registry({"scale": wrong_kernel}):
        assert main(["driver", "--verify-numerics", "--csv", str(table), "scale", "-n", "8", "-i", "1"]) == 1
    out = capsys.readouterr()
    assert "      numerics y: max abs error " in out.out and "FAIL (8 elements out of tolerance)" in out.out
    [row] = csv.DictReader(table.open())
    assert (row["status"], row["numerics"], row["numerics_output"]) == ("fail", "FAIL", "y")
    assert row["max_rel_error"] == "0.5"
    assert "1 of 1 commands failed" in out.err


def test_numerics_against_a_float32_reference(capsys, tmp_path, scale_registry, private_cache):
    table = tmp_path / "out.csv"
    assert main(["numerics", "--reference-dtype", "float32", "--csv", str(table), "--", "scale", "-n", "8"]) == 0
    assert "against PyTorch in float32" in capsys.readouterr().out
    [row] = csv.DictReader(table.open())
    assert (row["status"], row["reference_dtype"], row["max_abs_error"]) == ("PASS", "f32", "0")


def test_numerics_reports_commands_that_do_not_parse(capsys, scale_registry):
    assert main(["numerics", "scale", "-n", "8", "--factor", "two"]) == 1
    out = capsys.readouterr().out
    assert "error (command line): bad value 'two' for flag -f/--factor: expected a number" in out
    assert "summary: 0 PASS, 0 FAIL, 1 ERROR" in out


def test_cache_path_and_info_on_an_empty_cache(capsys, private_cache):
    assert main(["cache", "path"]) == 0
    assert capsys.readouterr().out == f"{private_cache}\n"
    assert main(["cache", "info", "--list"]) == 0
    expected = f"cache: {private_cache}\nentries: 0 (0 complete, 0 failed compiles, 0 broken), 0 B\n"
    assert capsys.readouterr().out == expected


def test_several_quoted_commands_each_run_with_plain_arguments_appended(capsys, tmp_path, scale_registry):
    table = tmp_path / "out.csv"
    assert main(["driver", "--backend", "torch", "--csv", str(table), "scale -n 8", "scale -n 4 -f 3", "scale -n 8",
                 "-i", "2"]) == 0
    out = capsys.readouterr().out
    assert "boo driver: 2 commands on cpu" in out and "\nscale -n 8 -i 2\n  (repeated at command line, command 3" in out
    assert [(r["source"], r["command"], r["iterations"]) for r in csv.DictReader(table.open())] == [
        ("command line, command 1", "scale -n 8 -i 2", "2"), ("command line, command 2", "scale -n 4 -f 3 -i 2", "2")]


@pytest.mark.parametrize("args, message", [
    (["driver", "scale -n 8", "-i", "2", "scale -n 4"], "boo driver: error: argument 'scale -n 4' holds several "
     "words, after the plain argument '-i': give each command as one quoted argument, before any flags appended to "
     "all of them (or use --commands-file)"),
])
def test_a_quoted_command_after_plain_arguments_is_a_usage_error(capsys, scale_registry, args, message):
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_tune_on_ray_with_jobs_says_how_many_tasks_at_once(capsys, monkeypatch, scale_registry):
    """``boo tune --ray -j 2`` once failed on its banner (len() of the job count)."""
    seen = {}

    def fake_run_tune(commands, options, **kwargs):
        seen.update(commands=[c.text for c in commands], jobs=options.jobs, ray=options.ray)
        return 1, 0

    monkeypatch.setattr("boo_core.tools.cli.run_tune", fake_run_tune)
    assert main(["tune", "--ray", "-j", "2", "scale", "-n", "8"]) == 0
    assert "compiled on a local Ray instance (at most 2 tasks at once)" in capsys.readouterr().out
    assert seen == {"commands": ["scale -n 8"], "jobs": 2, "ray": "local"}
    assert main(["tune", "--ray", "-j", "1", "scale", "-n", "8"]) == 0
    assert "(at most 1 task at once)" in capsys.readouterr().out


def test_dump_into_a_path_under_a_file_is_one_line_naming_it(capsys, tmp_path, scale_registry):
    afile = tmp_path / "afile"
    afile.write_text("")
    for to in (afile / "dumps", afile):
        assert main(["dump", "--to", str(to), "scale", "-n", "8"]) == 1
        err = capsys.readouterr().err
        assert err == f"boo dump: error: --to {to}: cannot create it: {afile} is not a directory\n"


def test_dump_into_an_unwritable_directory_names_it(capsys, tmp_path, monkeypatch, scale_registry):
    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr("pathlib.Path.mkdir", refuse)
    assert main(["dump", "--to", str(tmp_path / "ro" / "dumps"), "scale", "-n", "8"]) == 1
    err = capsys.readouterr().err
    assert err == f"boo dump: error: --to {tmp_path}/ro/dumps: cannot create it: Permission denied\n"
