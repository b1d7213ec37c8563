"""`msprobe demo`: the README's main job, with a known answer (the fault it plants must be found)."""

import csv
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from msprobe.demo_fault import PLANTED_API, bf16_sum_softmax, pytest_msprobe_device_function


class _FailingSections(HTMLParser):
    """The ``data-api`` of every ``section.api`` of the report, in page order."""

    def __init__(self) -> None:
        super().__init__()
        self.apis: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "section" and found.get("class") == "api":
            self.apis.append(str(found.get("data-api")))


def _result_rows(folder: Path) -> list[list[str]]:
    (result_csv,) = folder.glob("api_precision_compare_result_*.csv")
    with open(result_csv, encoding="utf-8-sig", newline="") as fh:
        return list(csv.reader(fh))[1:]


def test_the_plugin_plants_its_fault_in_one_api_only():
    softmax = torch.nn.functional.softmax
    assert pytest_msprobe_device_function("Functional", "gelu", torch.nn.functional.gelu) is None
    assert pytest_msprobe_device_function("Tensor", "softmax", torch.Tensor.softmax) is None
    planted = pytest_msprobe_device_function(*PLANTED_API.split("."), softmax)
    assert planted is not None
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    exact = softmax(x.double(), dim=-1)
    faulty_error = (planted(x, dim=-1).double() - exact).abs().max().item()
    kernel_error = (softmax(x, dim=-1).double() - exact).abs().max().item()
    assert faulty_error > 100 * kernel_error  # a bfloat16 sum, far worse than the float32 kernel
    assert torch.allclose(planted(x, dim=-1).sum(-1), torch.ones(4), atol=2**-7)  # still a softmax


def test_the_faulty_softmax_has_a_gradient():
    x = torch.randn(3, 8, requires_grad=True)
    bf16_sum_softmax(torch.nn.functional.softmax)(x, dim=-1).pow(2).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.slow
def test_demo_finds_the_fault_it_planted(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "msprobe", "demo", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    stages = [line.split("]")[0] + "]" for line in proc.stderr.splitlines() if line[:1] == "["]
    assert stages == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"]  # each stage numbered once, in order
    assert list((out / "dump").glob("step0/rank/dump_tensor_data/*.pt"))
    rows = _result_rows(out / "compare")
    assert len(rows) >= 30  # every API of the demo model has a verdict
    failing = [r[0] for r in rows if "error" in (r[1], r[2]) or "missing" in (r[1], r[2])]
    assert failing and all(name.rsplit(".", 1)[0] == PLANTED_API for name in failing)
    assert len(failing) <= 3
    others = {v for r in rows if r[0] not in failing for v in r[1:3]}
    assert others <= {"pass", "SKIP", " "}, others
    (html,) = (out / "compare").glob("api_precision_compare_report_*.html")
    sections = _FailingSections()
    sections.feed(html.read_text(encoding="utf-8"))
    assert sections.apis and sections.apis[0].rsplit(".", 1)[0] == PLANTED_API  # the planted API first
    assert PLANTED_API in proc.stdout  # says what it planted
    assert f"open:     {html}" in proc.stdout  # and which file to open


@pytest.mark.parametrize(
    ("failing", "status"),
    [
        ((f"{PLANTED_API}.0",), 0),
        ((), 1),
        ((f"{PLANTED_API}.0", "Torch.matmul.0"), 1),
        (("Tensor.add.0",), 1),
    ],
)
def test_the_demo_fails_when_the_compare_does_not_single_out_the_planted_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: tuple[str, ...], status: int
) -> None:
    """The demo's answer is known: it exited 0 (printing "none") when the planted fault was not found,
    so a check of the main job could not catch the stages going wrong."""
    import msprobe.compare
    import msprobe.demo as demo
    from msprobe.compare.run import CompareOutcome

    monkeypatch.setattr(demo, "dump", lambda root: root)
    monkeypatch.setattr(demo, "replay", lambda rank_dir, out, workers, plugins=(): out)
    files = (tmp_path / f"f{i}" for i in range(4))
    outcome = CompareOutcome(*files, api_counts={}, row_counts={}, flagged=0, failing_apis=failing)
    monkeypatch.setattr(msprobe.compare, "run_compare", lambda *a, **k: outcome)
    assert demo.run_demo(tmp_path / "out", 1) == status
