"""The report's plots, drawn with matplotlib's Agg canvas (no display, no pyplot state) as PNG data URIs."""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence

import numpy as np

COLORS = {"pass": "#3a923a", "error": "#c0392b", "SKIP": "#999999", "missing": "#e67e22"}
TINY = 1e-12
"""Ratios of 0 are drawn at this value on the log axis."""


def _uri(fig: object) -> str:
    buf = io.BytesIO()
    # no bbox_inches="tight": it draws the figure twice; tight_layout already placed everything
    fig.savefig(buf, format="png", dpi=80)  # type: ignore[attr-defined]
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def ratio_histograms(
    ratios: Mapping[str, np.ndarray], bounds: Mapping[str, float], titles: Mapping[str, str]
) -> str | None:
    """One log-scale histogram per metric of NPU/GPU ratios, with the metric's error bound dashed."""
    if not ratios:
        return None
    from matplotlib.figure import Figure

    names = list(ratios)
    cols = min(3, len(names))
    rows = (len(names) + cols - 1) // cols
    fig = Figure(figsize=(4.2 * cols, 2.8 * rows))
    for i, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, i + 1)
        values = np.log10(np.maximum(ratios[name], TINY))
        ax.hist(values, bins=40, color="#4a7ab5")
        if bounds.get(name, 0) > 0:
            ax.axvline(np.log10(bounds[name]), color=COLORS["error"], linestyle="--", label="error above")
            ax.legend(fontsize=7)
        ax.set_title(titles.get(name, name), fontsize=9)  # English: CJK fonts are often absent
        ax.set_xlabel("log10(NPU / GPU)", fontsize=8)
        ax.set_ylabel("rows", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    return _uri(fig)


def family_bars(families: Sequence[tuple[str, Mapping[str, int]]]) -> str | None:
    """Stacked horizontal bars: details rows per API family (bare API name) by verdict."""
    if not families:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 0.28 * len(families) + 1.2))
    ax = fig.add_subplot(1, 1, 1)
    labels = [name for name, _ in families][::-1]
    counts = [c for _, c in families][::-1]
    left = np.zeros(len(labels))
    verdicts = list(COLORS) + sorted({k for c in counts for k in c} - set(COLORS))
    for verdict in verdicts:
        widths = np.array([c.get(verdict, 0) for c in counts], dtype=float)
        if widths.any():
            ax.barh(labels, widths, left=left, color=COLORS.get(verdict, "#5d6d7e"), label=verdict)
            left += widths
    ax.set_xlabel("output rows", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return _uri(fig)
