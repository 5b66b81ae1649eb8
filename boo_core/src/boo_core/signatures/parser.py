"""MIOpenDriver-style command parsing: tokenizing, strict flag values, signatures.

An op's parser is a :class:`CommandParser` with a flag table (:class:`~boo_core.Flag`
rows, see :mod:`boo_core.signatures.flags`). Where every kernel flag names the signature
field it sets, the parser needs nothing else: :meth:`CommandParser.build` makes one
signature per ``-F`` direction and :meth:`CommandParser.format` writes the command back.
An op with flags that do not map one to one (a convolution's per-axis flags) overrides
them. Everything MIOpenDriver accepts is accepted with its meaning; what BOO cannot honour
is refused with an error that names the flag.

Accepted forms: ``--long value``, ``--long=value``, ``-x value``. Every flag takes exactly
one value (MIOpenDriver has no boolean flags); a repeated flag's last value wins, as in
MIOpenDriver, which also lets extra arguments appended to a command override it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from ..errors import CommandError, UnsupportedError
from .dtypes import DTYPE_TO_SUFFIX, short_name
from .flags import Directions, Flag, FlagKind, OutOfRange
from .signature import tensor_size_problem

if TYPE_CHECKING:
    from .signature import Signature

#: Longest command BOO parses (a longer one is refused before tokenizing).
MAX_COMMAND_LENGTH = 10_000

# -- tokenizing ---------------------------------------------------------------------------------

_LOG_PREFIX = re.compile(r"^\s*MIOpen(\([^)]*\))?:\s+Command\s+\[[^\]]*\]\s*")
_PROGRAM = re.compile(r"^\s*(\S*[\\/])?MIOpenDriver(\.exe)?(\s+|$)")


def tokenize(command: str | Sequence[str]) -> list[str]:
    """Split a command and strip what precedes the base argument.

    Removes an MIOpen log prefix (``MIOpen(HIP): Command [LogCmdConvolution]``) and a
    leading program token ending in ``MIOpenDriver`` or ``MIOpenDriver.exe`` (Windows paths
    with backslashes included). An unclosed quote is a :class:`CommandError`.
    """
    if isinstance(command, str):
        if len(command) > MAX_COMMAND_LENGTH:
            raise CommandError(f"command of {len(command)} characters: at most {MAX_COMMAND_LENGTH} are accepted")
        try:
            return shlex.split(_strip_prefixes(command))
        except ValueError as e:
            raise CommandError(f"cannot split the command into arguments: {e}") from None
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
        parts.append(shlex.quote(flag.format(value)))
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
        ``flags.require("pad_h", pad < window, "must be smaller than the filter")`` raises
        ``flag -p/--pad_h 3 must be smaller than the filter``."""
        if not ok:
            label = self.label(long)
            raise CommandError(f"flag {label} {self.table[long].format(self.values[long])} {message}", flag=label)


@dataclass(frozen=True)
class ParsedCommand:
    """A parsed command: its op, base argument, one signature per mode, and run options."""

    op: str
    base: str
    signatures: tuple[Signature, ...]
    run_options: Mapping[str, Any] = field(default_factory=dict)


class CommandParser:
    """Parser for one op's commands.

    Declare :attr:`flags`; for the default :meth:`build` also :attr:`signature_class`
    (every KERNEL flag naming its ``field``), :attr:`dtypes` and, for an op with several
    modes, :attr:`directions` (the signature then has a ``mode`` field). Override
    :meth:`check` for rules that involve several flags, or :meth:`build` and
    :meth:`format` for flags that do not map one to one onto fields.
    """

    #: The op's flag table, in the order ``--help`` shows it.
    flags: ClassVar[Sequence[Flag]] = ()
    #: The signature class the default :meth:`build` makes.
    signature_class: ClassVar[type | None] = None
    #: Element types the base argument may select (``conv`` + ``bfp16``...).
    dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float32, torch.float16, torch.bfloat16)
    #: Base-argument suffixes of this op's own beside the common ones (``""``, ``fp32``,
    #: ``fp16``, ``bfp16``...), each with the element type it selects: MIOpen's
    #: ``bnormfp16fp32`` is ``bnorm`` + ``fp16fp32``, fp16 data with fp32 statistics.
    suffixes: ClassVar[Mapping[str, torch.dtype]] = {}
    #: ``-F``: the modes a command runs (None: one signature, no mode).
    directions: ClassVar[Directions | None] = None

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
        if self.directions is not None and "forw" not in self._by_long:
            name = type(self).__name__
            raise ValueError(f"{name}: directions are read from the -F/--forw flag, which flags lacks; add "
                             f"{name}.directions.flag() to flags (or set directions = None for an op of one mode)")

    def flag(self, long: str) -> Flag:
        """The table row for a long name."""
        return self._by_long[long]

    # -- signatures ---------------------------------------------------------------------------

    def check(self, flags: ParsedFlags) -> None:
        """Rules that involve several flags (override; use ``flags.require``)."""

    def build(self, flags: ParsedFlags, *, base: str, dtype: torch.dtype) -> list[Signature]:
        """Signatures for a parsed command, one per mode it runs.

        The default makes ``signature_class(**fields, dtype=dtype[, mode=mode])`` from the
        flags that name a field. Raise :class:`~boo_core.errors.CommandError` for an
        inconsistent value and :class:`~boo_core.errors.UnsupportedError` for a valid
        request BOO cannot serve, each naming the flag (``flags.label("pad_h")``).
        """
        if self.signature_class is None:
            raise NotImplementedError(f"{type(self).__name__}: set signature_class or override build()")
        self.check(flags)
        values = {f.field: flags[f.long] for f in self.flags if f.field}
        signatures = []
        for mode in self.modes(flags):
            extra = {"mode": mode} if mode is not None else {}
            try:
                signatures.append(self.signature_class(**values, dtype=dtype, **extra))
            except (ValueError, TypeError) as e:
                if isinstance(e, (CommandError, UnsupportedError)):
                    raise
                named = [f.label for f in self.flags if f.field and re.search(rf"\b{re.escape(f.field)}\b", str(e))]
                raise CommandError(str(e) + (f" (flag {', '.join(named)})" if named else ""),
                                   flag=named[0] if named else None) from None
        return signatures

    def modes(self, flags: ParsedFlags) -> list[str | None]:
        """The modes a command runs: from ``-F`` and :attr:`directions` (``[None]`` for an
        op without modes). Override for a rule other than a bitmask."""
        if self.directions is None:
            return [None]
        forw = self.flag("forw")
        try:
            return list(self.directions.modes(flags["forw"]))
        except OutOfRange as e:
            raise CommandError(f"flag {forw.label} {flags['forw']} {e}", flag=forw.label) from None

    def format(self, signature: Signature, keyword: str) -> str:
        """The command for ``signature`` (``keyword`` + the dtype's suffix, then every flag
        that names a field, then ``-F`` for its mode)."""
        items = [(f, getattr(signature, f.field)) for f in self.flags if f.field]
        items = [(f, value) for f, value in items if not (f.omit_default and value == f.default)]
        if self.directions is not None:
            items.append((self.flag("forw"), self.directions.value(signature.mode)))
        dtype = getattr(signature, "dtype", torch.float32)
        return format_command(keyword + DTYPE_TO_SUFFIX[dtype], items)

    def parse(self, args: Sequence[str], *, op: str, base: str, dtype: torch.dtype) -> ParsedCommand:
        """Parse the flags that follow the base argument into a :class:`ParsedCommand`."""
        parsed = self.parse_flags(args)
        if dtype not in self.dtypes:
            allowed = ", ".join(short_name(d) for d in self.dtypes)
            raise UnsupportedError(f"base argument {base!r}: {op} does not support {short_name(dtype)} "
                                   f"(supported: {allowed})")
        signatures = self.build(parsed, base=base, dtype=dtype)
        for signature in signatures:
            problem = tensor_size_problem(signature)
            if problem:
                raise CommandError(f"{signature.func_name}: {problem}")
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
            except OutOfRange as e:
                raise CommandError(f"flag {flag.label} {_shown(raw)} {e}", flag=flag.label) from None
            except ValueError as e:
                if raw.startswith("-") and not _looks_numeric(raw):
                    raise CommandError(f"flag {flag.label} needs a value (got the flag {raw!r})",
                                       flag=flag.label) from None
                raise CommandError(f"bad value {_shown(raw)!r} for flag {flag.label}: {e}", flag=flag.label) from None
            if flag.kind is FlagKind.REFUSED and value != flag.default:
                raise UnsupportedError(f"flag {flag.label} {_shown(raw)} is not supported: {flag.refusal}",
                                       flag=flag.label)
            values[flag.long] = value
            given.add(flag.long)
        return ParsedFlags(values=values, given=frozenset(given), table=self._by_long)

    def _lookup(self, token: str) -> tuple[Flag, str | None]:
        if token.startswith("--") and len(token) > 2:
            name, eq, inline = token[2:].partition("=")
            flag = self._by_long.get(name)
            if flag is None:
                raise CommandError(f"unknown flag --{_shown(name)}", flag=f"--{_shown(name)}")
            return flag, inline if eq else None
        if token.startswith("-") and len(token) >= 2:
            letter, eq, inline = token[1], token[2:3] == "=", token[3:]
            if len(token) == 2 or eq:
                flag = self._by_short.get(letter)
                if flag is None:
                    raise CommandError(f"unknown flag -{letter}", flag=f"-{letter}")
                return flag, inline if eq else None
            stem = token[1:].split("=")[0]
            hint = f"; did you mean --{stem}?" if stem in self._by_long else ""
            raise CommandError(f"unknown flag {_shown(token)} (short flags are one letter{hint})", flag=_shown(token))
        raise CommandError(f"unexpected argument {_shown(token)!r}: expected a flag", flag=_shown(token))

    # -- help ---------------------------------------------------------------------------------

    def help_lines(self) -> list[str]:
        """One line per flag: label, default, kind, help (what ``boo ops --flags`` prints)."""
        lines = []
        for flag in self.flags:
            default = flag.format(flag.default) if flag.default is not None else ""
            kind = {FlagKind.RUN: " [run]", FlagKind.REFUSED: " [default only]"}.get(flag.kind, "")
            lines.append(f"  {flag.label:<28} {default or '-':>10}  {flag.help}{kind}")
        return lines


def _shown(text: str) -> str:
    return text if len(text) <= 40 else text[:40] + "..."


def _looks_numeric(raw: str) -> bool:
    try:
        float(raw)
    except ValueError:
        return False
    return True
