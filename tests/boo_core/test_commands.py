"""Reading commands for the tools: files, .tsv, duplicates, prefixes, extra arguments."""

from __future__ import annotations

import pytest

from boo_core import CommandError
from boo_core.signatures.commands import Command, CommandFileError, collect_commands


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_one_command_from_arguments():
    [command] = collect_commands(["conv", "-n", "1", "--in_layout", "NHWC"])
    assert command.text == "conv -n 1 --in_layout NHWC" and command.source == "command line"
    assert collect_commands([]) == []
    logged = "MIOpen(HIP): Command [LogCmdConvolution] ./bin/MIOpenDriver conv -n 2"
    [pasted] = collect_commands([logged])  # a log line pasted in quotes
    assert pasted.text == logged and pasted.tokens() == ["conv", "-n", "2"]


def test_file_skips_comments_and_blank_lines_and_keeps_prefixed_lines(tmp_path):
    path = write(tmp_path, "cmds.txt", "# a comment\n\nscale -n 4\n   # indented comment\n"
                                       "MIOpen(HIP): Command [LogCmdScale] ./bin/MIOpenDriver scale -n 5\n")
    commands = collect_commands([], path)
    assert [(c.source, c.text) for c in commands] == [
        (f"{path}:3", "scale -n 4"),
        (f"{path}:5", "MIOpen(HIP): Command [LogCmdScale] ./bin/MIOpenDriver scale -n 5")]
    assert commands[1].tokens() == ["scale", "-n", "5"]


def test_duplicates_run_once_and_say_where_they_were(tmp_path):
    path = write(tmp_path, "cmds.txt", "scale -n 4\nscale -n 5\n./bin/MIOpenDriver scale  -n 4\nscale -n 4\n")
    first, second = collect_commands([], path)
    assert first.text == "scale -n 4" and first.duplicates == [f"{path}:3", f"{path}:4"]
    assert second.text == "scale -n 5" and second.duplicates == []


def test_extra_arguments_are_appended_and_win_by_last_value(tmp_path, scale_registry):
    path = write(tmp_path, "cmds.txt", "scale -n 4 -i 3\nscale -n 6\n")
    commands = collect_commands(["--", "-i", "7", "--factor", "0.5"], path)
    assert [c.text for c in commands] == ["scale -n 4 -i 3 -i 7 --factor 0.5", "scale -n 6 -i 7 --factor 0.5"]
    parsed = commands[0].parse()
    assert parsed.run_options["iter"] == 7 and parsed.signatures[0].factor == 0.5


def test_tsv_takes_the_command_column(tmp_path):
    path = write(tmp_path, "cmds.tsv", "# exported from a tuning run\nmodel\tCommand\tcount\n"
                                       "resnet\tscale -n 4\t12\n\nbert\tscale -n 8 --factor 3\t1\nshort row\n")
    assert [(c.source, c.text) for c in collect_commands([], path)] == [
        (f"{path}:3", "scale -n 4"), (f"{path}:5", "scale -n 8 --factor 3")]


def test_tsv_without_a_command_column_is_refused(tmp_path):
    path = write(tmp_path, "cmds.tsv", "scale -n 4\t12\n")
    with pytest.raises(CommandFileError, match=r"cmds.tsv:1: the first row of a .tsv commands file must be a "
                                               r"header with a 'command' column \(found: 'scale -n 4', '12'\)"):
        collect_commands([], path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(CommandFileError, match=r"cannot read commands file .*nope.txt: No such file or directory"):
        collect_commands([], tmp_path / "nope.txt")


def test_unsplittable_command_is_a_command_error():
    command = Command('scale -n "4', "x")
    with pytest.raises(CommandError, match="cannot split the command into arguments: No closing quotation"):
        command.tokens()
