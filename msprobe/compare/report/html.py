"""One self-contained HTML page: inline CSS, plots as data URIs, no script and no network access.

Order: the summary (counts, what each verdict means, what to do next), the plots, the failing APIs
worst first (one folded-out section each), then the rows present on one side only and the rows whose
dtype or shape differ. Long tables fold into ``<details>``.

Stable ids for readers and tests: ``#counts`` (APIs and output rows by verdict), ``#verdicts`` (what
each verdict means), ``#next``, ``#failing`` (failing APIs, worst first; ``#failing-more`` the rest),
one ``section.api`` per failing API (``data-api`` = its name) holding a ``table.rows`` and, with a
dump, ``pre.stack``; ``#missing``, ``#flagged``; plots are ``img.plot``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from msprobe.compare.report.explain import (
    METRIC_ENGLISH,
    VERDICTS,
    WHAT_NEXT,
    metric_name,
    standard_name,
    standard_rule,
)
from msprobe.compare.report.model import FailingApi, Report, RowInfo, severity_text
from msprobe.compare.report.plots import family_ratios, ratio_histograms

FAILING_SHOWN = 20
"""Failing APIs listed before the rest of the list folds away."""
LISTED_SHOWN = 10
"""Rows of the one-sided and dtype/shape lists shown unfolded (longer lists fold away whole)."""
OPEN_SECTIONS = 5
"""Failing APIs whose sections start unfolded."""

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
h3{display:inline;font-size:1.05em}
table{border-collapse:collapse;margin:.5em 0;font-size:.85em}
th,td{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.error{color:#b03a2e;font-weight:600}.pass{color:#2e7d32}.missing{color:#d35400;font-weight:600}
.SKIP{color:#777}.Warning{color:#b7950b}
section.api{border-left:4px solid #c0392b;padding-left:1em;margin:1em 0}
pre{background:#f8f8f8;padding:.5em;overflow-x:auto;font-size:.8em;white-space:pre-wrap}
.meta{color:#555;font-size:.9em}img.plot{max-width:100%;display:block;margin:.5em 0}
summary{cursor:pointer}table.rows{width:100%}td.lines{white-space:pre-line}.small{font-size:.85em}
ul#verdicts{font-size:.9em}p#next{background:#eef4fb;padding:.6em;font-size:.9em}
"""


def _cell(text: object, cls: str = "") -> str:
    c = f' class="{escape(cls)}"' if cls else ""
    return f"<td{c}>{escape(str(text))}</td>"


def _verdict(text: str) -> str:
    return _cell(text, text.strip())


def _table(table_id: str, head: Sequence[str], rows: Iterable[str], cls: str = "") -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join(f"<tr>{r}</tr>" for r in rows)
    ident = f' id="{table_id}"' if table_id else ""
    klass = f' class="{cls}"' if cls else ""
    return f"<table{ident}{klass}><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _long_table(table_id: str, head: Sequence[str], rows: Iterable[str], shown: int) -> str:
    """The first ``shown`` rows as a table, the rest folded into ``<details>`` (all of them if 0)."""
    rows = list(rows)
    if len(rows) <= max(shown, LISTED_SHOWN):
        return _table(table_id, head, rows)
    if shown == 0:
        return (
            f"<details><summary>show the {len(rows)} rows</summary>{_table(table_id, head, rows)}</details>"
        )
    rest = _table(f"{table_id}-more", head, rows[shown:])
    return (
        _table(table_id, head, rows[:shown])
        + f"<details><summary>{len(rows) - shown} more</summary>{rest}</details>"
    )


def _more(total: int, shown: int, where: str = "details CSV") -> str:
    return f"<p class='meta'>{total - shown} more in the {where}.</p>" if total > shown else ""


def _counts(report: Report) -> str:
    apis, rows = dict(report.api_counts), dict(report.row_counts)
    keys = list(dict.fromkeys([*apis, *rows]))
    body = (
        f"{_verdict(k)}<td class='num'>{apis.get(k, 0)}</td><td class='num'>{rows.get(k, 0)}</td>"
        for k in keys
    )
    total = (
        f"<td>total</td><td class='num'>{sum(apis.values())}</td><td class='num'>{sum(rows.values())}</td>"
    )
    return _table("counts", ["verdict", "APIs", "output rows"], [*body, total])


def _headline(report: Report) -> str:
    apis = sum(n for _, n in report.api_counts)
    if not report.failing:
        return f"<p><b>No API fails</b> ({apis} APIs compared).</p>"
    first = report.failing[0]
    why = (
        f"{escape(first.worst)}, {escape(severity_text(first.severity))} past its bound"
        if first.rows
        else escape(first.worst.rstrip("."))  # an API judged without details rows: its result Message
    )
    return (
        f"<p><b>{report.failing_total} of {apis} APIs fail.</b> The worst is <b>{escape(first.name)}</b>: "
        f"{why}.</p>"
    )


def _legend() -> str:
    items = "".join(f"<li><span class='{v}'>{escape(v)}</span>: {escape(text)}</li>" for v, text in VERDICTS)
    return f"<ul id='verdicts'>{items}</ul>"


def _number(text: str) -> str:
    """A metric value to 4 significant digits (the CSVs keep all 14 decimals)."""
    try:
        return f"{float(text):.4g}"
    except ValueError:
        return text


def _metrics(row: RowInfo) -> str:
    return "\n".join(
        f"{metric_name(m.name)} = {_number(m.value)}" + (f" [{m.status}]" if m.status else "")
        for m in row.metrics
        if m.value
    )


def _api_section(api: FailingApi, is_open: bool) -> str:
    rows = [
        _cell(r.name) + _verdict(r.status) + _cell(r.why) + _cell(standard_name(r.standard))
        + _cell(f"{r.npu_dtype}\n{r.npu_shape}", "lines") + _cell(f"{r.gpu_dtype}\n{r.gpu_shape}", "lines")
        + _cell(_metrics(r), "lines") + _cell(r.message, "lines small")
        for r in api.rows
    ]  # fmt: skip
    head = ["output", "verdict", "why", "standard", "NPU dtype, shape", "GPU dtype, shape",
            "metrics (NPU/GPU ratios or NPU values)", "message (upstream)"]  # fmt: skip
    table = _table("", head, rows, cls="rows")
    rules = "".join(
        f"<p class='meta'>{escape(text)}</p>"
        for text in dict.fromkeys(standard_rule(r.standard) for r in api.rows)
        if text
    )
    stack = ""
    if api.stack is not None:
        n = api.hidden_frames
        hidden = f"; {n} frame{'' if n == 1 else 's'} of torch left out" if n else ""
        frames = "\n".join(api.stack) or "(only frames of torch)"
        stack = (
            f"<h4>call stack (stack.json, innermost first{hidden})</h4>"
            f'<pre class="stack">{escape(frames)}</pre>'
        )
    summary = (
        f"<summary><h3>{escape(api.name)}</h3> <span class='meta'>forward "
        f"<span class='{escape(api.forward.strip())}'>{escape(api.forward)}</span>, backward "
        f"<span class='{escape(api.backward.strip())}'>{escape(api.backward)}</span>; worst metric: "
        f"{escape(api.worst)}, severity {escape(severity_text(api.severity))}</span></summary>"
    )
    details = f"<details{' open' if is_open else ''}>{summary}{table}{rules}{stack}</details>"
    return f'<section class="api" data-api="{escape(api.name)}">{details}</section>'


def _plots(report: Report) -> list[str]:
    titles = {k: METRIC_ENGLISH.get(k, k) for k in report.ratios}  # English only: CJK fonts are often absent
    parts = []
    for alt, uri in (
        ("NPU/GPU ratio per metric", ratio_histograms(report.ratios, report.bounds, titles)),
        (
            "worst NPU/GPU ratio per API (÷ its error bound), by API family",
            family_ratios(report.family_ratios),
        ),
    ):
        if uri:
            parts.append(f"<h3>{escape(alt)}</h3><img class='plot' alt='{escape(alt)}' src='{uri}'>")
    return parts


def render_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<title>msprobe compare report</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>msprobe compare: NPU vs GPU</h1>",
        f"<p class='error' id='warning'>Warning: {escape(report.warning)}</p>" if report.warning else "",
        f"<p class='meta'>NPU details: {escape(report.npu_csv)}<br>GPU details: {escape(report.gpu_csv)}"
        + (f"<br>dump: {escape(report.dump_dir)}" if report.dump_dir else "")
        + "</p>",
        "<h2>Summary</h2>",
        _headline(report),
        _counts(report),
        _legend(),
        f"<p id='next'>{escape(WHAT_NEXT)}</p>",
        "<h2>Distributions</h2>",
        *_plots(report),
        f"<h2>Failing APIs ({report.failing_total})</h2>",
        "<p class='meta'>Worst first. Severity: how far past its bound the API's worst metric is "
        "(ratio rules: ratio / bound; rates that must be 0: 1 + rate in ‰; thousandth: (1 − value) / 0.001; "
        "ULP: the nearest escape); above 1 means failing, ∞ an inf/nan mismatch.</p>",
    ]
    failing_rows = (
        f"<td class='num'>{i}</td>{_cell(a.name)}{_verdict(a.forward)}{_verdict(a.backward)}"
        f"<td class='num'>{escape(severity_text(a.severity))}</td>{_cell(a.worst)}"
        for i, a in enumerate(report.failing, start=1)
    )
    head = ["#", "API", "forward", "backward", "severity", "worst metric"]
    parts.append(_long_table("failing", head, failing_rows, FAILING_SHOWN))
    parts.append(_more(report.failing_total, len(report.failing), "result CSV"))
    parts.extend(_api_section(a, i < OPEN_SECTIONS) for i, a in enumerate(report.failing))
    parts.append(f"<h2>Rows present on one side only ({report.missing_total})</h2>")
    missing = (_cell(n) + _cell(s) for n, s in report.missing)
    parts.append(_long_table("missing", ["output", "present in"], missing, 0))
    parts.append(_more(report.missing_total, len(report.missing)))
    parts.append(f"<h2>Rows whose dtype or shape differ between the sides ({report.flagged_total})</h2>")
    parts.append(
        "<p class='meta'>A different dtype is compared all the same, as upstream does; a different shape "
        "is not compared (mismatch). Either usually means the two runs did not train alike (autocast, "
        "a cast, another model config).</p>"
    )
    flagged = (_cell(n) + _cell(f) for n, f in report.flagged)
    parts.append(_long_table("flagged", ["output", "difference"], flagged, 0))
    parts.append(_more(report.flagged_total, len(report.flagged)))
    parts.append("</body></html>")
    return "\n".join(parts)
