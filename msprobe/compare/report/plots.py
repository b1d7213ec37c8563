"""The report's plots as SVG data URIs, written directly (no plotting library: drawing a few hundred
shapes as text costs milliseconds, importing and running a plotting library seconds).

Both plots share one log10 x axis convention: ratios of 0 have no logarithm and are drawn at their own
``0`` tick, ``ZERO_GAP`` decades left of the smallest nonzero value (or of 10^0); the other ticks show
the ratios as powers of ten. Elements carry classes for tools and tests: ``tick`` (with ``data-x``, the
log10 position), ``bar``, ``zero-bar`` (``data-count``), ``bound``, ``point``, ``box``, ``legend``,
``xlabel``, ``ylabel``, ``ylabels``, ``title``.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from html import escape

import numpy as np

COLORS = {"pass": "#3a923a", "error": "#c0392b", "SKIP": "#999999", "missing": "#e67e22"}
ZERO_COLOR = "#999999"
BAR_COLOR = "#4a7ab5"
ZERO_GAP = 1.0
BINS = 40
FONT = "font-family='DejaVu Sans,Arial,sans-serif'"

XLABEL_FAMILY = "worst NPU/GPU ratio of the API ÷ its error bound (log scale; 0 at grey tick)"

# panel geometry (px): plot area inside the margins
PANEL_W, PANEL_H = 380, 250
LEFT, RIGHT, TOP, BOTTOM = 52, 12, 26, 44


def zero_position(values: np.ndarray) -> float:
    """Where on the log10 axis ratios of 0 are drawn: a whole decade left of every nonzero value."""
    positive = values[values > 0]
    low = float(np.log10(positive.min())) if len(positive) else 0.0
    return math.floor(min(low, 0.0)) - ZERO_GAP


def _uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def _svg(width: float, height: float, body: Sequence[str]) -> str:
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
        f"viewBox='0 0 {width:.0f} {height:.0f}' {FONT} font-size='10'>"
        f"<rect width='100%' height='100%' fill='white'/>{''.join(body)}</svg>"
    )


def _text(
    x: float, y: float, text: str, cls: str, anchor: str = "middle", size: int = 9, extra: str = ""
) -> str:
    return (
        f"<text class='{cls}' x='{x:.1f}' y='{y:.1f}' text-anchor='{anchor}' font-size='{size}'{extra}>"
        f"{escape(text)}</text>"
    )


def _power(x: float, y: float, exponent: int, position: float) -> str:
    return (
        f"<text class='tick' data-x='{position:g}' x='{x:.1f}' y='{y:.1f}' text-anchor='middle' "
        f"font-size='8'>10<tspan dy='-4' font-size='6'>{exponent}</tspan></text>"
    )


class _Axis:
    """A linear map from data to pixels on one axis."""

    def __init__(self, low: float, high: float, start: float, end: float) -> None:
        if high <= low:
            low, high = low - 0.5, high + 0.5
        self.low, self.high, self.start, self.end = low, high, start, end

    def __call__(self, v: float | np.ndarray) -> np.ndarray:
        return self.start + (np.asarray(v, dtype=np.float64) - self.low) / (self.high - self.low) * (
            self.end - self.start
        )


def _decade_ticks(x: _Axis, y_at: float, zero_at: float | None) -> list[str]:
    """Integer decades inside the axis (at most 8, evenly thinned), plus the ``0`` tick."""
    first = math.ceil(x.low if zero_at is None else max(x.low, zero_at + 0.5))
    decades = list(range(first, math.floor(x.high) + 1))
    step = max(1, math.ceil(len(decades) / 8))
    out = []
    for d in decades[::step]:
        px = float(x(d))
        out.append(f"<line x1='{px:.1f}' x2='{px:.1f}' y1='{y_at:.1f}' y2='{y_at + 3:.1f}' stroke='#333'/>")
        out.append(_power(px, y_at + 13, d, d))
    if zero_at is not None:
        px = float(x(zero_at))
        out.append(f"<line x1='{px:.1f}' x2='{px:.1f}' y1='{y_at:.1f}' y2='{y_at + 3:.1f}' stroke='#333'/>")
        out.append(_text(px, y_at + 13, "0", "tick", size=8, extra=f" data-x='{zero_at:g}'"))
    return out


def _frame(ox: float, oy: float, w: float, h: float) -> str:
    return f"<rect x='{ox:.1f}' y='{oy:.1f}' width='{w:.1f}' height='{h:.1f}' fill='none' stroke='#333'/>"


def _legend(x: float, y: float, entries: Sequence[tuple[str, str, bool]]) -> list[str]:
    """Legend entries (text, colour, dashed line instead of a box), top-left at (x, y)."""
    out = []
    for i, (label, color, dashed) in enumerate(entries):
        yy = y + 11 * i
        mark = (
            f"<line x1='{x:.1f}' x2='{x + 12:.1f}' y1='{yy:.1f}' y2='{yy:.1f}' stroke='{color}' "
            "stroke-dasharray='3,2' stroke-width='1.5'/>"
            if dashed
            else f"<rect x='{x:.1f}' y='{yy - 4:.1f}' width='12' height='7' fill='{color}'/>"
        )
        out.append(mark + _text(x + 16, yy + 3, label, "legend", anchor="start", size=7))
    return out


def _histogram(ox: float, oy: float, values: np.ndarray, bound: float, title: str) -> list[str]:
    positive = values[values > 0]
    zeros = int(len(values) - len(positive))
    logs = np.log10(positive)
    at = zero_position(values) if zeros else None
    lows = [float(logs.min())] if len(logs) else []
    highs = [float(logs.max())] if len(logs) else []
    line = math.log10(bound) if bound > 0 else None
    if line is not None:
        lows.append(line)
        highs.append(line)
    if at is not None:
        lows.append(at - 0.5)
        highs.append(at + 0.5)
    x = _Axis(min(lows), max(highs), ox + LEFT, ox + PANEL_W - RIGHT)
    x.low, x.high = x.low - 0.05 * (x.high - x.low), x.high + 0.05 * (x.high - x.low)
    counts, edges = np.histogram(logs, bins=BINS) if len(logs) else (np.zeros(0, dtype=int), np.zeros(1))
    top = max(int(counts.max()) if len(counts) else 0, zeros, 1)
    base = oy + PANEL_H - BOTTOM
    y = _Axis(0.0, top * 1.08, base, oy + TOP)
    body = [_frame(x.start, y.end, x.end - x.start, base - y.end)]
    for count, left, right in zip(counts.tolist(), edges[:-1].tolist(), edges[1:].tolist()):
        if count:
            px, py = float(x(left)), float(y(count))
            body.append(
                f"<rect class='bar' x='{px:.2f}' y='{py:.2f}' width='{max(float(x(right)) - px, 0.5):.2f}' "
                f"height='{base - py:.2f}' fill='{BAR_COLOR}'/>"
            )
    legend: list[tuple[str, str, bool]] = [("ratio > 0", BAR_COLOR, False)] if len(logs) else []
    if line is not None:
        px = float(x(line))
        body.append(
            f"<line class='bound' x1='{px:.1f}' x2='{px:.1f}' y1='{y.end:.1f}' y2='{base:.1f}' "
            f"stroke='{COLORS['error']}' stroke-dasharray='5,3' stroke-width='1.5'/>"
        )
        legend.append(("error above", COLORS["error"], True))
    if at is not None:
        px, py = float(x(at)), float(y(zeros))
        body.append(
            f"<line x1='{px:.1f}' x2='{px:.1f}' y1='{y.end:.1f}' y2='{base:.1f}' stroke='{ZERO_COLOR}' "
            "stroke-dasharray='1,2'/>"
        )
        half = 6.0
        body.append(
            f"<rect class='zero-bar' data-count='{zeros}' x='{px - half:.2f}' y='{py:.2f}' "
            f"width='{2 * half:.2f}' height='{base - py:.2f}' fill='{ZERO_COLOR}'/>"
        )
        legend.append((f"ratio = 0 ({zeros} rows)", ZERO_COLOR, False))
    body += _decade_ticks(x, base, at)
    for count in sorted({0, top // 2, top}):
        py = float(y(count))
        body.append(_text(x.start - 4, py + 3, str(count), "ytick", anchor="end", size=8))
    body += _legend(x.end - 110, y.end + 10, legend)
    body.append(_text((x.start + x.end) / 2, oy + 14, title, "title", size=10))
    body.append(
        _text((x.start + x.end) / 2, base + 30, "NPU / GPU ratio (log scale; ratios of 0 at the grey 0 tick)",
              "xlabel", size=8)
    )  # fmt: skip
    cy = (y.end + base) / 2
    body.append(
        _text(
            ox + 12,
            cy,
            "output rows",
            "ylabel",
            size=8,
            extra=f" transform='rotate(-90 {ox + 12:.1f} {cy:.1f})'",
        )
    )
    return body


def histogram_svg(
    ratios: Mapping[str, np.ndarray], bounds: Mapping[str, float], titles: Mapping[str, str]
) -> str:
    """One log-scale histogram per metric of NPU/GPU ratios, with the metric's error bound dashed.

    Ratios of 0 (both sides exact) get their own grey bar at :func:`zero_position`, labelled ``0``.
    """
    names = list(ratios)
    cols = max(1, min(3, len(names)))
    rows = max(1, (len(names) + cols - 1) // cols)
    body = []
    for i, name in enumerate(names):
        ox, oy = (i % cols) * PANEL_W, (i // cols) * PANEL_H
        values = np.asarray(ratios[name], dtype=np.float64)
        body += [f"<g class='panel' data-metric='{escape(name)}'>"]
        body += _histogram(ox, oy, values, float(bounds.get(name, 0)), titles.get(name, name))
        body.append("</g>")
    return _svg(cols * PANEL_W, rows * PANEL_H, body)


def ratio_histograms(
    ratios: Mapping[str, np.ndarray], bounds: Mapping[str, float], titles: Mapping[str, str]
) -> str | None:
    """:func:`histogram_svg` as a data URI (None without ratios)."""
    return _uri(histogram_svg(ratios, bounds, titles)) if ratios else None


def _quartiles(logs: np.ndarray) -> tuple[float, float, float, float, float]:
    q1, med, q3 = (float(v) for v in np.percentile(logs, [25, 50, 75]))
    return float(logs.min()), q1, med, q3, float(logs.max())


def family_svg(families: Sequence[tuple[str, np.ndarray]]) -> str:
    """Per API family, the distribution of each API's worst ratio / error bound (box plus points).

    The x axis is (worst counted NPU/GPU ratio of the API / that metric's bound) on a log scale: right of
    the dashed line at 1 an API fails a bound. APIs whose worst ratio is 0 sit on the grey ``0`` tick.
    Points that would fall on the same pixel are drawn once.
    """
    every = np.concatenate([np.asarray(v, dtype=np.float64) for _, v in families])
    zeros = bool((every <= 0).any())
    at = zero_position(every)
    logs_of = [
        np.where(v > 0, np.log10(np.where(v > 0, v, 1.0)), at)
        for v in (np.asarray(values, dtype=np.float64) for _, values in families)
    ]
    row_h, left, width = 26.0, 150.0, 760.0
    height = TOP + row_h * len(families) + BOTTOM
    every_log = np.concatenate(logs_of)
    low = min(float(every_log.min()), 0.0) - (0.5 if zeros else 0.2)
    x = _Axis(low, max(float(every_log.max()), 0.0) + 0.2, left, width - RIGHT)
    base = TOP + row_h * len(families)
    body = [_frame(x.start, TOP, x.end - x.start, base - TOP)]
    labels = []
    for i, ((name, values), logs) in enumerate(zip(families, logs_of)):
        cy = TOP + row_h * (i + 0.5)
        lo, q1, med, q3, hi = (float(x(v)) for v in _quartiles(logs))
        body.append(
            f"<g class='box'><line x1='{lo:.1f}' x2='{q1:.1f}' y1='{cy:.1f}' y2='{cy:.1f}' stroke='#333'/>"
            f"<line x1='{q3:.1f}' x2='{hi:.1f}' y1='{cy:.1f}' y2='{cy:.1f}' stroke='#333'/>"
            f"<rect x='{q1:.1f}' y='{cy - 7:.1f}' width='{max(q3 - q1, 0.5):.1f}' height='14' fill='none' "
            f"stroke='#333'/><line x1='{med:.1f}' x2='{med:.1f}' y1='{cy - 7:.1f}' y2='{cy + 7:.1f}' "
            "stroke='#e67e22' stroke-width='1.5'/></g>"
        )
        jitter = np.linspace(-5.0, 5.0, len(logs)) if len(logs) > 1 else np.zeros(1)
        fails = np.asarray(values, dtype=np.float64) > 1
        px = np.round(x(logs)).astype(np.int64)
        py = np.round(cy + jitter).astype(np.int64)
        for fail, color in ((False, COLORS["pass"]), (True, COLORS["error"])):
            sel = fails == fail
            for cx, cyy in sorted(set(zip(px[sel].tolist(), py[sel].tolist()))):
                body.append(
                    f"<circle class='point' cx='{cx}' cy='{cyy}' r='2' fill='{color}' fill-opacity='0.8'/>"
                )
        labels.append(_text(left - 6, cy + 3, f"{name} ({len(values)})", "ylabels", anchor="end", size=8))
    bound = float(x(0.0))
    body.append(
        f"<line class='bound' x1='{bound:.1f}' x2='{bound:.1f}' y1='{TOP}' y2='{base:.1f}' "
        f"stroke='{COLORS['error']}' stroke-dasharray='5,3' stroke-width='1.5'/>"
    )
    if zeros:
        zx = float(x(at))
        body.append(
            f"<line x1='{zx:.1f}' x2='{zx:.1f}' y1='{TOP}' y2='{base:.1f}' stroke='{ZERO_COLOR}' "
            "stroke-dasharray='1,2'/>"
        )
    body += labels
    body += _decade_ticks(x, base, at if zeros else None)
    body += _legend(x.end - 150, TOP - 10, [("error bound: fails right of it", COLORS["error"], True)])
    body.append(_text((x.start + x.end) / 2, base + 30, XLABEL_FAMILY, "xlabel", size=8))
    cy = (TOP + base) / 2
    body.append(
        _text(12, cy, "API family (APIs)", "ylabel", size=8, extra=f" transform='rotate(-90 12 {cy:.1f})'")
    )
    return _svg(width, height, body)


def family_ratios(families: Sequence[tuple[str, np.ndarray]]) -> str | None:
    """:func:`family_svg` as a data URI (None without families)."""
    return _uri(family_svg(families)) if families else None
