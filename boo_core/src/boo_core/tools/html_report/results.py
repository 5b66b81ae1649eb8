"""Reading result CSVs: ``boo tune --csv`` (one row per candidate per kernel) and
``boo driver --csv`` (one row per command mode per backend), told apart by their columns.

Each file becomes a :class:`Results`: its rows as read, and per kernel the times to chart
(:class:`Kernel` and its :class:`Timed` measurements), with what is suspicious about it.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ...errors import BooError
from ...files import MAX_CSV_BYTES, FileRefused, read_bytes
from ..report import TUNE_COLUMNS

__all__ = ["TUNE_COLUMNS", "Kernel", "Results", "ResultsFileError", "Timed", "baseline_row", "read_results"]

#: What the report needs of each kind (``boo tune`` writes TUNE_COLUMNS, ``boo driver`` the
#: DRIVER_COLUMNS of tools/report.py); other columns are shown when present.
TUNE_REQUIRED: tuple[str, ...] = ("func_name", "candidate", "verdict", "time_us", "winner", "flops", "bytes")
DRIVER_REQUIRED: tuple[str, ...] = ("func_name", "backend", "device", "status", "median_us", "flops", "bytes")

#: The op's first formulation, untuned: the baseline unless it failed (see :func:`baseline_row`).
DEFAULT_CANDIDATE = "default"

Kind = Literal["tune", "driver"]


class ResultsFileError(BooError, ValueError):
    """A results CSV cannot be read or is of neither kind; the message names the file."""


@dataclass(frozen=True)
class Timed:
    """One measured time of a kernel: a bar, and a point on the roofline.

    ``series`` groups points across kernels (``tuned``, ``default``, ``torch``, or a driver
    backend); ``ok`` is False for a wrong or failed run, shown flagged.
    """

    series: str
    label: str
    time_us: float | None
    ok: bool = True
    note: str = ""


@dataclass
class Kernel:
    """One kernel of a results file: its cost, its measured times, its rows."""

    name: str
    op: str = ""
    mode: str = ""
    device: str = ""
    target: str = ""
    flops: float | None = None
    bytes: float | None = None
    timed: list[Timed] = field(default_factory=list)
    rows: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: The reference of the ratios written next to the bars, and what a ratio means.
    reference: str = ""

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOP per byte moved."""
        if self.flops and self.bytes and self.flops > 0 and self.bytes > 0:
            return self.flops / self.bytes
        return None

    def get(self, series: str) -> Timed | None:
        return next((t for t in self.timed if t.series == series), None)


@dataclass
class Results:
    """One results file: its kind, rows and kernels, and the peaks it measured."""

    path: Path
    kind: Kind
    columns: list[str]
    rows: list[dict[str, str]]
    kernels: list[Kernel]
    peak_tflops: float | None = None
    peak_gbps: float | None = None


def achieved_flops(flops: float, time_us: float) -> float:
    """FLOP/s of a kernel of ``flops`` that takes ``time_us`` microseconds."""
    return flops / (time_us * 1e-6)


def detect_kind(path: Path, columns: Sequence[str]) -> Kind:
    """``tune`` or ``driver`` from a header; a header of neither kind is a ResultsFileError."""
    present = set(columns)
    missing = {kind: [c for c in required if c not in present]
               for kind, required in (("tune", TUNE_REQUIRED), ("driver", DRIVER_REQUIRED))}
    for kind in ("tune", "driver"):
        if not missing[kind]:
            return kind  # type: ignore[return-value]
    # Name the missing columns of the kind the file resembles most.
    kind = "tune" if len(missing["tune"]) <= len(missing["driver"]) else "driver"
    other = "driver" if kind == "tune" else "tune"
    raise ResultsFileError(
        f"{path}: neither a tune CSV nor a driver CSV: missing {kind} column(s) {', '.join(missing[kind])} "
        f"(or {other} column(s) {', '.join(missing[other])})")


def read_results(path: str | Path) -> Results:
    """Read a ``boo tune`` or ``boo driver`` CSV; ResultsFileError names what is wrong with it."""
    path = Path(path)
    try:
        # Checked before reading: a FIFO or /dev/zero would hang the report, a huge file exhaust memory.
        text = read_bytes(path, MAX_CSV_BYTES, what="results CSV").decode("utf-8-sig")  # a spreadsheet's BOM: dropped
        reader = csv.DictReader(io.StringIO(text, newline=""))
        columns = list(reader.fieldnames or [])
        rows = [{k: (v or "").strip() for k, v in row.items() if k is not None} for row in reader]
    except FileNotFoundError:
        raise ResultsFileError(f"{path}: no such file") from None
    except FileRefused as e:  # its message names the file and why
        raise ResultsFileError(str(e)) from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ResultsFileError(f"{path}: cannot read it as CSV: {e}") from None
    if not columns:
        raise ResultsFileError(f"{path}: empty file (expected a boo tune or boo driver CSV)")
    kind = detect_kind(path, columns)
    if not rows:
        raise ResultsFileError(f"{path}: holds a {kind} header but no rows")
    if kind == "tune":
        kernels = _tune_kernels(path, rows)
        peak_tflops = _first_number(path, rows, "peak_tflops")
        peak_gbps = _first_number(path, rows, "peak_gbps")
    else:
        kernels, peak_tflops, peak_gbps = _driver_kernels(path, rows), None, None
    return Results(path, kind, columns, rows, kernels, peak_tflops, peak_gbps)


def number(path: Path, line: int, row: dict[str, str], column: str) -> float | None:
    """The number in ``column`` (None when empty); anything else names file, line and column."""
    text = row.get(column, "")
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ResultsFileError(f"{path}:{line}: column {column} holds {text!r}, not a number") from None
    return value if math.isfinite(value) else None


def _first_number(path: Path, rows: list[dict[str, str]], column: str) -> float | None:
    for line, row in enumerate(rows, start=2):
        value = number(path, line, row, column)
        if value:
            return value
    return None


def _kernel_for(kernels: dict[tuple[str, ...], Kernel], key: tuple[str, ...], row: dict[str, str]) -> Kernel:
    if key not in kernels:
        kernels[key] = Kernel(name=row["func_name"] or row.get("command", "") or "?", op=row.get("op", ""),
                              mode=row.get("mode", ""), device=row.get("device", ""), target=row.get("target", ""))
    return kernels[key]


def _cost(path: Path, line: int, kernel: Kernel, row: dict[str, str]) -> None:
    if kernel.flops is None:
        kernel.flops = number(path, line, row, "flops")
    if kernel.bytes is None:
        kernel.bytes = number(path, line, row, "bytes")


def is_wrong(verdict: str) -> bool:
    """A tune verdict saying the candidate computed wrong results (``fail: ...``)."""
    return verdict.lower().startswith("fail")


def baseline_row(rows: list[dict[str, str]]) -> dict[str, str] | None:
    """The candidate an untuned launch uses, which the tune's speed-ups are relative to.

    ``boo tune`` marks it in the ``baseline`` column. A CSV written before that column: the
    first plain candidate (no config, no flags) that passed with ``speedup`` 1, which two
    candidates of nearly equal times make ambiguous. Without either (nothing passed, no
    speed-ups written), the candidate named ``default``.
    """
    marked = next((r for r in rows if r.get("baseline") == "1"), None)
    if marked is not None:
        return marked
    if not any(r.get("baseline") for r in rows):  # an older CSV: found from the speed-ups
        for row in rows:
            speedup = row.get("speedup", "")
            if (row["verdict"] == "pass" and not row.get("config") and not row.get("flags") and speedup
                    and _is_one(speedup)):
                return row
    return next((r for r in rows if r["candidate"] == DEFAULT_CANDIDATE), None)


def _is_one(text: str) -> bool:
    try:
        return abs(float(text) - 1) < 1e-3
    except ValueError:
        return False


def _tune_kernels(path: Path, rows: list[dict[str, str]]) -> list[Kernel]:
    kernels: dict[tuple[str, ...], Kernel] = {}
    times: dict[tuple[str, ...], dict[str, float | None]] = {}  # per kernel, per candidate
    torch_times: dict[tuple[str, ...], float] = {}
    for line, row in enumerate(rows, start=2):
        key = (row["func_name"], row.get("device", ""), row.get("target", ""))
        kernel = _kernel_for(kernels, key, row)
        kernel.rows.append(row)
        _cost(path, line, kernel, row)
        times.setdefault(key, {})[row["candidate"]] = number(path, line, row, "time_us")
        torch_us = number(path, line, row, "torch_us")
        if torch_us is not None:
            torch_times[key] = torch_us
    for key, kernel in kernels.items():
        kernel.reference = DEFAULT_CANDIDATE
        default = baseline_row(kernel.rows)
        winners = [r for r in kernel.rows if r["winner"] == "1"]
        if default is None:
            kernel.warnings.append(f"no baseline: no plain candidate passed and none is named {DEFAULT_CANDIDATE!r}")
        else:
            name = default["candidate"]
            kernel.timed.append(Timed("default", "default" if name == DEFAULT_CANDIDATE else f"default: {name}",
                                      times[key][name], ok=not is_wrong(default["verdict"]), note=default["verdict"]))
        if len(winners) > 1:
            kernel.warnings.append(f"{len(winners)} candidates marked winner: "
                                   f"{', '.join(r['candidate'] for r in winners)}")
        if winners:
            winner = winners[0]
            ok = winner["verdict"] == "pass"
            if not ok:
                kernel.warnings.append(f"winner {winner['candidate']!r} has verdict {winner['verdict']!r}: "
                                       "a candidate that did not pass must never win")
            kernel.timed.append(Timed("tuned", f"tuned: {winner['candidate']}", times[key][winner["candidate"]],
                                      ok=ok, note=winner["verdict"]))
        else:
            kernel.warnings.append("no winner: no candidate passed, or the tune did not finish")
        if key in torch_times:
            kernel.timed.append(Timed("torch", "torch", torch_times[key]))
    return list(kernels.values())


def _driver_kernels(path: Path, rows: list[dict[str, str]]) -> list[Kernel]:
    kernels: dict[tuple[str, ...], Kernel] = {}
    for line, row in enumerate(rows, start=2):
        if not row["func_name"]:
            continue  # a command that did not parse: in the table only
        kernel = _kernel_for(kernels, (row["func_name"], row["device"]), row)
        kernel.rows.append(row)
        _cost(path, line, kernel, row)
        backend = row["backend"]
        if kernel.get(backend) is not None:
            continue  # the same kernel from another command: its first time is charted
        status = row["status"]
        note = status if status != "error" else f"error: {row.get('error', '')}"
        kernel.timed.append(Timed(backend, backend, number(path, line, row, "median_us"), ok=status == "ok",
                                  note=note))
    for kernel in kernels.values():
        names = [t.series for t in kernel.timed]
        kernel.reference = "torch" if "torch" in names else names[0]
        for timed in kernel.timed:
            if not timed.ok:
                kernel.warnings.append(f"{timed.series}: {timed.note}")
    return list(kernels.values())
