"""`msprobe demo` end to end: the README's main job, in a fresh process as a user runs it."""

import csv
import subprocess
import sys
from html.parser import HTMLParser

import pytest


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[str] = []

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)


@pytest.mark.slow
def test_demo_writes_replays_compare_and_report(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "msprobe", "demo", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for stage in ("1/3", "2/3", "3/3"):
        assert f"[msprobe demo] {stage}" in proc.stderr
    for dtype in ("bfloat16", "float32"):
        assert list((out / f"dump_{dtype}").glob("step0/rank/dump_tensor_data/*.pt"))
        assert list((out / f"replay_{dtype}").glob("accuracy_checking_details_*.csv"))
    (result_csv,) = (out / "compare").glob("api_precision_compare_result_*.csv")
    with open(result_csv, encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    assert len(rows) >= 30  # every API of the demo model has a verdict
    verdicts = {r[1] for r in rows} | {r[2] for r in rows}
    assert "error" in verdicts and "pass" in verdicts  # bf16 vs fp32 shows real differences
    (html,) = (out / "compare").glob("api_precision_compare_report_*.html")
    parser = _Text()
    parser.feed(html.read_text(encoding="utf-8"))
    text = " ".join(parser.chunks)
    failing = sorted({r[0] for r in rows if "error" in (r[1], r[2])})
    assert failing and all(name in text for name in failing)
