"""The report's plots, drawn with matplotlib's Agg canvas (no display, no pyplot state) as PNG data URIs."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

COLORS = {"pass": "#3a923a", "error": "#c0392b", "SKIP": "#999999", "missing": "#e67e22"}
ZERO_COLOR = "#999999"
ZERO_GAP = 1.0
"""Ratios of 0 have no logarithm: they are drawn as their own grey bar, ``ZERO_GAP`` decades left of the
smallest nonzero value (or of 10^0), on a tick labelled ``0``; the other ticks show the ratios."""


def _uri(fig: object) -> str:
    buf = io.BytesIO()
    # no bbox_inches="tight": it draws the figure twice; tight_layout already placed everything
    fig.savefig(buf, format="png", dpi=80)  # type: ignore[attr-defined]
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def zero_position(values: np.ndarray) -> float:
    """Where on the log10 axis ratios of 0 are drawn: a whole decade left of every nonzero value."""
    positive = values[values > 0]
    low = float(np.log10(positive.min())) if len(positive) else 0.0
    return math.floor(min(low, 0.0)) - ZERO_GAP


def _tick_text(t: float) -> str:
    return f"$10^{{{round(t)}}}$" if abs(t - round(t)) < 1e-9 else f"{10**t:.3g}"


def _log_ticks(ax: Any, zero_at: float | None) -> None:
    """Label the log10 axis with the ratios themselves; ratios of 0, if any, on their own ``0`` tick."""
    low, high = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if low <= t <= high and (zero_at is None or t > zero_at + 0.5)]
    labels = [_tick_text(t) for t in ticks]
    if zero_at is not None:
        ax.axvline(zero_at, color=ZERO_COLOR, linestyle=":", linewidth=1)
        ticks, labels = [zero_at, *ticks], ["0", *labels]
    ax.set_xticks(ticks, labels)


def ratio_histograms(
    ratios: Mapping[str, np.ndarray], bounds: Mapping[str, float], titles: Mapping[str, str]
) -> str | None:
    """:func:`histogram_figure` as a PNG data URI (None without ratios)."""
    return _uri(histogram_figure(ratios, bounds, titles)) if ratios else None


def histogram_figure(
    ratios: Mapping[str, np.ndarray], bounds: Mapping[str, float], titles: Mapping[str, str]
) -> Any:
    """One log-scale histogram per metric of NPU/GPU ratios, with the metric's error bound dashed.

    Ratios of 0 (both sides exact) get their own grey bar at :func:`zero_position`, labelled ``0``.
    """
    from matplotlib.figure import Figure

    names = list(ratios)
    cols = min(3, len(names))
    rows = (len(names) + cols - 1) // cols
    fig = Figure(figsize=(4.2 * cols, 2.8 * rows))
    for i, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, i + 1)
        values = np.asarray(ratios[name], dtype=np.float64)
        positive = values[values > 0]
        zeros = int(len(values) - len(positive))
        if len(positive):
            ax.hist(np.log10(positive), bins=40, color="#4a7ab5", label="ratio > 0")
        if bounds.get(name, 0) > 0:
            ax.axvline(np.log10(bounds[name]), color=COLORS["error"], linestyle="--", label="error above")
        at = zero_position(values) if zeros else None
        if at is not None:
            ax.bar([at], [zeros], width=0.4, color=ZERO_COLOR, label=f"ratio = 0 ({zeros} rows)")
        _log_ticks(ax, at)
        ax.legend(fontsize=7)
        ax.set_title(titles.get(name, name), fontsize=9)  # English: CJK fonts are often absent
        ax.set_xlabel("NPU / GPU ratio (log scale; ratios of 0 at the grey 0 tick)", fontsize=8)
        ax.set_ylabel("output rows", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    return fig


def family_ratios(families: Sequence[tuple[str, np.ndarray]]) -> str | None:
    """:func:`family_figure` as a PNG data URI (None without families)."""
    return _uri(family_figure(families)) if families else None


def family_figure(families: Sequence[tuple[str, np.ndarray]]) -> Any:
    """Per API family, the distribution of each API's worst ratio / error bound (box plus points).

    The x axis is (worst counted NPU/GPU ratio of the API / that metric's bound) on a log scale: right of
    the dashed line at 1 an API fails a bound. APIs whose worst ratio is 0 sit on the grey ``0`` tick.
    """
    import matplotlib
    from matplotlib.figure import Figure

    every = np.concatenate([np.asarray(v, dtype=np.float64) for _, v in families])
    at = zero_position(every)
    fig = Figure(figsize=(7.5, 0.45 * len(families) + 1.4))
    ax = fig.add_subplot(1, 1, 1)
    labels = [f"{name} ({len(values)})" for name, values in families][::-1]
    positions = np.arange(1, len(families) + 1)
    data = []
    for y, (_, values) in zip(positions, families[::-1]):
        values = np.asarray(values, dtype=np.float64)
        logs = np.where(values > 0, np.log10(np.where(values > 0, values, 1.0)), at)
        data.append(logs)
        jitter = np.linspace(-0.15, 0.15, len(logs)) if len(logs) > 1 else np.zeros(1)
        fails = values > 1
        ax.scatter(logs[~fails], y + jitter[~fails], s=9, color=COLORS["pass"], alpha=0.7, zorder=3)
        ax.scatter(logs[fails], y + jitter[fails], s=9, color=COLORS["error"], alpha=0.9, zorder=3)
    major_minor = tuple(int(x) for x in matplotlib.__version__.split(".")[:2])
    horizontal = {"orientation": "horizontal"} if major_minor >= (3, 10) else {"vert": False}
    ax.boxplot(data, positions=positions, widths=0.5, showfliers=False, zorder=2, **horizontal)
    ax.set_yticks(positions, labels)
    ax.axvline(0.0, color=COLORS["error"], linestyle="--", label="error bound: fails right of it")
    zeros = bool((every <= 0).any())
    if zeros:
        ax.set_xlim(left=min(ax.get_xlim()[0], at - 0.5))
    _log_ticks(ax, at if zeros else None)
    ax.set_xlabel("worst NPU/GPU ratio of the API ÷ its error bound (log scale; 0 at grey tick)", fontsize=8)
    ax.set_ylabel("API family (APIs)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig
