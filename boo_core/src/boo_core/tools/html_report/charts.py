"""The two charts, as inline SVG: the roofline and the per-kernel time bars.

Every drawn datum carries ``data-*`` attributes (kernel, series, its numbers), so a test in
a browser can find each point and bar and check where it was drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .results import Kernel, Kind, Timed, achieved_flops
from .svg import LogScale, duration, ratio, si, tag, text, title

#: (colour, marker) per series; other series get the last entries of FALLBACK in turn.
STYLES: dict[str, tuple[str, str]] = {
    "tuned": ("#1f63b4", "circle"), "default": ("#e07b00", "ring"), "torch": ("#2a9d3a", "diamond"),
    "boo": ("#1f63b4", "circle"), "inductor": ("#8e44ad", "square"), "boo_inductor": ("#c0392b", "triangle"),
}
FALLBACK: tuple[tuple[str, str], ...] = (("#7f7f7f", "circle"), ("#17becf", "square"), ("#bcbd22", "triangle"))
FLAGGED = "#d62728"


def style(series: str, order: Sequence[str] = ()) -> tuple[str, str]:
    """Colour and marker of a series (stable for the known ones)."""
    if series in STYLES:
        return STYLES[series]
    unknown = [s for s in order if s not in STYLES]
    return FALLBACK[(unknown.index(series) if series in unknown else 0) % len(FALLBACK)]


def marker(shape: str, x: float, y: float, color: str, size: float = 5.5, **extra: object) -> str:
    """A point marker centred on (x, y); ``extra`` attributes and a ``content`` child go on it."""
    content = str(extra.pop("content", ""))
    paint = {"fill": color, "stroke": "#fff", "stroke_width": 1}
    if shape == "ring":
        paint = {"fill": "#fff", "stroke": color, "stroke_width": 2.2}
    if shape in ("circle", "ring"):
        return tag("circle", content, cx=x, cy=y, r=size, **paint, **extra)
    if shape == "square":
        return tag("rect", content, x=x - size, y=y - size, width=2 * size, height=2 * size, **paint, **extra)
    if shape == "diamond":
        s = size * 1.3
        corners = [(x, y - s), (x + s, y), (x, y + s), (x - s, y)]
    else:  # triangle
        s = size * 1.25
        corners = [(x, y - s), (x + s, y + s * 0.8), (x - s, y + s * 0.8)]
    points = " ".join(f"{px:.2f},{py:.2f}" for px, py in corners)
    return tag("polygon", content, points=points, **paint, **extra)


def legend(series: Sequence[str]) -> str:
    """An HTML legend: each series' marker and name, plus the flagged style."""
    items = []
    for name in series:
        color, shape = style(name, series)
        items.append(f'<span class="key"><svg width="16" height="16" viewBox="0 0 16 16">'
                     f'{marker(shape, 8, 8, color, 5)}</svg>{text(name)}</span>')
    items.append(f'<span class="key"><svg width="16" height="16" viewBox="0 0 16 16">'
                 f'{marker("circle", 8, 8, FLAGGED, 5)}</svg>wrong or failed (flagged)</span>')
    return f'<div class="legend">{"".join(items)}</div>'


# -- roofline -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One measured kernel on the roofline."""

    kernel: str
    series: str
    label: str
    intensity: float
    flop_s: float
    time_us: float
    ok: bool = True


def roofline_points(kernels: Sequence[Kernel], series: Sequence[str] | None = None) -> list[Point]:
    """A point per timed measurement of each kernel with known FLOP and byte counts."""
    points = []
    for kernel in kernels:
        intensity = kernel.intensity
        if intensity is None or kernel.flops is None:
            continue
        for timed in kernel.timed:
            if timed.time_us and timed.time_us > 0 and (series is None or timed.series in series):
                points.append(Point(kernel.name, timed.series, timed.label, intensity,
                                    achieved_flops(kernel.flops, timed.time_us), timed.time_us, timed.ok))
    return points


def raised_peak(points: Sequence[Point], peak_flops: float | None) -> tuple[float | None, Point | None]:
    """The compute peak to draw: ``peak_flops`` or, where a correct measurement went faster
    (a peak measured once, by another matmul, is no ceiling), the best measured rate; and
    the point that raised it (None where none did). An unknown peak stays unknown."""
    correct = [p for p in points if p.ok and math.isfinite(p.flop_s)]
    best = max(correct, key=lambda p: p.flop_s, default=None)
    if peak_flops and best is not None and best.flop_s > peak_flops:
        return best.flop_s, best
    return peak_flops, None


@dataclass
class Roofline:
    """The roofline chart's layout: log axes covering the points, the peaks and the ridge.

    ``peak_flops`` in FLOP/s, ``peak_bandwidth`` in bytes/s; either may be unknown.
    """

    points: list[Point]
    peak_flops: float | None = None
    peak_bandwidth: float | None = None
    width: float = 760
    height: float = 470
    margin: tuple[float, float, float, float] = (20, 30, 56, 92)  # top, right, bottom, left
    x: LogScale = field(init=False)
    y: LogScale = field(init=False)

    def __post_init__(self) -> None:
        top, right, bottom, left = self.margin
        xs = [p.intensity for p in self.points]
        ys = [p.flop_s for p in self.points]
        if self.ridge is not None:
            xs.append(self.ridge)
        if self.peak_flops:
            ys.append(self.peak_flops)
        elif self.peak_bandwidth and xs:
            ys.append(self.peak_bandwidth * max(xs))
        self.x = LogScale.padded(xs or [1.0], left, self.width - right)
        self.y = LogScale.padded(ys or [1.0], self.height - bottom, top)

    @property
    def ridge(self) -> float | None:
        """The intensity (FLOP/byte) where the bandwidth line meets the compute peak."""
        if self.peak_flops and self.peak_bandwidth:
            return self.peak_flops / self.peak_bandwidth
        return None

    def place(self, point: Point) -> tuple[float, float]:
        """Pixel coordinates of a point."""
        return self.x(point.intensity), self.y(point.flop_s)

    def svg(self, ident: str, series_order: Sequence[str]) -> str:
        """The chart; ``ident`` is unique in the page."""
        top, right, bottom, left = self.margin
        x0, x1, y0, y1 = left, self.width - right, top, self.height - bottom
        parts = [tag("rect", x=x0, y=y0, width=x1 - x0, height=y1 - y0, class_="plot-area")]
        for value in self.x.ticks():
            px = self.x(value)
            parts.append(tag("line", x1=px, y1=y0, x2=px, y2=y1, class_="grid"))
            parts.append(tag("text", text(_intensity_label(value)), x=px, y=y1 + 16, class_="tick",
                             text_anchor="middle"))
        for value in self.y.ticks():
            py = self.y(value)
            parts.append(tag("line", x1=x0, y1=py, x2=x1, y2=py, class_="grid"))
            parts.append(tag("text", text(si(value, "FLOP/s")), x=x0 - 6, y=py + 4, class_="tick",
                             text_anchor="end"))
        parts.append(tag("text", "arithmetic intensity (FLOP per byte moved)", x=(x0 + x1) / 2,
                         y=self.height - 14, class_="axis-label", text_anchor="middle"))
        parts.append(tag("text", "achieved FLOP/s", x=16, y=(y0 + y1) / 2, class_="axis-label",
                         text_anchor="middle", transform=f"rotate(-90 16 {(y0 + y1) / 2:.2f})"))
        parts.extend(self._roof())
        parts.extend(self._links(series_order))
        for point in self.points:
            parts.append(self._marker(point, series_order))
        return (f'<svg class="chart roofline" id="{ident}" viewBox="0 0 {self.width:.0f} {self.height:.0f}" '
                f'width="{self.width:.0f}" height="{self.height:.0f}" role="img" '
                f'aria-label="roofline">{"".join(parts)}</svg>')

    def _roof(self) -> list[str]:
        parts = []
        x_lo, x_hi, y_lo, y_hi = self.x.lo, self.x.hi, self.y.lo, self.y.hi
        if self.peak_bandwidth:
            bw = self.peak_bandwidth
            start = max(x_lo, y_lo / bw)
            end = min(self.ridge or x_hi, x_hi, y_hi / bw)
            if start < end:
                (ax, ay), (bx, by) = (self.x(start), self.y(bw * start)), (self.x(end), self.y(bw * end))
                parts.append(tag("line", title(f"peak bandwidth {si(bw, 'B/s')}"), x1=ax, y1=ay, x2=bx, y2=by,
                                 class_="roof roof-bandwidth", data_gbps=f"{bw / 1e9:.6g}"))
                angle = math.degrees(math.atan2(by - ay, bx - ax))
                lx, ly = ax + (bx - ax) * 0.3, ay + (by - ay) * 0.3 - 6
                parts.append(tag("text", text(f"{si(bw, 'B/s')} (peak bandwidth)"), x=lx, y=ly, class_="roof-label",
                                 transform=f"rotate({angle:.2f} {lx:.2f} {ly:.2f})"))
        if self.peak_flops:
            start = self.ridge if self.ridge and self.ridge > x_lo else x_lo
            ax, bx, py = self.x(start), self.x(x_hi), self.y(self.peak_flops)
            parts.append(tag("line", title(f"peak compute {si(self.peak_flops, 'FLOP/s')}"), x1=ax, y1=py, x2=bx,
                             y2=py, class_="roof roof-compute", data_tflops=f"{self.peak_flops / 1e12:.6g}"))
            parts.append(tag("text", text(f"{si(self.peak_flops, 'FLOP/s')} (peak compute)"), x=bx - 4, y=py - 6,
                             class_="roof-label", text_anchor="end"))
        if self.ridge:
            rx, ry = self.x(self.ridge), self.y(self.peak_flops or 1.0)
            parts.append(tag("circle", title(f"ridge point: {self.ridge:.3g} FLOP/byte"), cx=rx, cy=ry, r=4,
                             class_="ridge", data_intensity=f"{self.ridge:.6g}"))
            parts.append(tag("text", text(f"ridge {self.ridge:.3g} FLOP/B"), x=rx + 6, y=ry + 16,
                             class_="roof-label ridge-label"))
        return parts

    def _links(self, series_order: Sequence[str]) -> list[str]:
        """A thin line from each kernel's default point to its tuned one (tune results)."""
        by_kernel: dict[str, dict[str, Point]] = {}
        for point in self.points:
            by_kernel.setdefault(point.kernel, {})[point.series] = point
        parts = []
        for series in by_kernel.values():
            if "default" in series and "tuned" in series:
                (ax, ay), (bx, by) = self.place(series["default"]), self.place(series["tuned"])
                parts.append(tag("line", x1=ax, y1=ay, x2=bx, y2=by, class_="link"))
        return parts

    def _marker(self, point: Point, series_order: Sequence[str]) -> str:
        color, shape = style(point.series, series_order)
        flagged = "" if point.ok else " (WRONG or FAILED: not a valid result)"
        tooltip = (f"{point.kernel}\n{point.label}{flagged}: {duration(point.time_us)}, "
                   f"{si(point.flop_s, 'FLOP/s')}, {point.intensity:.3g} FLOP/byte")
        x, y = self.place(point)
        return marker(shape, x, y, FLAGGED if not point.ok else color, content=title(tooltip),
                      class_="point" + ("" if point.ok else " flagged"), data_kernel=point.kernel,
                      data_series=point.series, data_intensity=f"{point.intensity:.6g}",
                      data_flops_per_s=f"{point.flop_s:.6g}", data_time_us=f"{point.time_us:.6g}")


def _intensity_label(value: float) -> str:
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


# -- bars -----------------------------------------------------------------------------------------


def _against(timed: Timed, reference: Timed | None) -> str:
    if reference is None or not reference.time_us or not timed.time_us:
        return ""
    speedup = reference.time_us / timed.time_us
    if abs(speedup - 1) < 0.005:
        return f"as fast as {reference.series}"
    faster = f"{ratio(speedup)} faster" if speedup >= 1 else f"{ratio(1 / speedup)} slower"
    return f"{faster} than {reference.series}"


def bar_note(kind: Kind, kernel: Kernel, timed: Timed) -> str:
    """The ratio written next to a bar: tuned against default and torch against tuned (tune),
    each backend against torch, else against the first backend (driver)."""
    if kind == "tune":
        reference = {"tuned": kernel.get("default"), "torch": kernel.get("tuned") or kernel.get("default")}
        return _against(timed, reference.get(timed.series))
    if timed.series == kernel.reference:
        return ""
    return _against(timed, kernel.get(kernel.reference))


@dataclass
class Bars:
    """Per-kernel horizontal bars of time on one log axis (readable from 1× to 1000×)."""

    kernels: list[Kernel]
    kind: Kind
    width: float = 980
    label_width: float = 200
    bar_span: float = 470
    bar_height: float = 15
    gap: float = 4
    header: float = 22
    axis: float = 30

    def __post_init__(self) -> None:
        times = [t.time_us for k in self.kernels for t in k.timed if t.time_us and t.time_us > 0]
        self.scale = LogScale.covering(times or [1.0], self.label_width, self.label_width + self.bar_span,
                                       pad_below=True)

    @property
    def height(self) -> float:
        rows = sum(len(k.timed) for k in self.kernels)
        return self.axis + len(self.kernels) * (self.header + 10) + rows * (self.bar_height + self.gap) + 10

    def svg(self, ident: str, series_order: Sequence[str]) -> str:
        x0, bottom = self.label_width, self.height - 6
        parts = []
        for value in self.scale.decades():
            px = self.scale(value)
            parts.append(tag("line", x1=px, y1=self.axis - 6, x2=px, y2=bottom, class_="grid"))
            parts.append(tag("text", text(duration(value)), x=px, y=self.axis - 10, class_="tick",
                             text_anchor="middle"))
        y = self.axis
        for kernel in self.kernels:
            parts.append(tag("text", text(kernel.name) + title(_kernel_title(kernel)), x=8, y=y + 15,
                             class_="kernel-name"))
            y += self.header
            for timed in kernel.timed:
                parts.append(self._bar(kernel, timed, x0, y, series_order))
                y += self.bar_height + self.gap
            y += 10
        parts.append(tag("line", x1=x0, y1=self.axis - 6, x2=x0, y2=bottom, class_="axis"))
        return (f'<svg class="chart bars" id="{ident}" viewBox="0 0 {self.width:.0f} {self.height:.0f}" '
                f'width="{self.width:.0f}" height="{self.height:.0f}" role="img" aria-label="time per kernel">'
                f'{"".join(parts)}</svg>')

    def _bar(self, kernel: Kernel, timed: Timed, x0: float, y: float, series_order: Sequence[str]) -> str:
        color = style(timed.series, series_order)[0]
        short = timed.label if len(timed.label) <= 30 else timed.label[:29] + "…"
        label = tag("text", text(short) + title(timed.label), x=x0 - 8, y=y + self.bar_height - 3, class_="bar-label",
                    text_anchor="end")
        if not timed.time_us or timed.time_us <= 0:
            why = timed.note or "not timed"
            return label + tag("text", text(f"no time ({why})"), x=x0 + 6, y=y + self.bar_height - 3,
                               class_="bar-note flagged-text" if not timed.ok else "bar-note")
        end = self.scale(timed.time_us)
        note = bar_note(self.kind, kernel, timed)
        wrong = "" if timed.ok else f" ✗ {timed.note}"
        tooltip = f"{kernel.name}\n{timed.label}: {duration(timed.time_us)}" + (f", {note}" if note else "") + wrong
        bar = tag("rect", title(tooltip), x=x0, y=y, width=end - x0, height=self.bar_height,
                  fill=color if timed.ok else "url(#hatch)", class_="bar" + ("" if timed.ok else " flagged"),
                  data_kernel=kernel.name, data_series=timed.series, data_time_us=f"{timed.time_us:.6g}")
        words = duration(timed.time_us) + (f"  ({note})" if note else "") + wrong
        return label + bar + tag("text", text(words), x=end + 6, y=y + self.bar_height - 3,
                                 class_="bar-note" + ("" if timed.ok else " flagged-text"))


def _kernel_title(kernel: Kernel) -> str:
    where = ", ".join(v for v in (kernel.op, kernel.mode, kernel.device, kernel.target) if v)
    cost = ""
    if kernel.flops is not None and kernel.bytes is not None:
        cost = f"; {si(kernel.flops, 'FLOP')}, {si(kernel.bytes, 'B')} per call"
    return f"{kernel.name} ({where}){cost}"


def hatch_pattern() -> str:
    """The fill of flagged bars: red diagonal stripes (define once per page)."""
    return ('<svg width="0" height="0" style="position:absolute"><defs><pattern id="hatch" width="6" height="6" '
            'patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
            f'<rect width="6" height="6" fill="#fbe3e3"/><rect width="3" height="6" fill="{FLAGGED}"/>'
            '</pattern></defs></svg>')

