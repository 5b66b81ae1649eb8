"""The flag-table parser: accepted forms, strictness, and error messages that name the flag."""

from __future__ import annotations

import pytest

from boo_core import CommandError, UnsupportedError
from boo_core.signatures.parser import tokenize

from .fake_plugins.scale_op import PARSER


def values(*args: str) -> dict:
    return dict(PARSER.parse_flags(list(args)).values)


@pytest.mark.parametrize("args", [
    ["--size", "7", "--factor", "0.5"],
    ["--size=7", "--factor=0.5"],
    ["-n", "7", "-f", "0.5"],
    ["-n=7", "-f", "0.5"],
])
def test_accepted_flag_forms(args):
    parsed = values(*args)
    assert parsed["size"] == 7
    assert parsed["factor"] == 0.5


def test_defaults_fill_missing_flags_and_given_records_what_was_passed():
    parsed = PARSER.parse_flags(["-n", "3"])
    assert parsed["factor"] == 2.0 and parsed["forw"] == 1
    assert parsed.given == {"size"}


def test_last_value_wins_like_miopendriver():
    assert values("-n", "3", "--size", "9")["size"] == 9


def test_negative_numbers_are_values_not_flags():
    assert values("-f", "-1.5")["factor"] == -1.5


@pytest.mark.parametrize("args, message, flag", [
    (["--sise", "3"], r"unknown flag --sise", "--sise"),
    (["-q", "3"], r"unknown flag -q", "-q"),
    (["-size=3"], r"unknown flag -size=3 \(short flags are one letter; did you mean --size\?\)", "-size=3"),
    (["-n"], r"flag -n/--size needs a value", "-n/--size"),
    (["-n", "-f", "2"], r"flag -n/--size needs a value \(got the flag '-f'\)", "-n/--size"),
    (["-n", "1.5"], r"bad value '1.5' for flag -n/--size: expected an integer", "-n/--size"),
    (["-n", "abc"], r"bad value 'abc' for flag -n/--size: expected an integer", "-n/--size"),
    (["-f", "fast"], r"bad value 'fast' for flag -f/--factor: expected a number", "-f/--factor"),
    (["3"], r"unexpected argument '3': expected a flag", "3"),
])
def test_malformed_arguments_name_the_flag(args, message, flag):
    with pytest.raises(CommandError, match=message) as info:
        PARSER.parse_flags(args)
    assert info.value.flag == flag


def test_refused_flag_is_accepted_at_its_default_and_refused_otherwise():
    assert values("-d", "")["in_data"] == ""
    with pytest.raises(UnsupportedError, match=r"flag -d/--in_data x.bin is not supported: files are not supported"):
        PARSER.parse_flags(["-d", "x.bin"])


def test_require_raises_a_command_error_naming_the_flag_and_its_value():
    flags = PARSER.parse_flags(["-n", "0"])
    flags.require("size", flags["size"] == 0, "is never raised")
    with pytest.raises(CommandError, match=r"^flag -n/--size 0 must be at least 1$") as info:
        flags.require("size", flags["size"] >= 1, "must be at least 1")
    assert info.value.flag == "-n/--size"


def test_run_options_are_separated_from_the_signature():
    parsed = PARSER.parse(["-n", "4", "-i", "77"], op="scale", base="scale", dtype=__import__("torch").float32)
    assert parsed.run_options == {"iter": 77}
    assert parsed.signatures[0].size == 4


@pytest.mark.parametrize("command", [
    "conv -n 1",
    "MIOpenDriver conv -n 1",
    "./bin/MIOpenDriver conv -n 1",
    "/opt/rocm/bin/MIOpenDriver conv -n 1",
    "C:\\rocm\\MIOpenDriver.exe conv -n 1",
    "MIOpen(HIP): Command [LogCmdConvolution] ./bin/MIOpenDriver conv -n 1",
    "MIOpen: Command [LogCmdFindConvolution] MIOpenDriver conv -n 1",
    ["MIOpenDriver", "conv", "-n", "1"],
    ["C:\\rocm\\MIOpenDriver.exe", "conv", "-n", "1"],
])
def test_tokenize_strips_log_prefix_and_program(command):
    assert tokenize(command) == ["conv", "-n", "1"]


def test_tokenize_keeps_a_base_argument_that_merely_contains_the_program_name():
    assert tokenize("MIOpenDriverX conv")[0] == "MIOpenDriverX"


def test_a_parser_with_directions_but_no_forw_flag_is_refused_when_made_naming_the_fix():
    class NoForw(type(PARSER)):
        flags = [f for f in type(PARSER).flags if f.long != "forw"]

    with pytest.raises(ValueError, match=r"NoForw: directions are read from the -F/--forw flag, which flags lacks; "
                                         r"add NoForw\.directions\.flag\(\) to flags"):
        NoForw()
