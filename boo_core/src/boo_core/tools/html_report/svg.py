"""SVG building blocks: escaped elements, a log scale, and number formatting."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape


def attrs(**values: object) -> str:
    """``key="value"`` pairs, escaped; ``class_`` is written ``class``, ``_`` in names ``-``."""
    parts = []
    for key, value in values.items():
        if value is None:
            continue
        name = key.rstrip("_").replace("_", "-")
        if isinstance(value, float):
            value = f"{value:.2f}"
        parts.append(f'{name}="{escape(str(value))}"')
    return " ".join(parts)


def tag(name: str, content: str = "", **values: object) -> str:
    """An element; ``content`` is inserted as is (escape text with :func:`text`)."""
    return f"<{name} {attrs(**values)}>{content}</{name}>"


def text(value: str) -> str:
    """Text content, escaped."""
    return escape(value, quote=False)


def title(value: str) -> str:
    """A tooltip: the ``<title>`` child a browser shows on hover."""
    return f"<title>{text(value)}</title>"


@dataclass(frozen=True)
class LogScale:
    """Maps ``[lo, hi]`` (positive, log-spaced) onto pixels ``[start, end]`` (end < start flips it)."""

    lo: float
    hi: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        span = math.log10(self.hi) - math.log10(self.lo)
        return self.start + (math.log10(value) - math.log10(self.lo)) / span * (self.end - self.start)

    def decades(self) -> list[float]:
        """The powers of ten in ``[lo, hi]``."""
        first, last = math.ceil(math.log10(self.lo) - 1e-9), math.floor(math.log10(self.hi) + 1e-9)
        return [10.0 ** e for e in range(first, last + 1)]

    def ticks(self) -> list[float]:
        """Decades; 1-2-5 steps when fewer than two decades fall in the range."""
        decades = self.decades()
        if len(decades) >= 2:
            return decades
        first = math.floor(math.log10(self.lo))
        steps = [m * 10.0 ** e for e in range(first, first + 3) for m in (1, 2, 5)]
        return [v for v in steps if self.lo * (1 - 1e-9) <= v <= self.hi * (1 + 1e-9)]

    @classmethod
    def padded(cls, values: list[float], start: float, end: float, factor: float = 1.6,
               min_span: float = 10.0) -> LogScale:
        """A scale from ``min / factor`` to ``max * factor``, widened about its centre to ``min_span``."""
        lo, hi = min(values) / factor, max(values) * factor
        if hi / lo < min_span:
            centre = math.sqrt(lo * hi)
            lo, hi = centre / math.sqrt(min_span), centre * math.sqrt(min_span)
        return cls(lo, hi, start, end)

    @classmethod
    def covering(cls, values: list[float], start: float, end: float, pad_below: bool = False) -> LogScale:
        """A scale from the decade at or below the smallest value to the one at or above the largest.

        ``pad_below``: one decade lower when the smallest value is itself a power of ten (a bar
        drawn from ``lo`` then never has zero length).
        """
        low, high = min(values), max(values)
        lo, hi = 10.0 ** math.floor(math.log10(low)), 10.0 ** math.ceil(math.log10(high))
        if pad_below and math.isclose(lo, low):
            lo /= 10
        if math.isclose(lo, hi):
            lo, hi = lo / 10, hi * 10
        return cls(lo, hi, start, end)


_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"))


def si(value: float, unit: str, digits: int = 3) -> str:
    """``value`` with an SI prefix and ``digits`` significant digits: ``si(2.5e12, "FLOP/s")``."""
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def duration(us: float) -> str:
    """A time given in microseconds, in µs, ms or s."""
    if us >= 1e6:
        return f"{us / 1e6:.3g} s"
    if us >= 1e3:
        return f"{us / 1e3:.3g} ms"
    return f"{us:.3g} µs"


def ratio(value: float) -> str:
    """``3.2×``, ``310×``, ``0.52×``."""
    return f"{value:.3g}×" if value < 100 else f"{value:.0f}×"
