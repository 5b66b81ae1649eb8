"""``boo report``: reading tune and driver CSVs, the numbers placed on the charts, the page, the
verb. tests/integration/test_report_browser.py opens the page in a real browser."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from boo_core import Formulation
from boo_core.testing import isolated_registry
from boo_core.tools import tune
from boo_core.tools.cli import main
from boo_core.tools.html_report import (
    DRIVER_REQUIRED,
    TUNE_COLUMNS,
    TUNE_REQUIRED,
    ResultsFileError,
    build_report,
    read_results,
    write_report,
)
from boo_core.tools.html_report.charts import Bars, Point, Roofline, bar_note, raised_peak, roofline_points
from boo_core.tools.html_report.page import percent_of_peak, row_flag
from boo_core.tools.html_report.svg import LogScale, ratio
from boo_core.tools.report import DRIVER_COLUMNS, NUMERICS_COLUMNS
from boo_core.tune.peaks import Peaks
from boo_core.tune.tuner import TuneOptions, Tuner

from .fake_plugins.scale_op import ScalePlugin, ScaleSignature
from .fake_plugins.wrong_kernel import TRIPLE
from .report_csvs import (
    CONV,
    DRIVER,
    GEMM,
    NORM,
    PEAK_GBPS,
    PEAK_TFLOPS,
    TUNE,
    tune_rows,
    write_csv,
    write_driver_csv,
    write_tune_csv,
)


def test_the_columns_the_report_needs_are_those_the_tools_write():
    assert set(DRIVER_REQUIRED) <= set(DRIVER_COLUMNS)
    assert set(TUNE_REQUIRED) <= set(TUNE_COLUMNS) and TUNE_COLUMNS is tune.TUNE_COLUMNS


# -- reading --------------------------------------------------------------------------------------


def test_a_tune_csv_gives_per_kernel_default_tuned_and_torch(tmp_path):
    results = read_results(write_tune_csv(tmp_path / "tune.csv"))
    assert results.kind == "tune" and len(results.rows) == 8
    assert (results.peak_tflops, results.peak_gbps) == (PEAK_TFLOPS, PEAK_GBPS)
    conv, gemm, norm = results.kernels
    assert [k.name for k in results.kernels] == [CONV, GEMM, NORM]
    assert (conv.op, conv.mode, conv.device, conv.target) == ("conv", "fwd", "NVIDIA H100 80GB HBM3", "cuda:sm_90")
    assert (conv.flops, conv.bytes) == (7.4e9, 2.57e7) and conv.intensity == pytest.approx(7.4e9 / 2.57e7)
    assert [(t.series, t.label, t.time_us, t.ok) for t in conv.timed] == [
        ("default", "default", 1823.0, True), ("tuned", "tuned: im2col", 265.0, True), ("torch", "torch", 24.0, True)]
    assert gemm.get("tuned").label == "tuned: default/wg128x128_k64_s3"
    assert norm.get("tuned").time_us == norm.get("default").time_us == 40.0
    assert len(conv.rows) == 4 and not conv.warnings


def test_a_driver_csv_gives_one_measurement_per_backend(tmp_path):
    results = read_results(write_driver_csv(tmp_path / "driver.csv"))
    assert results.kind == "driver" and len(results.rows) == 7
    assert (results.peak_tflops, results.peak_gbps) == (None, None)
    conv, gemm = results.kernels  # the command that did not parse is a row, not a kernel
    assert [(t.series, t.time_us, t.ok) for t in conv.timed] == [
        ("boo", 9100.0, True), ("torch", 2460.0, True), ("inductor", 2600.0, True)]
    assert conv.reference == "torch" and not conv.warnings
    assert [(t.series, t.time_us, t.ok, t.note) for t in gemm.timed] == [
        ("boo", 31000.0, False, "fail"), ("torch", 9400.0, True, "ok"),
        ("inductor", None, False, "error: inductor failed")]
    assert gemm.warnings == ["boo: fail", "inductor: error: inductor failed"]


def test_a_driver_csv_without_torch_compares_with_its_first_backend(tmp_path):
    rows = [r for r in read_results(write_driver_csv(tmp_path / "a.csv")).rows if r["backend"] != "torch"]
    kernel = read_results(write_csv(tmp_path / "b.csv", DRIVER_COLUMNS, rows)).kernels[0]
    assert kernel.reference == "boo"
    assert bar_note("driver", kernel, kernel.get("inductor")) == "3.5× faster than boo"


def test_a_winner_that_did_not_pass_is_flagged_everywhere(tmp_path):
    rows = tune_rows()
    for row in rows:
        if row["func_name"] == CONV:
            row["winner"] = "1" if row["candidate"] == "default/wg128x128_k64_s3" else "0"
    path = write_csv(tmp_path / "bad.csv", TUNE_COLUMNS, rows)
    conv = read_results(path).kernels[0]
    assert not conv.get("tuned").ok
    assert conv.warnings == ["winner 'default/wg128x128_k64_s3' has verdict 'fail: 12 elements out of tolerance': "
                             "a candidate that did not pass must never win"]
    wrong = next(r for r in rows if r["winner"] == "1" and r["func_name"] == CONV)
    assert row_flag("tune", wrong) == ("flagged", "✗ wrong (marked winner!)")
    html = build_report([read_results(path)])
    assert '<div class="warnings"><strong>Flagged</strong>' in html and "must never win" in html
    assert 'class="point flagged" data-kernel="' + CONV + '" data-series="tuned"' in html
    assert 'class="bar flagged" data-kernel="' + CONV + '" data-series="tuned"' in html


def test_the_baseline_is_the_plain_candidate_the_speedups_are_relative_to(tmp_path):
    # On a GPU the op's first formulation may be wrong: boo tune then measures speed-ups
    # against the first plain candidate that passed.
    rows = [row for row in tune_rows() if row["func_name"] == CONV]
    rows[0].update(verdict="fail: 40 elements out of tolerance", speedup="")
    rows.insert(1, {**rows[1], "candidate": "f32_compute", "formulation": "f32_compute", "flags": "",
                    "time_us": "4916.0", "speedup": "1", "winner": "0"})
    for row in rows[2:]:
        row["speedup"] = f"{4916.0 / float(row['time_us']):.4g}" if row["time_us"] else ""
    conv = read_results(write_csv(tmp_path / "t.csv", TUNE_COLUMNS, rows)).kernels[0]
    default, tuned = conv.get("default"), conv.get("tuned")
    assert (default.label, default.time_us, default.ok) == ("default: f32_compute", 4916.0, True)
    assert bar_note("tune", conv, tuned) == "18.6× faster than default"
    assert row_flag("tune", rows[0]) == ("flagged", "✗ wrong")
    rows[1]["speedup"] = ""  # no speed-ups written: the candidate named default
    conv = read_results(write_csv(tmp_path / "t.csv", TUNE_COLUMNS, rows)).kernels[0]
    assert (conv.get("default").label, conv.get("default").ok) == ("default", False)


def test_the_baseline_column_decides_between_candidates_of_equal_times(tmp_path):
    # Two plain candidates that timed alike both have speed-up 1: the tuner's mark decides.
    rows = [row for row in tune_rows() if row["func_name"] == CONV]
    rows.insert(0, {**rows[0], "candidate": "f32_compute", "formulation": "f32_compute", "speedup": "1.0002"})
    rows[1]["speedup"] = "1"
    for row in rows:
        row["baseline"] = "1" if row["candidate"] == "default" else "0"
    conv = read_results(write_csv(tmp_path / "t.csv", TUNE_COLUMNS, rows)).kernels[0]
    assert conv.get("default").label == "default"
    for row in rows:
        row["baseline"] = "0"  # nothing passed: the candidate named default, not a guess
    rows[0]["verdict"] = "pass"
    conv = read_results(write_csv(tmp_path / "t.csv", TUNE_COLUMNS, rows)).kernels[0]
    assert conv.get("default").label == "default"


def test_a_kernel_without_a_winner_or_with_two_is_flagged(tmp_path):
    rows = tune_rows()
    for row in rows:
        if row["func_name"] == GEMM:
            row["winner"] = "1"
        if row["func_name"] == NORM:
            row["winner"] = "0"
    _, gemm, norm = read_results(write_csv(tmp_path / "t.csv", TUNE_COLUMNS, rows)).kernels
    assert gemm.warnings == ["2 candidates marked winner: default, default/wg128x128_k64_s3"]
    assert norm.warnings == ["no winner: no candidate passed, or the tune did not finish"]
    assert [t.series for t in norm.timed] == ["default", "torch"]
    assert bar_note("tune", norm, norm.get("torch")) == "1.14× faster than default"


def test_row_flags_mark_winners_wrong_and_failed_candidates():
    assert row_flag("tune", {"verdict": "pass", "winner": "1"}) == ("winner", "★ winner")
    assert row_flag("tune", {"verdict": "pass", "winner": "0"}) == ("", "")
    assert row_flag("tune", {"verdict": "fail: 3 elements", "winner": "0"}) == ("flagged", "✗ wrong")
    assert row_flag("tune", {"verdict": "compile error", "winner": "0"}) == ("flagged", "✗ compile error")
    assert row_flag("tune", {"verdict": "skipped", "winner": "0"}) == ("muted", "skipped")
    assert row_flag("driver", {"status": "fail"}) == ("flagged", "✗ wrong (numerics)")
    assert row_flag("driver", {"status": "error"}) == ("flagged", "✗ error")


def test_a_csv_of_neither_kind_names_the_file_and_the_missing_columns(tmp_path):
    numerics = write_csv(tmp_path / "numerics.csv", NUMERICS_COLUMNS, [{"func_name": "k", "status": "PASS"}])
    with pytest.raises(ResultsFileError, match=re.escape(
            f"{numerics}: neither a tune CSV nor a driver CSV: missing driver column(s) backend, median_us, "
            "flops, bytes (or tune column(s) candidate, verdict, time_us, winner, flops, bytes)")):
        read_results(numerics)
    almost = write_csv(tmp_path / "almost.csv", [c for c in TUNE_COLUMNS if c != "winner"], tune_rows())
    with pytest.raises(ResultsFileError, match=re.escape(f"{almost}: neither a tune CSV nor a driver CSV: "
                                                         "missing tune column(s) winner (or driver")):
        read_results(almost)


@pytest.mark.parametrize("content, message", [
    ("", "empty file (expected a boo tune or boo driver CSV)"),
    (",".join(TUNE_COLUMNS) + "\n", "holds a tune header but no rows"),
    ("\xff\xfe not utf-8", "cannot read it as CSV"),
])
def test_unreadable_or_empty_csvs_are_errors_naming_the_file(tmp_path, content, message):
    path = tmp_path / "results.csv"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(ResultsFileError, match=re.escape(f"{path}: {message}")):
        read_results(path)


def test_a_missing_file_and_a_bad_number_are_named(tmp_path):
    with pytest.raises(ResultsFileError, match=re.escape(f"{tmp_path / 'none.csv'}: no such file")):
        read_results(tmp_path / "none.csv")
    rows = tune_rows()
    rows[2]["time_us"] = "fast"
    path = write_csv(tmp_path / "t.csv", TUNE_COLUMNS, rows)
    with pytest.raises(ResultsFileError, match=re.escape(f"{path}:4: column time_us holds 'fast', not a number")):
        read_results(path)


# -- numbers on the charts ------------------------------------------------------------------------


def test_log_scale_maps_decades_linearly():
    scale = LogScale(1.0, 1000.0, 50.0, 350.0)
    assert [scale(v) for v in (1, 10, 100, 1000)] == pytest.approx([50, 150, 250, 350])
    assert LogScale(1.0, 100.0, 400.0, 0.0)(10) == pytest.approx(200)  # flipped (y axis)
    assert scale.decades() == [1, 10, 100, 1000]
    assert LogScale(30.0, 300.0, 0, 1).ticks() == pytest.approx([50, 100, 200])
    covering = LogScale.covering([10.0, 1234.0], 0, 1, pad_below=True)
    assert (covering.lo, covering.hi) == (1.0, 10000.0)
    assert [ratio(v) for v in (1.0, 3.217, 76.0, 310.4)] == ["1×", "3.22×", "76×", "310×"]


def test_a_point_sits_at_its_intensity_and_achieved_flops():
    # 2 GFLOP over 1 MB in 1 ms: intensity 2000 FLOP/B, 2 TFLOP/s.
    points = [Point("k1", "tuned", "tuned", 2000.0, 2e12, 1000.0), Point("k2", "tuned", "tuned", 20.0, 2e10, 50.0)]
    roofline = Roofline(points)
    x, y = roofline.place(points[0])
    x2, y2 = roofline.place(points[1])
    decade_x = (x - x2) / 2  # two decades of intensity apart
    decade_y = (y2 - y) / 2  # two decades of FLOP/s apart (y grows downwards)
    assert decade_x > 0 and decade_y > 0
    assert roofline.x(200.0) == pytest.approx(x - decade_x) and roofline.y(2e11) == pytest.approx(y + decade_y)
    top, right, bottom, left = roofline.margin
    assert left < x2 < x < roofline.width - right and top < y < y2 < roofline.height - bottom
    svg = ET.fromstring(roofline.svg("r", ["tuned"]))
    drawn = [e for e in svg.iter() if "point" in e.get("class", "").split()]
    assert [float(v) for e in drawn for v in (e.get("cx"), e.get("cy"))] == pytest.approx([x, y, x2, y2], abs=0.01)
    assert drawn[0].get("data-intensity") == "2000" and drawn[0].get("data-flops-per-s") == "2e+12"
    assert drawn[0].find("title").text == "k1\ntuned: 1 ms, 2 TFLOP/s, 2e+03 FLOP/byte"


def test_the_roof_meets_at_the_ridge_and_is_labelled():
    points = [Point("k", "tuned", "tuned", 50.0, 1e14, 10.0)]
    roofline = Roofline(points, peak_flops=989e12, peak_bandwidth=3350e9)
    assert roofline.ridge == pytest.approx(295.22, abs=0.01)
    svg = ET.fromstring(roofline.svg("r", ["tuned"]))
    by_class = {e.get("class"): e for e in svg.iter()}
    bandwidth, compute, ridge = by_class["roof roof-bandwidth"], by_class["roof roof-compute"], by_class["ridge"]
    rx, ry = roofline.x(roofline.ridge), roofline.y(989e12)
    assert (float(bandwidth.get("x2")), float(bandwidth.get("y2"))) == pytest.approx((rx, ry), abs=0.01)
    assert (float(compute.get("x1")), float(compute.get("y1"))) == pytest.approx((rx, ry), abs=0.01)
    assert float(compute.get("y2")) == pytest.approx(ry, abs=0.01)
    assert (float(ridge.get("cx")), float(ridge.get("cy"))) == pytest.approx((rx, ry), abs=0.01)
    # The bandwidth line has slope 1 in decades: y = bandwidth * intensity.
    ax, ay = float(bandwidth.get("x1")), float(bandwidth.get("y1"))
    start = 10 ** (math.log10(roofline.x.lo) + (ax - roofline.x.start) / (roofline.x.end - roofline.x.start)
                   * math.log10(roofline.x.hi / roofline.x.lo))
    assert roofline.y(3350e9 * start) == pytest.approx(ay, abs=0.01)
    labels = [e.text for e in svg.iter("text")]
    assert "ridge 295 FLOP/B" in labels and "989 TFLOP/s (peak compute)" in labels
    assert "3.35 TB/s (peak bandwidth)" in labels


def test_roofline_points_of_a_tune_are_default_tuned_and_torch(tmp_path):
    kernels = read_results(write_tune_csv(tmp_path / "tune.csv")).kernels
    points = roofline_points(kernels)
    conv = {p.series: p for p in points if p.kernel == CONV}
    assert set(conv) == {"default", "tuned", "torch"}
    assert conv["tuned"].flop_s == pytest.approx(7.4e9 / 265e-6)
    assert conv["torch"].intensity == conv["tuned"].intensity == pytest.approx(7.4e9 / 2.57e7)
    assert len(points) == 9


def test_bars_carry_their_ratios_and_log_lengths(tmp_path):
    conv, gemm, norm = read_results(write_tune_csv(tmp_path / "tune.csv")).kernels
    assert bar_note("tune", conv, conv.get("default")) == ""
    assert bar_note("tune", conv, conv.get("tuned")) == "6.88× faster than default"
    assert bar_note("tune", conv, conv.get("torch")) == "11× faster than tuned"
    assert bar_note("tune", norm, norm.get("tuned")) == "as fast as default"
    driver = read_results(write_driver_csv(tmp_path / "driver.csv")).kernels
    assert bar_note("driver", driver[0], driver[0].get("boo")) == "3.7× slower than torch"
    assert bar_note("driver", driver[0], driver[0].get("torch")) == ""
    bars = Bars([conv], "tune")
    svg = ET.fromstring(bars.svg("b", ["default", "tuned", "torch"]))
    rects = {e.get("data-series"): e for e in svg.iter("rect")}
    widths = {s: float(e.get("width")) for s, e in rects.items()}
    # Lengths are log-linear in time: the decade from 24 us to 240 us spans bars.scale's decade.
    decade = bars.scale(100.0) - bars.scale(10.0)
    assert widths["default"] - widths["torch"] == pytest.approx(decade * math.log10(1823 / 24), abs=0.02)
    assert widths["torch"] > 0 and len({e.get("x") for e in rects.values()}) == 1
    notes = [e.text for e in svg.iter("text") if e.get("class") == "bar-note"]
    assert notes == ["1.82 ms", "265 µs  (6.88× faster than default)", "24 µs  (11× faster than tuned)"]
    assert bar_note("driver", driver[1], driver[1].get("boo")) == "3.3× slower than torch"


def test_percent_of_peak_is_the_larger_fraction(tmp_path):
    conv = read_results(write_tune_csv(tmp_path / "tune.csv")).kernels[0]
    # 265 us: 27.9 TFLOP/s (2.8% of 989) and 97 GB/s (2.9% of 3350): the larger one.
    assert percent_of_peak(conv, 265.0, 989e12, 3350e9) == pytest.approx(100 * 2.57e7 / 265e-6 / 3350e9)
    assert percent_of_peak(conv, 265.0, 989e12, None) == pytest.approx(100 * 7.4e9 / 265e-6 / 989e12)
    assert percent_of_peak(conv, 265.0, None, None) is None


# -- the page -------------------------------------------------------------------------------------


def test_the_page_is_self_contained_and_has_both_sections(tmp_path):
    out = write_report([write_tune_csv(tmp_path / "tune.csv"), write_driver_csv(tmp_path / "driver.csv")],
                       tmp_path / "report.html", title="H100 <bf16>")
    html = out.read_text(encoding="utf-8")
    assert "http" not in html and " src=" not in html and "<link" not in html  # nothing to fetch
    assert "<title>H100 &lt;bf16&gt;</title>" in html
    assert html.count('<svg class="chart roofline"') == 2 and html.count('<svg class="chart bars"') == 2
    assert html.count('class="point') == 9 + 5 and html.count('class="bar') - html.count('class="bar-') == 9 + 5
    assert "3 kernels; 8 candidates, 1 wrong; geometric mean speed-up over default 2.23×" in html
    assert "geometric mean boo/torch 3.7×" in html  # the wrong gemm run left out and "peaks unknown" in html
    # The tune CSV's peaks draw the tune roof only; the driver section (another device) has none.
    assert html.count("roof-compute") == 1 and "Peaks unknown or partial" in html
    assert "✗ wrong</td>" in html and "✗ compile error</td>" in html and html.count("★ winner</td>") == 3


def test_given_peaks_override_the_recorded_ones_and_apply_to_every_section(tmp_path):
    # 1000 TFLOP/s: above every rate the files measured (the tune's torch gemm reaches 763).
    html = build_report([read_results(write_tune_csv(tmp_path / "t.csv", peaks=False)),
                         read_results(write_driver_csv(tmp_path / "d.csv"))], peak_tflops=1000, peak_gbps=10000)
    assert html.count('class="roof roof-compute" data-tflops="1000"') == 2
    assert html.count('data-gbps="10000"') == 2 and "ridge 100 FLOP/B" in html and "peak-raised" not in html


def test_no_compute_peak_is_drawn_below_a_rate_the_report_measured(tmp_path):
    """A recorded peak (one matmul, timed once) below what torch reached on a kernel of the
    same report is raised to that rate; a wrong run's rate raises nothing."""
    rows = tune_rows()
    for row in rows:
        row["peak_tflops"] = "500"
    html = build_report([read_results(write_csv(tmp_path / "t.csv", TUNE_COLUMNS, rows))])
    gemm_torch = TUNE[GEMM][2] / (TUNE[GEMM][4] * 1e-6)  # 763 TFLOP/s
    assert html.count(f'class="roof roof-compute" data-tflops="{gemm_torch / 1e12:.6g}"') == 1
    assert (f"The compute peak given or recorded (500 TFLOP/s) is below the best rate measured here (763 TFLOP/s: "
            f"torch, {GEMM}); the roof is drawn at the measured rate.") in html
    assert "peaks 763 TFLOP/s and 3.35 TB/s" in html
    assert f"{PEAK_TFLOPS:g}" not in re.findall(r'data-tflops="([^"]+)"', html)
    best_correct = max(p.flop_s for p in roofline_points(read_results(tmp_path / "t.csv").kernels) if p.ok)
    assert best_correct == pytest.approx(gemm_torch)


def test_a_raised_peak_keeps_unknown_peaks_unknown():
    points = [Point("k", "torch", "torch", 50.0, 2e12, 10.0), Point("k", "bad", "bad", 50.0, 9e12, 1.0, ok=False)]
    assert raised_peak(points, None) == (None, None)
    assert raised_peak(points, 1e12) == (2e12, points[0])
    assert raised_peak(points, 3e12) == (3e12, None)


class Tables(HTMLParser):
    """Each table of a page: its class and its body rows as (row class, cell texts)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tables: list[tuple[str, list[tuple[str, list[str]]]]] = []
        self._row: tuple[str, list[str]] | None = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append((dict(attrs)["class"], []))
        elif tag == "tr":
            self._row = (dict(attrs).get("class") or "", [])
        elif tag in ("td", "th") and self._row is not None:
            self._row[1].append("")

    def handle_endtag(self, tag):
        if tag == "tr" and self._row is not None:
            self.tables[-1][1].append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._row is not None and self._row[1]:
            self._row[1][-1] += data


def test_every_kernel_and_candidate_is_tabled(tmp_path):
    html = build_report([read_results(write_tune_csv(tmp_path / "tune.csv"))])
    (summary_class, summary), (rows_class, rows) = Tables(html).tables
    assert (summary_class, rows_class) == ("sortable summary", "sortable rows")
    assert summary[0][1][:8] == ["kernel", "op", "mode", "device", "target", "winner", "default", "tuned"]
    assert summary[1] == ("", [CONV, "conv", "fwd", "NVIDIA H100 80GB HBM3", "cuda:sm_90", "im2col", "1.82 ms",
                               "265 µs", "6.88×", "24 µs", "11×", "27.92", "96.98", "2.9"])
    assert len(summary) == 1 + len(TUNE)
    assert rows[0][1][:4] == ["flag", "func_name", "candidate", "formulation"]
    flagged = [(cls, cells[0], cells[1], cells[2]) for cls, cells in rows[1:]]
    assert len(flagged) == sum(len(c[-1]) for c in TUNE.values())
    assert flagged[:4] == [("", "", CONV, "default"), ("winner", "★ winner", CONV, "im2col"),
                           ("flagged", "✗ wrong", CONV, "default/wg128x128_k64_s3"),
                           ("flagged", "✗ compile error", CONV, "explicit_pad")]
    assert ("muted", "not timed", NORM, "default/rows8") in flagged
    assert '<td data-v="6.879245' in html  # the speed-up sorts as a number


def test_a_csv_the_real_tuner_wrote_is_reported(private_cache, tmp_path):
    wrong_fast = Formulation("wrong_fast", mlir=lambda: TRIPLE.format(name=signature.func_name, n=signature.size))
    plugin = ScalePlugin(formulations=lambda s, t: (Formulation("default"), wrong_fast,
                                                    Formulation("halved", computation=lambda x: (x * 0.5) * 4.0)))
    signature = ScaleSignature(4096)
    with isolated_registry({"scale": plugin}):
        [result] = Tuner(TuneOptions(iterations=3, warmup=1)).tune([(signature.to_command(), signature)])
    path = write_csv(tmp_path / "tune.csv", TUNE_COLUMNS, tune.tune_rows(result, Peaks(0.05, 5.0)))
    results = read_results(path)
    [kernel] = results.kernels
    assert (results.kind, results.peak_tflops, results.peak_gbps) == ("tune", 0.05, 5.0)
    assert [(t.series, t.label, t.ok) for t in kernel.timed] == [
        ("default", "default", True), ("tuned", f"tuned: {result.winner}", True), ("torch", "torch", True)]
    assert kernel.get("tuned").time_us == pytest.approx(result.result(result.winner).time_us, rel=1e-3)
    assert not kernel.warnings
    assert [row["candidate"] for row in results.rows if row["baseline"] == "1"] == [result.baseline]
    flags = {row["candidate"]: row_flag("tune", row)[1] for row in results.rows}
    assert flags["wrong_fast"] == "✗ wrong" and flags[result.winner] == "★ winner"
    html = build_report([results])
    assert html.count('class="point"') == 3 and 'data-tflops="0.05"' in html


# -- the verb -------------------------------------------------------------------------------------


def test_boo_report_writes_the_page(tmp_path, capsys):
    tune, out = write_tune_csv(tmp_path / "tune.csv"), tmp_path / "out" / "r.html"
    out.parent.mkdir()
    assert main(["report", str(tune), "-o", str(out), "--title", "T", "--peak-tflops", "1000"]) == 0
    assert capsys.readouterr().out == f"report written to {out}\n"
    html = out.read_text(encoding="utf-8")
    assert "<h1>T</h1>" in html and 'data-tflops="1000"' in html and 'data-gbps="3350"' in html
    assert main(["report", str(tune)]) == 0  # default output: next to the CSV
    assert (tmp_path / "tune.html").is_file()


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing.csv", "{p}/missing.csv: no such file"),
    (lambda p: write_csv(p / "n.csv", NUMERICS_COLUMNS, [{"status": "PASS"}]),
     "{p}/n.csv: neither a tune CSV nor a driver CSV: missing driver column(s)"),
])
def test_boo_report_exits_2_for_a_missing_or_wrong_csv(tmp_path, capsys, make, message):
    good = write_tune_csv(tmp_path / "tune.csv")
    assert main(["report", str(good), str(make(tmp_path)), "-o", str(tmp_path / "r.html")]) == 2
    assert f"boo report: error: {message.format(p=tmp_path)}" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_boo_report_refuses_a_bad_peak_and_an_unwritable_output(tmp_path, capsys):
    tune = write_tune_csv(tmp_path / "tune.csv")
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tune), "--peak-gbps", "-3"])
    assert exit_info.value.code == 2 and "must be positive, got -3" in capsys.readouterr().err
    assert main(["report", str(tune), "-o", str(tmp_path / "no" / "r.html")]) == 2
    assert f"boo report: error: {tmp_path}/no/r.html: cannot write the report" in capsys.readouterr().err


def test_boo_report_explains_itself(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    text = capsys.readouterr().out
    for option in ("RESULTS.csv", "-o FILE.html", "--title", "--peak-tflops X", "--peak-gbps Y", "Examples:"):
        assert option in text


def test_driver_series_order_follows_the_csv(tmp_path):
    html = build_report([read_results(write_driver_csv(tmp_path / "d.csv"))])
    assert html.index('data-series="boo"') < html.index('data-series="torch"') < html.index('data-series="inductor"')
    assert len(DRIVER) == 2
