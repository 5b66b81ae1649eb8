"""Property-based fuzzing of every installed op's commands: the parser, and ``boo driver``.

The ops and their flags come from the registry (``entry.spec.parser.flags``), so a third
party's op installed here is fuzzed too. Each test runs hypothesis with a fixed seed
(``derandomize``) and no deadline (CI machines are shared); the ``slow`` variants run many
more examples (``pytest -m slow``). Counts per op are asserted, so a strategy that stopped
producing parseable commands, or commands at all, fails rather than passing vacuously.
"""

from __future__ import annotations

import collections
import contextlib
import io
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boo_core import BooError, BooOpRegistry, FlagKind, OpEntry
from boo_core.signatures.commands import collect_commands
from boo_core.signatures.flags import Integer
from boo_core.testing import fuzz
from boo_core.tools.cli import main

OPS = BooOpRegistry.default().list_ops()

#: Examples per op in CI: 600 parsed commands and 80 driver batches of up to 5 commands.
PARSE_EXAMPLES, DRIVER_BATCHES, BATCH = 600, 80, 5
#: ... and with ``pytest -m slow``.
SLOW_PARSE_EXAMPLES, SLOW_DRIVER_BATCHES = 10_000, 600
#: Commands whose kernels take more FLOPs than this (MIOpen's default 3-D conv: 10**10) are
#: left to the parse fuzz: PyTorch would take seconds to run them on a CI machine.
DRIVER_FLOPS = 10**9
#: How the driver reports an exception that is not a BOO error: a bug, wherever it comes from.
NOT_BOO_ERROR = re.compile(r"(error|ERROR)[^\n]*?: [A-Z][A-Za-z]*(Error|Exception|Interrupt): ")


def _settings(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


def _one_line(command: str | list[str], prefix: str = "") -> str:
    """A fuzzed command as one line of a commands file (line breaks inside it become spaces),
    ``prefix`` inserted after its base argument."""
    base, _, rest = (command if isinstance(command, str) else " ".join(command)).partition(" ")
    return " ".join(" ".join((base, prefix, rest)).splitlines()).strip()


def small_sizes(entry: OpEntry, small: int) -> str:
    """Flags setting every size of ``entry`` (a KERNEL flag of at least 1) whose default is
    above ``small`` to ``small``: MIOpen's defaults (a batch of 100, 32x32 images) make
    kernels that take PyTorch a while. The fuzzed flags after them still override them."""
    return " ".join(f"--{f.long} {small}" for f in entry.spec.parser.flags
                    if f.kind is FlagKind.KERNEL and isinstance(f.convert, Integer) and f.convert.minimum >= 1
                    and isinstance(f.default, int) and f.default > small)


def run_driver(lines: list[str], commands_file: Path) -> tuple[int, str, str]:
    commands_file.write_text("".join(line + "\n" for line in lines))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["driver", "--commands-file", str(commands_file), "--backend", "torch", "--iter", "1",
                       "--warmup", "0"])
    return status, out.getvalue(), err.getvalue()


def _cheap(line: str) -> bool:
    """Whether the line is refused, or its kernels are small enough to run here."""
    try:
        signatures = BooOpRegistry.parse_signatures(line)
    except BooError:
        return True
    return sum(s.flops for s in signatures) <= DRIVER_FLOPS


def fuzz_driver(entry: OpEntry, batches: int, commands_file: Path) -> collections.Counter:
    """``boo driver`` (torch backend: nothing to compile) on batches of fuzzed commands.

    Every batch must run to its end: no traceback, exit status 0 or 1, a block for every
    distinct command, and the summary line; no error that is not a BOO error; a command
    that parses runs its modes."""
    counts: collections.Counter = collections.Counter()
    prefix = small_sizes(entry, 6)

    @_settings(batches)
    @given(st.lists(fuzz.commands(entry, small=6, large=False), min_size=1, max_size=BATCH))
    def check(commands):
        lines = [line for line in (_one_line(c, prefix) for c in commands) if _cheap(line)]
        counts["too big to run here"] += len(commands) - len(lines)
        if not lines:
            return
        status, out, err = run_driver(lines, commands_file)
        assert "Traceback" not in out + err, out + err
        assert not NOT_BOO_ERROR.search(out), out
        assert status in (0, 1), (status, err)
        expected = collect_commands([], commands_file)
        noun = "command" if len(expected) == 1 else "commands"
        assert f"\nsummary: {len(expected)} {noun}, " in out, out
        for command in expected:
            assert f"\n{command.text}\n" in out, f"no block for {command.text!r}:\n{out}"
            error = f"  error ({command.source}): "
            counts["refused" if error in out else "ran"] += 1

    check()
    return counts


@pytest.mark.parametrize("entry", OPS, ids=[e.name for e in OPS])
def test_parse_command_fuzz(entry):
    counts = fuzz.fuzz_commands(entry, PARSE_EXAMPLES)
    print(f"parse fuzz, {entry.name}: {dict(counts)}")  # shown with pytest -s
    assert sum(counts.values()) >= PARSE_EXAMPLES
    # Both outcomes are exercised: commands that parse (their signatures checked) and refusals.
    assert counts[fuzz.PARSED] >= PARSE_EXAMPLES // 10 and counts[fuzz.REFUSED] >= PARSE_EXAMPLES // 10, counts


@pytest.mark.parametrize("entry", OPS, ids=[e.name for e in OPS])
def test_boo_driver_fuzz(entry, tmp_path):
    counts = fuzz_driver(entry, DRIVER_BATCHES, tmp_path / "commands.txt")
    print(f"driver fuzz, {entry.name}: {dict(counts)}")
    total = counts["ran"] + counts["refused"]
    assert total >= 2 * DRIVER_BATCHES and counts["ran"] >= total // 10 and counts["refused"] >= total // 10, counts


@pytest.mark.slow
@pytest.mark.parametrize("entry", OPS, ids=[e.name for e in OPS])
def test_parse_command_fuzz_long(entry):
    counts = fuzz.fuzz_commands(entry, SLOW_PARSE_EXAMPLES)
    print(f"parse fuzz (slow), {entry.name}: {dict(counts)}")
    assert counts[fuzz.PARSED] >= SLOW_PARSE_EXAMPLES // 10, counts


@pytest.mark.slow
@pytest.mark.parametrize("entry", OPS, ids=[e.name for e in OPS])
def test_boo_driver_fuzz_long(entry, tmp_path):
    counts = fuzz_driver(entry, SLOW_DRIVER_BATCHES, tmp_path / "commands.txt")
    print(f"driver fuzz (slow), {entry.name}: {dict(counts)}")
    assert counts["ran"] >= (counts["ran"] + counts["refused"]) // 10, counts


def test_every_installed_op_is_fuzzed():
    assert {e.name for e in OPS} >= {"conv", "layernorm", "matmul", "softmax"}
    assert all(e.spec.parser.flags for e in OPS)
