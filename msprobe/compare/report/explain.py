"""The words the report explains itself with: verdicts, standards, metric names and what to do next.

Tables only (the CSVs keep upstream's Chinese headers and messages; the report puts English first and
the upstream name in parentheses), plus :func:`row_reason`, the one line that says why a row got its
verdict.
"""

from __future__ import annotations

from msprobe.compare import rules as R
from msprobe.compare.standards import Standard

METRIC_ENGLISH: dict[str, str] = dict(R.ENGLISH)
"""English name of each metric column, e.g. ``均方根误差比值`` → ``RMSE ratio``."""

VERDICTS: tuple[tuple[str, str], ...] = (
    ("error", "the NPU's error against the CPU benchmark is worse than the standard allows: for the "
              "benchmark standard its NPU/GPU ratio passes a bound, for the others an NPU error rate is "
              "not 0 (or the thousandth share is too low) and the GPU's is lower (higher)."),
    ("mismatch", "the output has different shapes in the two details files, so it is not compared: the "
                 "files are probably from different runs."),
    ("missing", "the output is in one details file only, so it cannot be compared: the two replays did "
                "not see the same API calls (different dumps, filters or a crashed run)."),
    ("pass", "every metric the output's standard counts is within its bound (benchmark standard: the "
             "NPU's error against the CPU benchmark is at most 2× the GPU's, 10× for the max relative "
             "error)."),
    ("Warning", "never given by the compare (8.1.1's compare has no warning level); a replay's own "
                "CSVs use it for an output near its threshold."),
    ("SKIP", "not judged: the replay skipped the API (its message says why) or the output's dtype is "
             "not compared (float64, complex, empty shape)."),
)  # fmt: skip
"""What each verdict means, in the order the report lists them."""

STANDARDS: dict[str, tuple[str, str]] = {
    Standard.BENCHMARK.value: (
        "benchmark", "each NPU error ÷ the GPU error of the same output must stay within its bound, 2 "
                     "(10 for the max relative error)"),
    Standard.ABSOLUTE_THRESHOLD.value: (
        "absolute threshold", "the NPU's inf/nan, relative and absolute error rates must all be 0"),
    Standard.ACCUMULATIVE.value: (
        "accumulative", "the NPU's error rates must be 0 and its error balance within its dtype's bound"),
    Standard.BINARY.value: ("binary", "the NPU output must equal the benchmark bit for bit"),
    Standard.THOUSANDTH.value: (
        "thousandth", "at least 99.9 % of the NPU's elements must be within a relative error of 0.001"),
    Standard.ULP.value: (
        "ULP", "the NPU's error in units of the last place must be small on average, rarely over its "
               "bound, or rarer over it than the GPU's"),
}  # fmt: skip
"""Standard (upstream's 比对算法 text) → (English name, how it judges, in one line)."""

WORKFLOW_DOC = "docs/workflow.md"
WHAT_NEXT = (
    "What next: start with the first failing API, the worst one. Its rows say which output and metric "
    "failed, its call stack which line of your code called it. To look closer, dump only that API "
    '(config.json "list" or "scope") in tensor mode and replay it again; check whether it ran in a lower '
    "dtype or under autocast on the NPU than on the GPU; if the NPU kernel itself is at fault, report it "
    f"with the two details rows and the dumped inputs. The msprobe documentation walks through these "
    f'steps in {WORKFLOW_DOC} ("From a drifting NPU training to the API that lost precision").'
)


def metric_name(column: str) -> str:
    """``RMSE ratio (均方根误差比值)``: English first, the CSV header in parentheses."""
    english = METRIC_ENGLISH.get(column)
    return f"{english} ({column})" if english else column


def standard_name(value: str) -> str:
    """``benchmark (标杆比对法)``; blank for rows no standard judged."""
    if not value.strip():
        return ""
    english = STANDARDS.get(value)
    return f"{english[0]} ({value})" if english else value


def standard_rule(value: str) -> str:
    """``benchmark standard: each NPU error ÷ ...``: how one standard judges, in a line ("" if unknown)."""
    english = STANDARDS.get(value)
    return f"{english[0]} standard: {english[1]}" if english else ""


def row_reason(status: str, standard: str, worst: str, message: str) -> str:
    """Why one output row got its verdict, in one line."""
    status = status.strip()
    if status == "error":
        return f"error: {worst}" if worst else "error: a metric is past its bound"
    if status == "pass":
        name = STANDARDS.get(standard, (standard.strip(),))[0]
        return f"pass: every metric of the {name} standard within its bound" if name else "pass"
    first = message.strip().splitlines()[0] if message.strip() else ""
    if status == "missing":
        return first or "missing: present on one side only"
    if status == "SKIP":
        return f"SKIP: {first}" if first and first != "nan" else "SKIP: not judged (no reason given)"
    return f"{status or 'blank'}: {first}" if first else (status or "blank")
