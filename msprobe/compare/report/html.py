"""One self-contained HTML page: inline CSS, plots as data URIs, no script and no network access.

Stable ids for readers and tests: ``#counts`` (APIs and output rows by verdict), ``#failing`` (failing
APIs, worst first), one ``section.api`` per failing API (``data-api`` = its name) holding a ``table.rows``
and, with a dump, ``pre.stack``; ``#missing``, ``#flagged``; plots are ``img.plot``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from msprobe.compare.report.model import ENGLISH, FailingApi, Report, severity_text
from msprobe.compare.report.plots import family_ratios, ratio_histograms

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0;font-size:.85em}
th,td{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.error{color:#b03a2e;font-weight:600}.pass{color:#2e7d32}.missing{color:#d35400;font-weight:600}
.SKIP{color:#777}section.api{border-left:4px solid #c0392b;padding-left:1em;margin:1.5em 0}
pre{background:#f8f8f8;padding:.5em;overflow-x:auto;font-size:.8em;white-space:pre-wrap}
.meta{color:#555;font-size:.9em}img.plot{max-width:100%;display:block;margin:.5em 0}
"""


def _cell(text: object, cls: str = "") -> str:
    c = f' class="{escape(cls)}"' if cls else ""
    return f"<td{c}>{escape(str(text))}</td>"


def _verdict(text: str) -> str:
    return _cell(text, text.strip())


def _table(table_id: str, head: Sequence[str], rows: Iterable[str]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join(f"<tr>{r}</tr>" for r in rows)
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


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


def _api_section(api: FailingApi) -> str:
    rows = []
    for r in api.rows:
        metrics = "; ".join(
            f"{ENGLISH.get(m.name, m.name)} ({m.name}) = {m.value}" + (f" [{m.status}]" if m.status else "")
            for m in r.metrics
            if m.value
        )
        rows.append(
            _cell(r.name) + _cell(r.standard) + _verdict(r.status) + _cell(r.npu_dtype) + _cell(r.gpu_dtype)
            + _cell(r.npu_shape) + _cell(r.gpu_shape) + _cell(metrics) + _cell(r.message)
        )  # fmt: skip
    table = (
        _table("", ["output", "standard", "verdict", "NPU dtype", "GPU dtype", "NPU shape", "GPU shape",
                    "metrics", "message"], rows)
        .replace("<table>", '<table class="rows">', 1)
    )  # fmt: skip
    if api.stack is None:
        stack = ""
    else:
        stack = (
            '<h4>call stack (stack.json)</h4><pre class="stack">' + escape("\n".join(api.stack)) + "</pre>"
        )
    head = (
        f"<h3>{escape(api.name)}</h3><p class='meta'>forward <span class='{escape(api.forward.strip())}'>"
        f"{escape(api.forward)}</span>, backward <span class='{escape(api.backward.strip())}'>"
        f"{escape(api.backward)}</span>; worst metric: {escape(api.worst)}, "
        f"severity {escape(severity_text(api.severity))}</p>"
    )
    return f'<section class="api" data-api="{escape(api.name)}">{head}{table}{stack}</section>'


def render_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<title>msprobe compare report</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>msprobe compare: NPU vs GPU</h1>",
        f"<p class='meta'>NPU details: {escape(report.npu_csv)}<br>GPU details: {escape(report.gpu_csv)}"
        + (f"<br>dump: {escape(report.dump_dir)}" if report.dump_dir else "")
        + "</p>",
        "<h2>Counts by verdict</h2>",
        _counts(report),
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
    parts.append(
        _table("failing", ["#", "API", "forward", "backward", "severity", "worst metric"], failing_rows)
    )
    if report.failing_total > len(report.failing):
        parts.append(
            f"<p class='meta'>{report.failing_total - len(report.failing)} more in the result CSV.</p>"
        )
    parts.extend(_api_section(a) for a in report.failing)
    parts.append(f"<h2>Rows present on one side only ({report.missing_total})</h2>")
    parts.append(
        _table("missing", ["output", "present in"], (_cell(n) + _cell(s) for n, s in report.missing))
    )
    parts.append(_more(report.missing_total, len(report.missing)))
    parts.append(f"<h2>Rows whose dtype or shape differ between the sides ({report.flagged_total})</h2>")
    parts.append(
        _table("flagged", ["output", "difference"], (_cell(n) + _cell(f) for n, f in report.flagged))
    )
    parts.append(_more(report.flagged_total, len(report.flagged)))
    parts.append("<h2>Distributions</h2>")
    titles = {k: ENGLISH.get(k, k) for k in report.ratios}
    for alt, uri in (
        ("NPU/GPU ratio per metric", ratio_histograms(report.ratios, report.bounds, titles)),
        (
            "worst NPU/GPU ratio per API (÷ its error bound), by API family",
            family_ratios(report.family_ratios),
        ),
    ):
        if uri:
            parts.append(f"<h3>{escape(alt)}</h3><img class='plot' alt='{escape(alt)}' src='{uri}'>")
    parts.append("</body></html>")
    return "\n".join(parts)
