"""What ``boo driver`` and ``boo numerics`` print, and the CSV files the tools write.

The CSV columns are a stable interface (docs/cli.md documents them): new columns may be
added at the end, existing ones keep their names and meaning.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TextIO

import torch

from ..signatures.dtypes import short_name
from ..signatures.signature import Signature
from ..verify.numerics import Comparison
from .driver import BackendRun, CommandResult

#: The tune CSV's columns (docs/cli.md), one row per candidate per kernel.
TUNE_COLUMNS: tuple[str, ...] = (
    "func_name", "command", "op", "mode", "target", "device", "candidate", "formulation", "config", "flags",
    "compile_s", "verdict", "time_us", "tflops", "gbps", "pct_peak", "peak_tflops", "peak_gbps", "speedup", "winner",
    "baseline", "torch_us", "flops", "bytes", "error",
)
#: ``boo driver``'s CSV columns, one row per command per backend.
DRIVER_COLUMNS: tuple[str, ...] = (
    "command", "source", "op", "mode", "func_name", "backend", "device", "status", "error", "cache",
    "compile_s", "load_s", "iterations", "min_us", "median_us", "mean_us", "max_us", "stddev_us",
    "flops", "bytes", "tflops", "gbps", "formulation", "substitution",
)
#: Added to DRIVER_COLUMNS with ``--verify-numerics``; about the worst output of the row.
DRIVER_NUMERICS_COLUMNS: tuple[str, ...] = (
    "numerics", "numerics_output", "max_abs_error", "max_rel_error", "rtol", "atol", "reference_dtype",
)
NUMERICS_COLUMNS: tuple[str, ...] = (
    "command", "source", "op", "mode", "func_name", "device", "output", "status", "error", "dtype",
    "reference_dtype", "max_abs_error", "max_rel_error", "rtol", "atol", "bad_elements", "accumulation_length",
)


def si(value: float, unit: str) -> str:
    """``value`` with an SI prefix: ``si(4.5e8, "FLOP")`` is ``450 MFLOP`` (an integer too
    large for a float is ``over 1e308``)."""
    try:
        value = float(value)
    except OverflowError:
        return f"over 1e308 {unit}"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def worst(comparisons: Sequence[Comparison]) -> Comparison:
    """The first failing comparison, or the one with the largest relative error."""
    failing = [c for c in comparisons if not c.passed]
    return failing[0] if failing else max(comparisons, key=lambda c: c.max_rel_error)


# -- text -----------------------------------------------------------------------------------------


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _command_header(result: CommandResult, out: TextIO) -> None:
    print(f"\n{result.command.text}", file=out)
    if result.command.duplicates:
        print(f"  (repeated at {', '.join(result.command.duplicates)}: run once)", file=out)
    if result.error:
        print(f"  error ({result.command.source}): {result.error}", file=out)


def _signature_header(signature: Signature) -> str:
    mode = signature.mode
    cost = f"{si(signature.flops, 'FLOP')}, {si(signature.bytes_moved, 'B')} per call"
    return f"  {signature.func_name}  [{f'mode {mode}, ' if mode else ''}{cost}]"


def _provenance(run: BackendRun) -> str:
    served = f"formulation {run.formulation}: " if run.formulation else ""
    if run.substitution:
        served = f"formulation {run.formulation} with SUBSTITUTED executables ({run.substitution}, verified): "
    return served + _source(run)


def _source(run: BackendRun) -> str:
    if run.lazy:
        return f"compiled on the first call, in {run.compile_seconds:.2f} s"
    if run.cache == "miss":
        return f"kernel compiled in {run.compile_seconds:.2f} s, loaded in {run.load_seconds * 1e3:.1f} ms"
    if run.cache == "hit":
        return f"kernel from the cache (no compile), loaded in {run.load_seconds * 1e3:.1f} ms"
    if run.cache == "memory":
        return "kernel already loaded by this process"
    return "eager (nothing to compile)"


def format_comparison(c: Comparison) -> str:
    verdict = "PASS" if c.passed else f"FAIL ({c.bad_elements} elements out of tolerance)"
    return (f"{c.name}: max abs error {c.max_abs_error:.3g}  max rel error {c.max_rel_error:.3g}  "
            f"tolerance rtol {c.tolerance.rtol:.3g} atol {c.tolerance.atol:.3g}  {verdict}")


def print_driver_result(result: CommandResult, out: TextIO) -> None:
    """A block per command: per mode, per backend, provenance, outputs, time, throughput."""
    _command_header(result, out)
    signature = None
    for run in result.runs:
        if run.signature is not signature:
            signature = run.signature
            print(_signature_header(signature), file=out)
        if run.error:
            print(f"    {run.backend}: error: {_indent(run.error, '      ').lstrip()}", file=out)
            continue
        print(f"    {run.backend}: {_provenance(run)}", file=out)
        for attempt in run.passed_over:
            print(f"      passed over {attempt}", file=out)
        for output in run.outputs:
            print(f"      output {output}", file=out)
        if run.timing is not None:
            t = run.timing
            print(f"      time (us): min {t.min:.1f}  median {t.median:.1f}  mean {t.mean:.1f}  max {t.max:.1f}  "
                  f"stddev {t.stddev:.1f}  ({t.iterations} iterations)", file=out)
            print(f"      throughput: {run.tflops:.4g} TFLOP/s  {run.gbps:.4g} GB/s", file=out)
        for comparison in run.comparisons:
            print(f"      numerics {format_comparison(comparison)}", file=out)


def print_numerics_result(result: CommandResult, out: TextIO) -> None:
    """A block per command: per mode, each output's errors, tolerance and verdict."""
    _command_header(result, out)
    for run in result.runs:
        print(_signature_header(run.signature), file=out)
        if run.error:
            print(f"    ERROR: {_indent(run.error, '      ').lstrip()}", file=out)
        for comparison in run.comparisons:
            print(f"    {format_comparison(comparison)}", file=out)


# -- CSV ------------------------------------------------------------------------------------------


def _number(value: float | int | None, spec: str) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return format(value, spec)


def _base(result: CommandResult, run: BackendRun | None) -> dict[str, str]:
    signature = run.signature if run else None
    return {
        "command": result.command.text,
        "source": result.command.source,
        "op": result.op,
        "mode": signature.mode if signature else "",
        "func_name": signature.func_name if signature else "",
        "error": run.error if run else result.error,
    }


def driver_rows(result: CommandResult, device: str, verify: bool, reference_dtype: torch.dtype) -> list[dict[str, str]]:
    """One row per mode and backend (one row for a command that does not parse)."""
    if result.error:
        return [{**_base(result, None), "device": device, "status": "error"}]
    rows = []
    for run in result.runs:
        t = run.timing
        row = {
            **_base(result, run),
            "backend": run.backend,
            "device": device,
            "status": run.status,
            "cache": run.cache,
            "compile_s": _number(run.compile_seconds, ".4f"),
            "load_s": _number(run.load_seconds, ".4f"),
            "flops": str(run.signature.flops),
            "bytes": str(run.signature.bytes_moved),
            "formulation": run.formulation,
            "substitution": run.substitution,
        }
        if t is not None:
            row.update(iterations=str(t.iterations), min_us=_number(t.min, ".3f"), median_us=_number(t.median, ".3f"),
                       mean_us=_number(t.mean, ".3f"), max_us=_number(t.max, ".3f"),
                       stddev_us=_number(t.stddev, ".3f"), tflops=_number(run.tflops, ".6g"),
                       gbps=_number(run.gbps, ".6g"))
        if verify and run.comparisons:
            c = worst(run.comparisons)
            row.update(numerics="PASS" if run.status == "ok" else "FAIL", numerics_output=c.name,
                       max_abs_error=_number(c.max_abs_error, ".6g"), max_rel_error=_number(c.max_rel_error, ".6g"),
                       rtol=_number(c.tolerance.rtol, ".6g"), atol=_number(c.tolerance.atol, ".6g"),
                       reference_dtype=short_name(reference_dtype))
        rows.append(row)
    return rows


def numerics_rows(result: CommandResult, device: str, reference_dtype: torch.dtype) -> list[dict[str, str]]:
    """One row per mode and output (one row for a command or mode that did not run)."""
    if result.error:
        return [{**_base(result, None), "device": device, "status": "ERROR"}]
    rows = []
    for run in result.runs:
        common = {**_base(result, run), "device": device, "reference_dtype": short_name(reference_dtype),
                  "accumulation_length": str(run.signature.accumulation_length)}
        if run.error:
            rows.append({**common, "status": "ERROR"})
        specs = {spec.name: spec for spec in run.signature.output_specs()}
        for c in run.comparisons:
            rows.append({**common, "output": c.name, "status": "PASS" if c.passed else "FAIL",
                         "dtype": short_name(specs[c.name].dtype),
                         "max_abs_error": _number(c.max_abs_error, ".6g"),
                         "max_rel_error": _number(c.max_rel_error, ".6g"), "rtol": _number(c.tolerance.rtol, ".6g"),
                         "atol": _number(c.tolerance.atol, ".6g"), "bad_elements": str(c.bad_elements)})
    return rows


class CsvReport:
    """A CSV file written row by row (flushed per command, so an interrupted run keeps its rows)."""

    def __init__(self, path: str | Path, columns: Sequence[str]) -> None:
        self.path = Path(path)
        self._file = open(self.path, "w", newline="", encoding="utf-8")
        self._writer = csv.DictWriter(self._file, fieldnames=list(columns), restval="")
        self._writer.writeheader()

    def write(self, rows: Iterable[dict[str, str]]) -> None:
        self._writer.writerows(rows)
        self._file.flush()

    def __enter__(self) -> CsvReport:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._file.close()
