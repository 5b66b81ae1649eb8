"""MIOpenDriver-style command parsing: tokenizing, flag tables, strict values.

An op's parser subclasses :class:`CommandParser`, lists its flags as :class:`Flag` rows
(short letter, long name, type, MIOpen default) and implements :meth:`CommandParser.build`,
which turns parsed flag values into signatures. Everything MIOpenDriver accepts is accepted
with its meaning; what BOO cannot honour is refused with an error that names the flag.

Accepted forms: ``--long value``, ``--long=value``, ``-x value``. Every flag takes exactly
one value (MIOpenDriver has no boolean flags); a repeated flag's last value wins, as in
MIOpenDriver, which also lets extra arguments appended to a command override it.
"""

from __future__ import annotations

import abc
import enum
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from .errors import CommandError, UnsupportedError

if TYPE_CHECKING:
    from .signature import Signature


class FlagKind(enum.Enum):
    KERNEL = "kernel"  # shapes the kernel: part of the signature
    RUN = "run"  # read by the tools (iterations, timing, verification), never by the kernel
    REFUSED = "refused"  # accepted only at its default value: BOO cannot honour other values


@dataclass(frozen=True)
class Flag:
    """One row of an op's flag table."""

    long: str
    short: str | None
    default: Any
    convert: Callable[[str], Any] = int
    help: str = ""
    kind: FlagKind = FlagKind.KERNEL
    refusal: str = ""  # for REFUSED flags: why BOO cannot honour a non-default value

    @property
    def label(self) -> str:
        """How errors name the flag: ``-n/--batchsize``."""
        return f"-{self.short}/--{self.long}" if self.short else f"--{self.long}"


# -- value converters: raise ValueError with a short reason -----------------------------------

_INT = re.compile(r"^[+-]?\d+$")


def integer(text: str) -> int:
    """An integer value, strictly (MIOpenDriver's atoi would read "1.5" as 1)."""
    if not _INT.match(text.strip()):
        raise ValueError("expected an integer")
    return int(text)


def number(text: str) -> float:
    """A floating-point value."""
    try:
        return float(text)
    except ValueError:
        raise ValueError("expected a number") from None


def text(value: str) -> str:
    return value


def upper(value: str) -> str:
    """A string value, upper-cased (MIOpen layouts: ``nhwc`` means ``NHWC``)."""
    return value.upper()


def one_of(*choices: str, case: Callable[[str], str] = str) -> Callable[[str], str]:
    """A converter accepting only ``choices`` (after applying ``case``)."""

    def convert(value: str) -> str:
        value = case(value)
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value

    return convert


# -- tokenizing ---------------------------------------------------------------------------------

_LOG_PREFIX = re.compile(r"^\s*MIOpen(\([^)]*\))?:\s+Command\s+\[[^\]]*\]\s*")
_PROGRAM = re.compile(r"^\s*(\S*[\\/])?MIOpenDriver(\.exe)?(\s+|$)")


def tokenize(command: str | Sequence[str]) -> list[str]:
    """Split a command and strip what precedes the base argument.

    Removes an MIOpen log prefix (``MIOpen(HIP): Command [LogCmdConvolution]``) and a
    leading program token ending in ``MIOpenDriver`` or ``MIOpenDriver.exe`` (Windows paths
    with backslashes included).
    """
    if isinstance(command, str):
        return shlex.split(_strip_prefixes(command))
    tokens = [str(token) for token in command]
    joined = " ".join(tokens)
    dropped = len(joined.split()) - len(_strip_prefixes(joined).split())
    return tokens[dropped:]


def _strip_prefixes(command: str) -> str:
    command = _LOG_PREFIX.sub("", command, count=1)
    return _PROGRAM.sub("", command, count=1)


def format_command(base: str, items: Iterable[tuple[Flag, Any]]) -> str:
    """Write ``base`` and flag values as a command: a flag's short letter where it has an
    alphanumeric one, its long name otherwise (``-!`` or ``-$`` would trip up a shell)."""
    parts = [base]
    for flag, value in items:
        parts.append(f"-{flag.short}" if flag.short and flag.short.isalnum() else f"--{flag.long}")
        parts.append(shlex.quote(str(value)))
    return " ".join(parts)


# -- parsing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedFlags:
    """Flag values by long name (defaults filled in) and which flags the command gave."""

    values: Mapping[str, Any]
    given: frozenset[str]
    table: Mapping[str, Flag]

    def __getitem__(self, long: str) -> Any:
        return self.values[long]

    def label(self, long: str) -> str:
        return self.table[long].label

    def require(self, long: str, ok: bool, message: str) -> None:
        """Raise :class:`CommandError` naming the flag and its value unless ``ok``:
        ``flags.require("batchsize", flags["batchsize"] >= 1, "must be at least 1")`` raises
        ``flag -n/--batchsize 0 must be at least 1``."""
        if not ok:
            label = self.label(long)
            raise CommandError(f"flag {label} {self.values[long]} {message}", flag=label)


@dataclass(frozen=True)
class ParsedCommand:
    """A parsed command: its op, base argument, one signature per mode, and run options."""

    op: str
    base: str
    signatures: tuple[Signature, ...]
    run_options: Mapping[str, Any] = field(default_factory=dict)


class CommandParser(abc.ABC):
    """Parser for one op's commands. Subclasses set :attr:`flags` and implement :meth:`build`."""

    #: The op's flag table, in the order ``--help`` shows it.
    flags: ClassVar[Sequence[Flag]] = ()

    def __init__(self) -> None:
        self._by_long: dict[str, Flag] = {}
        self._by_short: dict[str, Flag] = {}
        for flag in self.flags:
            if flag.long in self._by_long:
                raise ValueError(f"{type(self).__name__}: flag --{flag.long} listed twice")
            self._by_long[flag.long] = flag
            if flag.short is not None:
                if len(flag.short) != 1 or flag.short == "h":
                    raise ValueError(f"{type(self).__name__}: bad short flag {flag.short!r}")
                if flag.short in self._by_short:
                    raise ValueError(f"{type(self).__name__}: short flag -{flag.short} listed twice")
                self._by_short[flag.short] = flag

    def flag(self, long: str) -> Flag:
        """The table row for a long name."""
        return self._by_long[long]

    @abc.abstractmethod
    def build(self, flags: ParsedFlags, *, base: str, dtype: torch.dtype) -> list[Signature]:
        """Signatures for a parsed command, one per mode it runs.

        Raise :class:`~boo_core.errors.CommandError` for an inconsistent value and
        :class:`~boo_core.errors.UnsupportedError` for a valid request BOO cannot serve, each
        naming the flag (``flags.label("pad_h")``).
        """

    def parse(self, args: Sequence[str], *, op: str, base: str, dtype: torch.dtype) -> ParsedCommand:
        """Parse the flags that follow the base argument into a :class:`ParsedCommand`."""
        parsed = self.parse_flags(args)
        signatures = self.build(parsed, base=base, dtype=dtype)
        run_options = {name: parsed[name] for name, f in self._by_long.items() if f.kind is FlagKind.RUN}
        return ParsedCommand(op=op, base=base, signatures=tuple(signatures), run_options=run_options)

    def parse_flags(self, args: Sequence[str]) -> ParsedFlags:
        """Apply the flag table to ``args``: strict names, strict values, last value wins."""
        values = {f.long: f.default for f in self.flags}
        given: set[str] = set()
        i = 0
        while i < len(args):
            token = args[i]
            flag, inline = self._lookup(token)
            if inline is None:
                if i + 1 >= len(args):
                    raise CommandError(f"flag {flag.label} needs a value", flag=flag.label)
                raw = args[i + 1]
                i += 2
            else:
                raw = inline
                i += 1
            try:
                value = flag.convert(raw)
            except ValueError as e:
                if raw.startswith("-") and not _looks_numeric(raw):
                    raise CommandError(f"flag {flag.label} needs a value (got the flag {raw!r})",
                                       flag=flag.label) from None
                raise CommandError(f"bad value {raw!r} for flag {flag.label}: {e}", flag=flag.label) from None
            if flag.kind is FlagKind.REFUSED and value != flag.default:
                raise UnsupportedError(f"flag {flag.label} {raw} is not supported: {flag.refusal}",
                                       flag=flag.label)
            values[flag.long] = value
            given.add(flag.long)
        return ParsedFlags(values=values, given=frozenset(given), table=self._by_long)

    def _lookup(self, token: str) -> tuple[Flag, str | None]:
        if token.startswith("--") and len(token) > 2:
            name, eq, inline = token[2:].partition("=")
            flag = self._by_long.get(name)
            if flag is None:
                raise CommandError(f"unknown flag --{name}", flag=f"--{name}")
            return flag, inline if eq else None
        if token.startswith("-") and len(token) >= 2:
            letter, eq, inline = token[1], token[2:3] == "=", token[3:]
            if len(token) == 2 or eq:
                flag = self._by_short.get(letter)
                if flag is None:
                    raise CommandError(f"unknown flag -{letter}", flag=f"-{letter}")
                return flag, inline if eq else None
            hint = f"; did you mean --{token[1:].split('=')[0]}?" if token[1:].split("=")[0] in self._by_long else ""
            raise CommandError(f"unknown flag {token} (short flags are one letter{hint})", flag=token)
        raise CommandError(f"unexpected argument {token!r}: expected a flag", flag=token)


def _looks_numeric(raw: str) -> bool:
    try:
        float(raw)
    except ValueError:
        return False
    return True
