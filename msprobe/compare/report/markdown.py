"""A short Markdown summary for terminals and CI logs: counts, the worst failing APIs, what next."""

from __future__ import annotations

import re

from msprobe.compare.report.explain import WHAT_NEXT, standard_name
from msprobe.compare.report.model import Report, severity_text

TOP = 20


def _md(text: str) -> str:
    """A table cell: no raw HTML (a Markdown viewer would render an API name's ``<img onerror=...>``).
    ``&`` and ``<`` are enough for that (``[`` and ``]`` are escaped against Markdown's own links and
    images); a ``>`` stays as it is for the terminals that read it
    (``13097.2 > 10``)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    # and no Markdown link or image (``![x](http://host/p)`` is fetched by the viewer): brackets as text
    text = text.replace("[", "\\[").replace("]", "\\]")
    # a carriage return ends a Markdown line as a line feed does: either would cut the table row in two
    return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ").strip()


def _code(text: object) -> str:
    """``text`` as a code span whatever backticks it holds (a folder name may): CommonMark closes a span
    only at a backtick run as long as the opening one, and nothing inside a span is HTML."""
    text = str(text).replace("\r", " ").replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def render_markdown(report: Report) -> str:
    apis, rows = dict(report.api_counts), dict(report.row_counts)
    lines = [
        "# msprobe compare: NPU vs GPU",
        "",
        *([f"**Warning: {_md(report.warning)}**", ""] if report.warning else []),
        f"NPU details: {_code(report.npu_csv)}  ",
        f"GPU details: {_code(report.gpu_csv)}",
        "",
        "| verdict | APIs | output rows |",
        "|---|---:|---:|",
    ]
    for key in dict.fromkeys([*apis, *rows]):
        lines.append(f"| {key.strip() or 'blank'} | {apis.get(key, 0)} | {rows.get(key, 0)} |")
    lines += ["", f"## Failing APIs ({report.failing_total}), worst first", ""]
    if report.failing:
        lines += [
            "| # | API | fwd | bwd | severity | worst metric | standard | NPU dtype | GPU dtype | shape |",
            "|---:|---|---|---|---:|---|---|---|---|---|",
        ]
        for i, api in enumerate(report.failing[:TOP], start=1):
            # the row whose metric is the API's worst (the one the "worst metric" cell names), so its
            # standard, dtype and shape go with that metric; else the first error row
            row = next(
                (r for r in api.rows if r.status == "error" and r.severity == api.severity),
                next((r for r in api.rows if r.status == "error"), api.rows[0] if api.rows else None),
            )
            facts = (
                (standard_name(row.standard), row.npu_dtype, row.gpu_dtype, row.npu_shape)
                if row
                else ("", "", "", "")
            )
            cells = (
                str(i), _md(api.name), api.forward.strip(), api.backward.strip(), severity_text(api.severity),
                _md(api.worst), *(_md(f) for f in facts),
            )  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
        if report.failing_total > TOP:
            lines.append(
                f"\n… and {report.failing_total - TOP} more (see the HTML report and the result CSV)."
            )
    else:
        lines.append("None.")
    lines += [
        "",
        f"Rows on one side only: {report.missing_total}. "
        f"Rows whose dtype or shape differ between NPU and GPU: {report.flagged_total}.",
        "",
        WHAT_NEXT,
        "",
    ]
    return "\n".join(lines)
