"""The HTML page: one section per kind of results (charts, kernel summary, every row), with
its CSS and the small script that sorts tables inline, so the file needs no network."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from .charts import Bars, Roofline, hatch_pattern, legend, raised_peak, roofline_points
from .results import Kernel, Kind, Results, Timed, achieved_flops, is_wrong
from .svg import duration, ratio, si, text


@dataclass(frozen=True)
class Peaks:
    """The roof: compute peak in FLOP/s, bandwidth peak in bytes/s; either may be unknown."""

    flops: float | None = None
    bandwidth: float | None = None

    def override(self, other: Peaks) -> Peaks:
        """Each of ``other``'s known peaks replaces this one's."""
        return Peaks(other.flops or self.flops, other.bandwidth or self.bandwidth)


@dataclass
class Section:
    """The kernels and rows of every file of one kind, charted together."""

    kind: Kind
    results: list[Results]
    kernels: list[Kernel]

    @property
    def series(self) -> list[str]:
        order = ["default", "tuned", "torch"] if self.kind == "tune" else []
        for kernel in self.kernels:
            for timed in kernel.timed:
                if timed.series not in order:
                    order.append(timed.series)
        present = {t.series for k in self.kernels for t in k.timed}
        return [s for s in order if s in present]

    def recorded_peaks(self) -> tuple[Peaks, str]:
        """The peaks the files measured (the first file's), and a note when files disagree."""
        recorded = [Peaks(r.peak_tflops * 1e12 if r.peak_tflops else None, r.peak_gbps * 1e9 if r.peak_gbps else None)
                    for r in self.results if r.peak_tflops or r.peak_gbps]
        if not recorded:
            return Peaks(), ""
        note = "The files recorded different peaks; the first file's are drawn." if len(set(recorded)) > 1 else ""
        return recorded[0], note


def sections(results: Sequence[Results]) -> list[Section]:
    """Group files by kind; a kernel seen in two files keeps both, the later named by its file."""
    out = []
    for kind in ("tune", "driver"):
        files = [r for r in results if r.kind == kind]
        if not files:
            continue
        kernels: list[Kernel] = []
        seen: set[tuple[str, str, str]] = set()
        for result in files:
            for kernel in result.kernels:
                key = (kernel.name, kernel.device, kernel.target)
                if key in seen:
                    kernel.name = f"{kernel.name} [{result.path.name}]"
                seen.add(key)
                kernels.append(kernel)
        out.append(Section(kind, files, kernels))  # type: ignore[arg-type]
    return out


def percent_of_peak(kernel: Kernel, time_us: float | None, peak_flops: float | None,
                    peak_bandwidth: float | None) -> float | None:
    """100 × the larger of achieved/peak FLOP/s and achieved/peak bytes/s (None if unknown)."""
    if not time_us or kernel.flops is None or kernel.bytes is None:
        return None
    fractions = []
    if peak_flops:
        fractions.append(achieved_flops(kernel.flops, time_us) / peak_flops)
    if peak_bandwidth:
        fractions.append(kernel.bytes / (time_us * 1e-6) / peak_bandwidth)
    return 100 * max(fractions) if fractions else None


def geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


# -- tables ---------------------------------------------------------------------------------------


#: Longer cell texts (configs, errors, commands) wrap; others stay on one line.
LONG = 60


def _cell(value: str, sort: float | None = None, cls: str = "") -> str:
    data = f' data-v="{sort:.9g}"' if sort is not None else ""
    klass = f' class="{cls}"' if cls else ""
    content = f'<div class="long">{text(value)}</div>' if len(value) > LONG else text(value)
    return f"<td{data}{klass}>{content}</td>"


def _time_cell(us: float | None) -> str:
    return _cell(duration(us), us) if us else _cell("")


def _ratio_cell(value: float | None) -> str:
    return _cell(ratio(value), value) if value else _cell("")


def _table(headers: Sequence[str], rows: Sequence[tuple[str, str]], cls: str) -> str:
    """``rows``: (row class, cells HTML)."""
    head = "".join(f"<th>{text(h)}</th>" for h in headers)
    body = "".join(f'<tr class="{c}">{cells}</tr>' if c else f"<tr>{cells}</tr>" for c, cells in rows)
    return (f'<div class="scroll"><table class="sortable {cls}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def _tune_summary(section: Section, peak_flops: float | None, peak_bandwidth: float | None) -> str:
    headers = ["kernel", "op", "mode", "device", "target", "winner", "default", "tuned", "speed-up", "torch",
               "tuned/torch", "TFLOP/s", "GB/s", "% of peak"]
    rows = []
    for k in section.kernels:
        default, tuned, torch = k.get("default"), k.get("tuned"), k.get("torch")
        d_us, t_us, torch_us = (x.time_us if x else None for x in (default, tuned, torch))
        winner = tuned.label.removeprefix("tuned: ") if tuned else "none"
        tflops = achieved_flops(k.flops, t_us) / 1e12 if t_us and k.flops else None
        gbps = k.bytes / (t_us * 1e-6) / 1e9 if t_us and k.bytes else None
        pct = percent_of_peak(k, t_us, peak_flops, peak_bandwidth)
        cells = "".join([
            _cell(k.name), _cell(k.op), _cell(k.mode), _cell(k.device), _cell(k.target),
            _cell(winner, cls="flagged-text" if tuned and not tuned.ok else ""),
            _time_cell(d_us), _time_cell(t_us), _ratio_cell(d_us / t_us if d_us and t_us else None),
            _time_cell(torch_us), _ratio_cell(t_us / torch_us if t_us and torch_us else None),
            _cell(f"{tflops:.4g}" if tflops else "", tflops), _cell(f"{gbps:.4g}" if gbps else "", gbps),
            _cell(f"{pct:.1f}" if pct is not None else "", pct)])
        rows.append(("flagged" if k.warnings else "", cells))
    return _table(headers, rows, "summary")


def _driver_pairs(section: Section) -> list[tuple[str, str]]:
    """(backend, reference) pairs whose time ratios are shown: each backend against torch."""
    references = sorted({k.reference for k in section.kernels})
    return [(b, r) for r in references for b in section.series if b != r]


def _driver_summary(section: Section, peak_flops: float | None, peak_bandwidth: float | None) -> str:
    backends = section.series
    pairs = _driver_pairs(section)
    headers = (["kernel", "op", "mode", "device"] + [f"{b} time" for b in backends]
               + [f"{b}/{r}" for b, r in pairs] + ["best % of peak"])
    rows = []
    for k in section.kernels:
        times = {t.series: t.time_us for t in k.timed}
        cells = [_cell(k.name), _cell(k.op), _cell(k.mode), _cell(k.device)]
        cells += [_time_cell(times.get(b)) for b in backends]
        for b, r in pairs:
            mine, ref = times.get(b), times.get(r)
            cells.append(_ratio_cell(mine / ref if mine and ref and k.reference == r else None))
        best = [p for p in (percent_of_peak(k, t.time_us, peak_flops, peak_bandwidth) for t in k.timed if t.ok)
                if p is not None]
        cells.append(_cell(f"{max(best):.1f}", max(best)) if best else _cell(""))
        rows.append(("flagged" if any(not t.ok for t in k.timed) else "", "".join(cells)))
    return _table(headers, rows, "summary")


TUNE_SHOWN = ("func_name", "candidate", "formulation", "config", "flags", "compile_s", "verdict", "time_us",
              "tflops", "gbps", "pct_peak", "speedup", "winner", "torch_us", "error")
DRIVER_SHOWN = ("func_name", "mode", "backend", "device", "status", "cache", "compile_s", "median_us", "min_us",
                "max_us", "tflops", "gbps", "formulation", "numerics", "max_rel_error", "command", "error")


def row_flag(kind: Kind, row: dict[str, str]) -> tuple[str, str]:
    """(row class, badge) of a result row: winners starred, wrong and failed runs flagged."""
    if kind == "tune":
        verdict = row["verdict"]
        if is_wrong(verdict):
            return "flagged", "✗ wrong" + (" (marked winner!)" if row["winner"] == "1" else "")
        if verdict == "compile error":
            return "flagged", "✗ compile error"
        if row["winner"] == "1":
            return ("winner", "★ winner") if verdict == "pass" else ("flagged", f"✗ winner, {verdict}")
        return ("muted", verdict) if verdict in ("not timed", "skipped") else ("", "")
    status = row["status"]
    if status == "fail":
        return "flagged", "✗ wrong (numerics)"
    if status == "error":
        return "flagged", "✗ error"
    return "", ""


def _rows_table(section: Section) -> str:
    shown = TUNE_SHOWN if section.kind == "tune" else DRIVER_SHOWN
    present = [c for c in shown if any(c in r.columns for r in section.results)]
    several = len(section.results) > 1
    headers = ["flag"] + (["file"] if several else []) + present
    rows = []
    for result in section.results:
        for row in result.rows:
            cls, badge = row_flag(section.kind, row)
            cells = [_cell(badge)] + ([_cell(result.path.name)] if several else [])
            for column in present:
                value = row.get(column, "")
                try:
                    sort = float(value) if value else None
                except ValueError:
                    sort = None
                cells.append(_cell(value, sort if sort is not None and math.isfinite(sort) else None))
            rows.append((cls, "".join(cells)))
    return _table(headers, rows, "rows")


# -- page -----------------------------------------------------------------------------------------


def _section_html(index: int, section: Section, given: Peaks) -> str:
    recorded, peaks_note = section.recorded_peaks()
    peaks = recorded.override(given)
    points = roofline_points(section.kernels)
    peak_flops, raiser = raised_peak(points, peaks.flops)
    peak_bandwidth = peaks.bandwidth
    names = ", ".join(r.path.name for r in section.results)
    kind = "Tuning" if section.kind == "tune" else "Driver"
    parts = [f'<section class="results {section.kind}" id="{section.kind}">',
             f"<h2>{kind} results <small>{text(names)}</small></h2>"]
    parts.append(f'<p class="facts">{text(_facts(section, peak_flops, peak_bandwidth))}</p>')
    if peaks_note and not (given.flops and given.bandwidth):
        parts.append(f'<p class="note">{text(peaks_note)}</p>')
    if raiser is not None and peaks.flops:
        raised = (f"The compute peak given or recorded ({si(peaks.flops, 'FLOP/s')}) is below the best rate "
                  f"measured here ({si(raiser.flop_s, 'FLOP/s')}: {raiser.series}, {raiser.kernel}); the roof is "
                  "drawn at the measured rate.")
        parts.append(f'<p class="note peak-raised">{text(raised)}</p>')
    warnings = [f"{k.name}: {w}" for k in section.kernels for w in k.warnings]
    if warnings:
        items = "".join(f"<li>{text(w)}</li>" for w in warnings)
        parts.append(f'<div class="warnings"><strong>Flagged</strong><ul>{items}</ul></div>')
    series = section.series
    parts.append("<h3>Roofline</h3>")
    if points:
        roofline = Roofline(points, peak_flops, peak_bandwidth)
        parts.append(roofline.svg(f"roofline-{index}", series))
        parts.append(legend(series))
        if not (peak_flops and peak_bandwidth):
            parts.append('<p class="note">Peaks unknown or partial: pass --peak-tflops and --peak-gbps to draw '
                         "the roof.</p>")
    else:
        parts.append('<p class="note">No timed kernel with FLOP and byte counts: nothing to place.</p>')
    timed_kernels = [k for k in section.kernels if k.timed]
    parts.append("<h3>Time per kernel <small>(log scale; shorter is faster)</small></h3>")
    if timed_kernels:
        parts.append(Bars(timed_kernels, section.kind).svg(f"bars-{index}", series))
        parts.append(legend(series))
    parts.append("<h3>Kernels</h3>")
    summary = _tune_summary if section.kind == "tune" else _driver_summary
    parts.append(summary(section, peak_flops, peak_bandwidth))
    parts.append("<h3>Every " + ("candidate" if section.kind == "tune" else "run") + "</h3>")
    parts.append(_rows_table(section))
    parts.append("</section>")
    return "\n".join(parts)


def _valid(kernel: Kernel, series: str) -> Timed | None:
    """A measurement fit for the summary statistics: timed, neither wrong nor failed."""
    timed = kernel.get(series)
    return timed if timed and timed.ok and timed.time_us else None


def _facts(section: Section, peak_flops: float | None, peak_bandwidth: float | None) -> str:
    # The ratios leave out wrong and failed runs.
    facts = [f"{len(section.kernels)} kernel{'' if len(section.kernels) == 1 else 's'}"]
    if section.kind == "tune":
        speedups = [d.time_us / t.time_us for k in section.kernels
                    if (d := _valid(k, "default")) and (t := _valid(k, "tuned"))]
        vs_torch = [t.time_us / p.time_us for k in section.kernels
                    if (t := _valid(k, "tuned")) and (p := _valid(k, "torch"))]
        candidates = sum(len(k.rows) for k in section.kernels)
        wrong = sum(is_wrong(r["verdict"]) for k in section.kernels for r in k.rows)
        facts.append(f"{candidates} candidates, {wrong} wrong")
        if (g := geomean(speedups)) is not None:
            facts.append(f"geometric mean speed-up over default {ratio(g)}")
        if (g := geomean(vs_torch)) is not None:
            facts.append(f"geometric mean tuned/torch {ratio(g)}")
    else:
        for backend, reference in _driver_pairs(section):
            ratios = [t.time_us / r.time_us for k in section.kernels
                      if k.reference == reference and (t := _valid(k, backend)) and (r := _valid(k, reference))]
            if (g := geomean(ratios)) is not None:
                facts.append(f"geometric mean {backend}/{reference} {ratio(g)}")
    peaks = [si(v, u) for v, u in ((peak_flops, "FLOP/s"), (peak_bandwidth, "B/s")) if v]
    facts.append("peaks " + " and ".join(peaks) if peaks else "peaks unknown")
    return "; ".join(facts)


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d1d1d;max-width:1400px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 6px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:18px 0 6px}small{color:#666;font-weight:normal}
.facts,.note,.meta{color:#444}.warnings{background:#fdecea;border:1px solid #f5b7b1;padding:6px 12px;margin:8px 0}
.warnings ul{margin:4px 0 0 18px;padding:0}
svg.chart{max-width:100%;height:auto;display:block;font:11px system-ui,sans-serif}
.plot-area{fill:#fafafa;stroke:#999}.grid{stroke:#e3e3e3}.axis{stroke:#999}.tick{fill:#555}
.axis-label{fill:#333;font-size:12px}.roof{stroke:#333;stroke-width:2}.roof-label{fill:#333;font-size:11px}
.ridge{fill:#333}.link{stroke:#aaa;stroke-dasharray:3 3}.point:hover{stroke:#000;stroke-width:2}
.kernel-name{fill:#111;font-weight:600}.bar-label{fill:#444}.bar-note{fill:#222}.flagged-text{fill:#c0392b;color:#c0392b}
.legend{margin:4px 0 8px}.key{display:inline-flex;align-items:center;gap:4px;margin-right:16px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:12px}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f2f2f2;cursor:pointer;user-select:none;position:sticky;top:0}
th[data-dir=asc]::after{content:" ▲"}th[data-dir=desc]::after{content:" ▼"}
td[data-v]{text-align:right;font-variant-numeric:tabular-nums}
tr.flagged td{background:#fdecea}tr.flagged td:first-child{color:#c0392b;font-weight:600}
tr.winner td{background:#eaf6ec}tr.winner td:first-child{color:#1e7b34;font-weight:600}tr.muted td{color:#888}
.scroll{overflow-x:auto}table{width:max-content}td{white-space:nowrap}
td .long{white-space:normal;overflow-wrap:anywhere;max-width:36em}
"""

SORT_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0], column = th.cellIndex;
    var dir = th.dataset.dir === "asc" ? "desc" : "asc";
    table.querySelectorAll("th").forEach(function (h) { delete h.dataset.dir; });
    th.dataset.dir = dir;
    function key(row) {
      var cell = row.cells[column];
      return cell.dataset.v !== undefined ? parseFloat(cell.dataset.v) : cell.textContent;
    }
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a), y = key(b), order;
      if (typeof x === "number" && typeof y === "number") order = x - y;
      else if (typeof x === "number") order = -1;
      else if (typeof y === "number") order = 1;
      else order = x.localeCompare(y);
      return dir === "asc" ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
"""


def render_page(title: str, all_results: Sequence[Results], peaks: Peaks = Peaks()) -> str:
    """The whole report: a self-contained HTML document; ``peaks`` override those files recorded."""
    body = [f"<h1>{text(title)}</h1>",
            f'<p class="meta">From {text(", ".join(str(r.path) for r in all_results))}. Tables sort on a click '
            "of a header; hover a point or bar for its numbers.</p>"]
    body.append(hatch_pattern())
    body += [_section_html(i, s, peaks) for i, s in enumerate(sections(all_results))]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body>\n" + "\n".join(body)
            + f"\n<script>{SORT_SCRIPT}</script>\n</body></html>\n")
