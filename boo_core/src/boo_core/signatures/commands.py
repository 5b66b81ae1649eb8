"""Commands for the ``boo`` tools: from the command line or a commands file.

A commands file holds one MIOpenDriver-style command per line. Blank lines and lines whose
first non-blank character is ``#`` are skipped; MIOpen log prefixes
(``MIOpen(HIP): Command [LogCmdConvolution] ./bin/MIOpenDriver``) are stripped when a command
is parsed. A ``.tsv`` file is tab-separated: its first row (after comments) is a header,
the column named ``command`` holds the commands, and other columns are ignored.

Extra arguments given to a tool with a commands file are appended to every command, so by
MIOpenDriver's last-value-wins rule ``--iter 5`` overrides each line's own ``--iter``.

A command that appears again (the same tokens once prefixes are stripped) runs once: the
first occurrence keeps its place and lists where the copies were.
"""

from __future__ import annotations

import csv
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BooError, CommandError
from ..files import MAX_COMMANDS_BYTES, FileRefused, read_text
from .installed import installed_ops
from .parser import ParsedCommand, tokenize

#: Name of the column that holds the commands in a ``.tsv`` commands file.
TSV_COMMAND_COLUMN = "command"


class CommandFileError(BooError):
    """A commands file cannot be read: missing, or a ``.tsv`` without a ``command`` column."""


@dataclass
class Command:
    """One command to run, and where it came from."""

    text: str  # as written, extra arguments appended
    source: str  # "FILE:LINE", or "command line"
    duplicates: list[str] = field(default_factory=list)  # sources of later copies, which do not run

    def tokens(self) -> list[str]:
        """The command split into tokens, prefixes stripped (an unclosed quote is a
        :class:`~boo_core.errors.CommandError`)."""
        return tokenize(self.text)

    def parse(self) -> ParsedCommand:
        """Parse with the installed ops (raises :class:`~boo_core.errors.CommandError`)."""
        return installed_ops().parse(self.tokens())


def collect_commands(arguments: Sequence[str], commands_file: str | Path | None = None) -> list[Command]:
    """The commands a tool runs.

    Without ``commands_file``, ``arguments`` are one command; a single argument is taken as
    the whole command line (a quoted MIOpen log line, say). With it, every command of the
    file gets ``arguments`` appended. A ``--`` among the arguments (which a tool's own
    option parser leaves in place) is dropped.
    """
    arguments = list(arguments)
    if "--" in arguments:
        arguments.remove("--")
    if commands_file is None:
        if not arguments:
            return []
        return [Command(arguments[0] if len(arguments) == 1 else shlex.join(arguments), "command line")]
    extra = f" {shlex.join(arguments)}" if arguments else ""
    return deduplicate([Command(text + extra, source) for source, text in read_command_file(commands_file)])


def read_command_file(path: str | Path) -> list[tuple[str, str]]:
    """``(source, command)`` pairs of a commands file, ``source`` being ``FILE:LINE``."""
    path = Path(path)
    try:
        content = read_text(path, MAX_COMMANDS_BYTES, what="commands file")
    except FileRefused as e:  # a FIFO, a device, a directory, too large, not UTF-8: it says which
        raise CommandFileError(str(e)) from None
    except OSError as e:
        raise CommandFileError(f"cannot read commands file {path}: {e.strerror or e}") from None
    if path.suffix.lower() == ".tsv":
        return _read_tsv(path, content)
    return [(f"{path}:{number}", line.strip()) for number, line in enumerate(content.splitlines(), 1)
            if _is_command(line)]


def _is_command(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _read_tsv(path: Path, content: str) -> list[tuple[str, str]]:
    rows = [(number, line) for number, line in enumerate(content.splitlines(), 1) if _is_command(line)]
    if not rows:
        return []
    (header_line, header), body = rows[0], rows[1:]
    columns = [name.strip().lower() for name in _cells(header)]
    if TSV_COMMAND_COLUMN not in columns:
        raise CommandFileError(
            f"{path}:{header_line}: the first row of a .tsv commands file must be a header with a "
            f"'{TSV_COMMAND_COLUMN}' column (found: {', '.join(repr(c) for c in columns)})")
    index = columns.index(TSV_COMMAND_COLUMN)
    commands = []
    for number, line in body:
        cells = _cells(line)
        text = cells[index].strip() if index < len(cells) else ""
        if text:
            commands.append((f"{path}:{number}", text))
    return commands


def _cells(line: str) -> list[str]:
    return next(csv.reader([line], delimiter="\t"))


def deduplicate(commands: Sequence[Command]) -> list[Command]:
    """Keep the first of identical commands (same tokens), noting where the others were."""
    first: dict[tuple[str, ...] | str, Command] = {}
    for command in commands:
        try:
            key: tuple[str, ...] | str = tuple(command.tokens())
        except CommandError:
            key = command.text  # reported when it runs
        if key in first:
            first[key].duplicates.append(command.source)
        else:
            first[key] = command
    return list(first.values())
