"""``boo report`` opened in a real headless browser (Debian's chromium; .ci/run installs it).

The report is made by the console script from a tune CSV, a driver CSV written here and a
driver CSV that ``boo driver`` really wrote. A probe script appended to a copy of the page
measures what the browser laid out (every roofline point and bar, the roof lines, the
plot area), clicks a table header, and writes the result into the DOM that
``--dump-dom`` prints. Charts that were empty, broken, or placed points wrongly would fail.
"""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from ..boo_core.report_csvs import CONV, timed_measurements, write_driver_csv, write_tune_csv
from .test_cli import boo, rows

CHROMIUM = shutil.which("chromium")
# Without the background-networking switches chromium dials out, which this network refuses.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,2000")

PROBE = """<script>
(function () {
  function box(el) { var r = el.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; }
  var out = {charts: [], sorted: []};
  document.querySelectorAll("svg.chart").forEach(function (svg) {
    var area = svg.querySelector(".plot-area");
    var chart = {kind: svg.classList.contains("roofline") ? "roofline" : "bars", section: svg.closest("section").id,
                 box: box(svg), area: area ? box(area) : null, items: [], roof: {}};
    svg.querySelectorAll(".point, .bar").forEach(function (el) {
      chart.items.push({flagged: el.classList.contains("flagged"), kernel: el.dataset.kernel,
                        series: el.dataset.series, intensity: parseFloat(el.dataset.intensity),
                        flops: parseFloat(el.dataset.flopsPerS), time: parseFloat(el.dataset.timeUs),
                        box: box(el), tooltip: el.querySelector("title").textContent});
    });
    svg.querySelectorAll(".roof-compute, .roof-bandwidth, .ridge").forEach(function (el) {
      chart.roof[el.getAttribute("class").split(" ").pop()] = box(el);
    });
    out.charts.push(chart);
  });
  var table = document.querySelector("section.tune table.rows");
  var header = Array.prototype.find.call(table.tHead.rows[0].cells, function (th) {
    return th.textContent === "time_us"; });
  header.click();
  Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
    out.sorted.push(row.cells[header.cellIndex].textContent); });
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def measure_in_chromium(page: Path) -> dict:
    """Open ``page`` plus the probe in chromium; what the probe measured."""
    probed = page.with_name("probed.html")
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="boo-chromium-") as profile:
        result = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", probed.as_uri()],
                                capture_output=True, text=True, timeout=60)
    found = re.search(r'<pre id="probe">(.*?)</pre>', result.stdout, re.S)
    assert found, f"no probe output (exit {result.returncode}): {result.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def centre(item: dict) -> tuple[float, float]:
    left, top, width, height = item["box"]
    return left + width / 2, top + height / 2


def assert_linear(xs: list[float], ys: list[float], increasing: bool) -> None:
    """``ys`` lie on one line of ``xs`` (within a pixel), of the given direction."""
    low, high = xs.index(min(xs)), xs.index(max(xs))
    slope = (ys[high] - ys[low]) / (xs[high] - xs[low])
    assert (slope > 0) == increasing, slope
    for x, y in zip(xs, ys):
        assert abs(ys[low] + slope * (x - xs[low]) - y) < 1.0, (x, y)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, Path]:
    """The report of three CSVs, made by ``boo report``; and the CSV ``boo driver`` wrote."""
    directory = tmp_path_factory.mktemp("report")
    real = directory / "real-driver.csv"
    ran = boo("driver", "gemm", "-m", "32", "-n", "48", "-k", "16", "--backend", "boo", "--backend", "torch",
              "--iter", "3", "--warmup", "1", "--csv", str(real))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    page = directory / "report.html"
    made = boo("report", str(write_tune_csv(directory / "tune.csv")), str(write_driver_csv(directory / "driver.csv")),
               str(real), "-o", str(page), "--title", "browser check")
    assert made.returncode == 0 and made.stdout == f"report written to {page}\n", made.stdout + made.stderr
    return page, real


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium; .ci/run installs it)")
def test_the_charts_are_drawn_where_the_numbers_say(report):
    page, real = report
    probe = measure_in_chromium(page)
    charts = {(c["section"], c["kind"]): c for c in probe["charts"]}
    assert sorted(charts) == [("driver", "bars"), ("driver", "roofline"), ("tune", "bars"), ("tune", "roofline")]
    tune_count, driver_count = timed_measurements()
    driver_count += len(rows(real))  # the real run: boo and torch, both timed
    for (section, kind), chart in charts.items():
        assert chart["box"][2] > 300 and chart["box"][3] > 100, (section, kind)
        items = chart["items"]
        assert len(items) == (tune_count if section == "tune" else driver_count), (section, kind)
        for item in items:
            assert item["box"][2] > 0 and item["box"][3] > 0, item
            assert item["kernel"] in item["tooltip"] and re.search(r"\d (µs|ms|s)\b", item["tooltip"]), item
        if kind == "roofline":
            left, top, width, height = chart["area"]
            for item in items:
                x, y = centre(item)
                assert left <= x <= left + width and top <= y <= top + height, item
            # Log-log axes: the centres are linear in log(intensity) and log(FLOP/s).
            xs, ys = zip(*(centre(i) for i in items))
            assert_linear([math.log10(i["intensity"]) for i in items], list(xs), increasing=True)
            assert_linear([math.log10(i["flops"]) for i in items], list(ys), increasing=False)
        else:
            # Bars start together, inside the chart, and their lengths are linear in log(time).
            assert len({round(i["box"][0], 1) for i in items}) == 1
            assert all(i["box"][0] + i["box"][2] <= chart["box"][0] + chart["box"][2] for i in items)
            assert_linear([math.log10(i["time"]) for i in items], [i["box"][2] for i in items], increasing=True)

    # The tune's peaks draw the roof: the bandwidth line rises to the ridge, where the compute line starts.
    roof = charts[("tune", "roofline")]["roof"]
    assert set(roof) == {"roof-compute", "roof-bandwidth", "ridge"}
    assert roof["roof-compute"][2] > 50 and roof["roof-bandwidth"][2] > 50 and roof["roof-bandwidth"][3] > 50
    ridge_x, ridge_y = centre({"box": roof["ridge"]})
    assert ridge_x == pytest.approx(roof["roof-compute"][0], abs=1.5)
    assert ridge_y == pytest.approx(roof["roof-compute"][1], abs=1.5)
    assert ridge_x == pytest.approx(roof["roof-bandwidth"][0] + roof["roof-bandwidth"][2], abs=1.5)
    assert charts[("driver", "roofline")]["roof"] == {}  # no peaks known for the driver's device

    # The conv's wrong-but-fastest candidate is in the table, flagged, but is not the tuned point.
    tune_points = charts[("tune", "roofline")]["items"]
    conv = {i["series"]: i for i in tune_points if i["kernel"] == CONV}
    assert conv["tuned"]["time"] == 265.0 and not conv["tuned"]["flagged"]
    assert centre(conv["tuned"])[1] < centre(conv["default"])[1]  # faster: higher up
    # The failing driver run (numerics out of tolerance) is drawn, flagged.
    assert sum(i["flagged"] for i in charts[("driver", "roofline")]["items"]) == 1

    # Clicking a header sorted the table by that column, empty cells last.
    times = [float(t) for t in probe["sorted"] if t]
    assert times == sorted(times) and probe["sorted"][len(times):] == [""] * (len(probe["sorted"]) - len(times))
