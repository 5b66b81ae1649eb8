"""``boo report``: one self-contained HTML file from ``boo tune`` and ``boo driver`` CSVs.

The page holds, per kind of results, a roofline (achieved FLOP/s against FLOP per byte, with
the compute and bandwidth peaks), per-kernel time bars (default, tuned and torch; or one per
driver backend) with their ratios, and tables of every row, wrong and failed runs flagged.
Everything is inline (CSS, SVG, a sorting script): the file opens with no network.

From Python, after a tune::

    from boo_core.tools.html_report import write_report
    write_report(["tune.csv"], "report.html", title="conv tune", peak_tflops=989, peak_gbps=3350)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .page import Peaks, render_page
from .results import (
    DRIVER_REQUIRED,
    TUNE_COLUMNS,
    TUNE_REQUIRED,
    Kernel,
    Results,
    ResultsFileError,
    Timed,
    read_results,
)

__all__ = [
    "DRIVER_REQUIRED", "REPORT_HELP", "TUNE_COLUMNS", "TUNE_REQUIRED", "Kernel", "Results", "ResultsFileError",
    "Timed", "add_arguments", "build_report", "read_results", "run", "write_report",
]


def build_report(results: Sequence[Results], title: str | None = None, peak_tflops: float | None = None,
                 peak_gbps: float | None = None) -> str:
    """The report's HTML for results already read.

    Peaks given here win over those the CSVs recorded (a tune CSV's ``peak_tflops`` and
    ``peak_gbps``, which apply to the tune section only); unknown peaks leave the roof undrawn.
    """
    if not results:
        raise ValueError("build_report needs at least one results file")
    title = title or "BOO results: " + ", ".join(r.path.name for r in results)
    return render_page(title, results, Peaks(peak_tflops * 1e12 if peak_tflops else None,
                                              peak_gbps * 1e9 if peak_gbps else None))


def write_report(csv_paths: str | Path | Sequence[str | Path], out_path: str | Path, *, title: str | None = None,
                 peak_tflops: float | None = None, peak_gbps: float | None = None) -> Path:
    """Read tune and/or driver CSVs and write the report to ``out_path``; returns that path.

    Raises ResultsFileError (naming the file) for a missing, unreadable or wrong-kind CSV, or
    an output that cannot be written.
    """
    paths = [csv_paths] if isinstance(csv_paths, (str, Path)) else list(csv_paths)
    html = build_report([read_results(p) for p in paths], title, peak_tflops, peak_gbps)
    out = Path(out_path)
    try:
        out.write_text(html, encoding="utf-8")
    except OSError as e:
        raise ResultsFileError(f"{out}: cannot write the report: {e.strerror or e}") from None
    return out


# -- the ``boo report`` verb ------------------------------------------------------------------------

REPORT_HELP = """\
Make one self-contained HTML report (no network needed to view it) from result CSVs of
'boo tune --csv' (a row per candidate per kernel) and 'boo driver --csv' (a row per mode
and backend); the kind of each file is told by its columns. The report holds a roofline
(achieved FLOP/s against arithmetic intensity, with the compute and bandwidth peaks when
known), per-kernel time bars (default, tuned and torch; or one per driver backend) with
their ratios, and sortable tables of every row, wrong and failed runs flagged. Peaks come
from the tune CSV's peak_tflops and peak_gbps columns; --peak-tflops and --peak-gbps
override them. A compute peak below the best rate a correct run of the report reached is
drawn at that rate instead, with a note. Exit status 2 for a missing file or a CSV of
neither kind.

Examples:
  boo report tune.csv -o report.html
  boo report times.csv --peak-tflops 989 --peak-gbps 3350 -o h100.html --title "H100, bf16"
  boo report tune-conv.csv tune-matmul.csv driver.csv -o all.html"""


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``boo report``."""
    parser.add_argument("csv_files", nargs="+", metavar="RESULTS.csv", help="boo tune or boo driver CSV files")
    parser.add_argument("-o", "--output", metavar="FILE.html",
                        help="where to write the report (default: the first CSV's name with .html)")
    parser.add_argument("--title", help="the report's title (default: names the files)")
    parser.add_argument("--peak-tflops", type=_positive_float, metavar="X",
                        help="compute peak in TFLOP/s (overrides the CSV's)")
    parser.add_argument("--peak-gbps", type=_positive_float, metavar="Y",
                        help="memory bandwidth peak in GB/s (overrides the CSV's)")


def run(args: argparse.Namespace) -> int:
    """``boo report``: write the report and say where; ResultsFileError for a bad input."""
    output = Path(args.output) if args.output else Path(args.csv_files[0]).with_suffix(".html")
    out = write_report(args.csv_files, output, title=args.title, peak_tflops=args.peak_tflops,
                       peak_gbps=args.peak_gbps)
    print(f"report written to {out}")
    sys.stdout.flush()
    return 0
