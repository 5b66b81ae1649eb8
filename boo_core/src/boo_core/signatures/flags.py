"""Flag declarations: one :class:`Flag` per MIOpenDriver flag, from which parsing,
formatting and ``--help`` all derive.

A flag's *value type* converts both ways: text from a command into a value (strictly: a
bad text raises :class:`ValueError` with a short reason; a value out of the declared range
raises :class:`OutOfRange`), and a value back into the text a command writes. A flag that
shapes the kernel names the signature ``field`` it sets; the default
:class:`~boo_core.CommandParser` then builds signatures and writes commands with no
op-specific code. What every op repeats is here too: the tools' run flags
(:func:`run_flags`) and ``-F`` direction bitmasks (:class:`Directions`).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

#: Bounds of integer flag values: MIOpenDriver reads C ints, and IREE indexes with int64.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class OutOfRange(ValueError):
    """A well-formed value outside its flag's range (the message says which range)."""


class FlagKind(enum.Enum):
    KERNEL = "kernel"  # shapes the kernel: part of the signature
    RUN = "run"  # read by the tools (iterations, timing, verification), never by the kernel
    REFUSED = "refused"  # accepted only at its default value: BOO cannot honour other values


class ValueType(Protocol):
    """Converts a flag's text into its value and back."""

    def __call__(self, text: str) -> Any: ...

    def format(self, value: Any) -> str: ...


@dataclass(frozen=True)
class Flag:
    """One flag: long name, short letter (or None), MIOpen default (a value of its type),
    value type, help, kind, and the signature field it sets (KERNEL flags the default parser
    maps one to one). ``refusal`` says why a REFUSED flag accepts only its default.
    ``omit_default``: commands BOO writes leave the flag out at its default (for BOO's
    extensions, so that commands without them stay MIOpenDriver's)."""

    long: str
    short: str | None
    default: Any
    convert: Callable[[str], Any] = None  # type: ignore[assignment]  # set to integer() below
    help: str = ""
    kind: FlagKind = FlagKind.KERNEL
    refusal: str = ""
    field: str | None = None
    omit_default: bool = False

    def __post_init__(self) -> None:
        if self.convert is None:
            object.__setattr__(self, "convert", integer)

    @property
    def label(self) -> str:
        """How errors name the flag: ``-n/--batchsize``."""
        return f"-{self.short}/--{self.long}" if self.short else f"--{self.long}"

    def format(self, value: Any) -> str:
        """The text a command writes for ``value``."""
        formatter = getattr(self.convert, "format", None)
        return formatter(value) if formatter is not None else str(value)


# -- value types ----------------------------------------------------------------------------------

_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)", re.ASCII | re.I)
#: Whitespace a value may carry around it (ASCII only: no-break spaces are not blanks).
_BLANKS = " \t\r\n"
#: Longest integer text converted (more digits are out of range anyway; int() of thousands of
#: digits is slow and refused beyond 4300).
_MAX_DIGITS = 40


@dataclass(frozen=True)
class Integer:
    """An integer in ``[minimum, maximum]``, strictly: ASCII digits with an optional sign
    (MIOpenDriver's ``atoi`` would read "1.5" as 1; Python's ``int`` would read "١٢" as 12)."""

    minimum: int = -INT64_MAX
    maximum: int = INT64_MAX

    def __call__(self, text: str) -> int:
        text = text.strip(_BLANKS)
        if not _INT.fullmatch(text):
            raise ValueError("expected an integer")
        digits = text.lstrip("+-").lstrip("0") or "0"
        if len(digits) > _MAX_DIGITS:
            raise OutOfRange(self._too_small() if text.startswith("-") else f"must be at most {self.maximum}")
        value = -int(digits) if text.startswith("-") else int(digits)
        if value < self.minimum:
            raise OutOfRange(self._too_small())
        if value > self.maximum:
            raise OutOfRange(f"must be at most {self.maximum}")
        return value

    def _too_small(self) -> str:
        return {0: "must not be negative", 1: "must be at least 1"}.get(self.minimum,
                                                                          f"must be at least {self.minimum}")

    def format(self, value: int) -> str:
        return str(value)


#: Any integer that fits in int64.
integer = Integer()
#: Sizes, strides, dilations: 1 to 2**31-1 (MIOpenDriver reads them as C ints).
positive = Integer(1, INT32_MAX)
#: Paddings, and sizes where 0 means "absent": 0 to 2**31-1.
non_negative = Integer(0, INT32_MAX)


@dataclass(frozen=True)
class Switch:
    """0 or 1, as a bool."""

    def __call__(self, text: str) -> bool:
        value = integer(text)
        if value not in (0, 1):
            raise OutOfRange("must be 0 or 1")
        return bool(value)

    def format(self, value: bool) -> str:
        return str(int(value))


switch = Switch()


@dataclass(frozen=True)
class Number:
    """A finite floating-point value, written in ASCII decimal or exponent notation."""

    def __call__(self, text: str) -> float:
        text = text.strip(_BLANKS)
        if len(text) > 64 or not _NUMBER.fullmatch(text):
            raise ValueError("expected a number")
        value = float(text)
        if not math.isfinite(value):
            raise OutOfRange("must be finite")
        return value + 0.0  # -0.0 is 0.0

    def format(self, value: float) -> str:
        return repr(float(value))


number = Number()


@dataclass(frozen=True)
class Text:
    """Any string."""

    def __call__(self, text: str) -> str:
        return text

    def format(self, value: str) -> str:
        return value


text = Text()


@dataclass(frozen=True)
class OneOf:
    """One of ``choices`` (compared after ``case``: ``str.upper`` for layouts)."""

    choices: tuple[str, ...]
    case: Callable[[str], str] = str

    def __call__(self, value: str) -> str:
        value = self.case(value) if value.isascii() else value  # "ß".upper() is "SS"
        if value not in self.choices:
            raise ValueError(f"expected one of {', '.join(choice or repr(choice) for choice in self.choices)}")
        return value

    def format(self, value: str) -> str:
        return value


def one_of(*choices: str, case: Callable[[str], str] = str) -> OneOf:
    """A value type accepting only ``choices`` (after applying ``case``)."""
    return OneOf(tuple(choices), case)


def upper(value: str) -> str:
    """Upper-case a value (MIOpen layouts: ``nhwc`` means ``NHWC``)."""
    return value.upper()


@dataclass(frozen=True)
class Indexed:
    """An integer naming ``names[i]``: MIOpen's ``-a 2`` is ``names[2]``."""

    names: tuple[str, ...]

    def __call__(self, text: str) -> str:
        value = integer(text)
        if not 0 <= value < len(self.names):
            listed = [f"{i} ({name})" for i, name in enumerate(self.names)]
            raise OutOfRange(f"must be {', '.join(listed[:-1])} or {listed[-1]}" if len(listed) > 1
                             else f"must be {listed[0]}")
        return self.names[value]

    def format(self, value: str) -> str:
        return str(self.names.index(value))


def indexed(*names: str) -> Indexed:
    return Indexed(tuple(names))


@dataclass(frozen=True)
class OptionalChoice:
    """A choice where the empty text (the default) means None: ``--activation relu``."""

    inner: OneOf

    def __call__(self, text: str) -> str | None:
        return self.inner(text) if text != "" else None

    def format(self, value: str | None) -> str:
        return value or ""


def optional(*choices: str) -> OptionalChoice:
    return OptionalChoice(OneOf(tuple(choices)))


# -- what every op repeats ---------------------------------------------------------------------------


def run_flags(*, verify_default: int = 1, extra: Sequence[Flag] = ()) -> tuple[Flag, ...]:
    """MIOpenDriver's flags for its own run, which BOO's tools read (``-i``) or accept and
    ignore: iterations, timing, wall clock, verification. ``extra`` adds an op's own."""
    run = FlagKind.RUN
    return (
        Flag("iter", "i", 10, positive, "timed iterations", run),
        Flag("time", "t", 0, integer, "1: report kernel time (BOO always times)", run),
        Flag("wall", "w", 0, integer, "wall-clock timing (MIOpen option; BOO always times)", run),
        Flag("verify", "V", verify_default, integer, "1: check numerics against a reference "
             "(BOO: --verify-numerics, or boo numerics)", run),
        *extra,
    )


@dataclass(frozen=True)
class Directions:
    """``-F``: a bitmask of modes, ``-F 0`` meaning ``zero``.

    ``Directions({"fwd": 1, "bwd": 2}, zero=("fwd", "bwd"))`` reads ``-F 3`` as forward
    and backward, ``-F 2`` as backward alone, and refuses ``-F 4``.
    """

    bits: Mapping[str, int]
    zero: tuple[str, ...]

    def flag(self, default: int = 0, help: str = "") -> Flag:
        """The ``-F/--forw`` flag for these directions."""
        described = ", ".join(f"{bit} {mode}" for mode, bit in self.bits.items())
        return Flag("forw", "F", default, Integer(0, sum(self.bits.values())),
                    help or f"direction bitmask: {described}; 0: {', '.join(self.zero)}")

    def modes(self, forw: int) -> list[str]:
        """The modes ``-F forw`` runs, in declaration order."""
        if forw == 0:
            return list(self.zero)
        if forw & ~sum(self.bits.values()):
            raise OutOfRange(f"must be a bitmask of {', '.join(str(b) for b in self.bits.values())}")
        return [mode for mode, bit in self.bits.items() if forw & bit]

    def value(self, mode: str) -> int:
        """The ``-F`` value that runs ``mode`` alone."""
        return self.bits[mode]
