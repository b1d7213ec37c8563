"""The HTML report parses and holds what the CSVs say; the Markdown summary agrees."""

from __future__ import annotations

import json
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from compare_rows import row, write

from msprobe.compare.cli import main as compare_main
from msprobe.compare.run import run_compare
from msprobe.errors import MsprobeError
from msprobe.formats import accuracy_csv as ac

F, B = "forward.output", "backward.output"
TORCH_MODULE = "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py"


class Page(HTMLParser):
    """Collects tables by id (rows of cell texts), api sections, pre.stack texts and img sources."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.sections: dict[str, list[list[str]]] = {}
        self.stacks: dict[str, str] = {}
        self.images: list[str] = []
        self._table: list[list[str]] | None = None
        self._section: str | None = None
        self._cell: list[str] | None = None
        self._pre: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section" and "data-api" in a:
            self._section = a["data-api"]
        elif tag == "table":
            self._table = []
            if a.get("id"):
                self.tables[a["id"]] = self._table
            elif self._section is not None and a.get("class") == "rows":
                self.sections[self._section] = self._table
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "pre" and a.get("class") == "stack":
            self._pre = []
        elif tag == "img":
            self.images.append(a.get("src", ""))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self._table[-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag == "pre" and self._pre is not None and self._section is not None:
            self.stacks[self._section] = "".join(self._pre)
            self._pre = None
        elif tag == "section":
            self._section = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._pre is not None:
            self._pre.append(data)


def _inputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    npu = [
        row(
            f"Functional.linear.0.{F}.0",
            cells={"ULP误差平均值": "100", "ULP误差大于阈值占比": "0.2"},
            bench=False,
        ),
        row(
            f"Functional.linear.0.{B}.0",
            cells={"ULP误差平均值": "1", "ULP误差大于阈值占比": "0"},
            bench=False,
        ),
        row(f"Torch.exp.0.{F}.0", "torch.float16", {"均方根误差": "0.05"}),  # rmse ratio 50
        row(
            f"Tensor.add_.0.{F}.0",
            cells={"inf/nan错误率": "0", "相对误差错误率": "0.1", "绝对误差错误率": "0"},
            bench=False,
        ),
        row(f"Torch.tanh.0.{F}.0", "torch.float16"),
        row(f"Torch.tanh.0.{B}.0", "torch.float16"),
        row(f"Torch.only_npu.0.{F}.0"),
        row(f"Torch.sum.0.{F}.0", "torch.bfloat16"),
    ]
    gpu = [r for r in npu if not r[0].startswith("Torch.only_npu")]
    gpu = [
        row(r[0], r[2], {"ULP误差平均值": "1", "ULP误差大于阈值占比": "0.1"}, bench=False)
        if "linear" in r[0]
        else row(r[0], "torch.float32")
        if r[0].startswith("Torch.sum")
        else r
        for r in gpu
    ]
    gpu[2] = row(f"Torch.exp.0.{F}.0", "torch.float16", {"均方根误差": "0.001"})
    gpu[3] = row(
        f"Tensor.add_.0.{F}.0",
        cells=dict.fromkeys(("inf/nan错误率", "相对误差错误率", "绝对误差错误率"), "0"),
        bench=False,
    )
    dump = tmp_path / "dump" / "step0" / "rank0"
    dump.mkdir(parents=True)
    stack = {
        "0": [
            ["Torch.exp.0.forward"],
            [
                "File model.py, line 7, in forward, \n return torch.exp(x)",
                f"File {TORCH_MODULE}, line 1789, in _call_impl, \n return forward_call(*args, **kwargs)",
                "File train.py, line 20, in main, \n loss = model(x)",
            ],
        ],
        "1": [["Functional.linear.0.forward"], ["File model.py, line 3, in forward, \n return self.fc(x)"]],
    }
    (dump / "stack.json").write_text(json.dumps(stack))
    return write(tmp_path / "npu.csv", npu), write(tmp_path / "gpu.csv", gpu), tmp_path / "dump"


def _overall(fwd: str, bwd: str) -> str:
    for verdict in ("error", "missing", "pass", "SKIP"):
        if verdict in (fwd, bwd):
            return verdict
    return " "


def test_html_holds_what_the_csvs_say(tmp_path):
    npu, gpu, dump = _inputs(tmp_path)
    out = run_compare(npu, gpu, tmp_path / "out", dump_dir=dump, ts="20260101000000")
    result = ac.read_rows(out.result_csv, ac.COMPARE_RESULT_HEADER)
    details = ac.read_rows(out.details_csv, ac.COMPARE_DETAILS_HEADER)
    html = out.report_html.read_text(encoding="utf-8")
    page = Page()
    page.feed(html)

    counts = {r[0]: (int(r[1]), int(r[2])) for r in page.tables["counts"][1:] if r[0] != "total"}
    api_counts = Counter(_overall(r[1], r[2]) for r in result)
    row_counts = Counter(r[ac.COMPARE_DETAILS_HEADER.index("比对结果")] for r in details)
    assert {k: v[0] for k, v in counts.items() if v[0]} == dict(api_counts)
    assert {k: v[1] for k, v in counts.items() if v[1]} == dict(row_counts)
    assert api_counts == {"error": 3, "pass": 2, "missing": 1}

    failing = page.tables["failing"][1:]
    failing_names = [r[1] for r in failing]
    assert sorted(failing_names) == sorted(r[0] for r in result if "error" in (r[1], r[2]))
    # past bound: rate 0.1 must be 0 -> 1 + 100 (‰); rmse ratio 50 / 2; ULP nearest escape mean 100 / 64
    assert failing_names == ["Tensor.add_.0", "Torch.exp.0", "Functional.linear.0"]
    assert [r[4] for r in failing] == ["101×", "25×", "1.56×"]
    assert failing[1][5] == "RMSE ratio (均方根误差比值) 50 > 2"
    assert failing[0][5] == "relative error rate (相对误差错误率) 0.1 ≠ 0"
    assert failing[2][5] == "mean ULP error (ULP误差平均值) 100 ≥ 64"  # the nearest escape

    for name in failing_names:
        section = page.sections[name]
        assert [r[0] for r in section[1:]] == [d[0] for d in details if d[0].startswith(name + ".")]
    exp_row = page.sections["Torch.exp.0"][1]
    assert exp_row[1] == "error"
    assert exp_row[2] == "error: RMSE ratio (均方根误差比值) 50 > 2"  # why this row got its verdict
    assert exp_row[3] == "benchmark (标杆比对法)"  # English first, the CSV's name in parentheses
    assert exp_row[4:6] == ["torch.float16\n(2, 3)", "torch.float16\n(2, 3)"]  # NPU, GPU dtype and shape
    assert "RMSE ratio (均方根误差比值) = 50 [error]" in exp_row[6]
    assert "benchmark standard: each NPU error ÷ the GPU error of the same output" in html
    linear_backward = page.sections["Functional.linear.0"][2]
    assert linear_backward[1] == "pass"
    assert linear_backward[2] == "pass: every metric of the ULP standard within its bound"
    # the user's frames stay, in order; torch's own frame is left out and counted
    assert page.stacks["Torch.exp.0"] == "File model.py, line 7, in forward, \n return torch.exp(x)\n" + (
        "File train.py, line 20, in main, \n loss = model(x)"
    )
    assert "1 frame of torch left out" in html and "site-packages/torch" not in html
    assert "return self.fc(x)" in page.stacks["Functional.linear.0"]
    assert "Tensor.add_.0" not in page.stacks  # not in stack.json

    assert page.tables["missing"][1:] == [[f"Torch.only_npu.0.{F}.0", "NPU only"]]
    assert page.tables["flagged"][1:] == [
        [f"Torch.sum.0.{F}.0", "dtype differs: NPU torch.bfloat16, GPU torch.float32"]
    ]
    assert len(page.images) == 2 and all(src.startswith("data:image/svg+xml;base64,") for src in page.images)
    assert "worst NPU/GPU ratio per API (÷ its error bound), by API family" in html
    assert "verdict</h3>" not in html
    # the summary, then the plots, then the failing APIs
    assert html.index('id="counts"') < html.index("class='plot'") < html.index('id="failing"')
    legend = html[html.index("id='verdicts'") : html.index("</ul>")]
    assert all(f">{v}</span>: " in legend for v in ("error", "missing", "pass", "Warning", "SKIP"))
    assert "docs/workflow.md" in html
    assert "http://" not in html and "https://" not in html and "<script" not in html

    md = out.report_md.read_text(encoding="utf-8")
    assert "| error | 3 | 3 |" in md and "| 2 | Torch.exp.0 | error |  | 25× |" in md
    assert "benchmark (标杆比对法)" in md and "docs/workflow.md" in md


def test_long_tables_fold_away(tmp_path):
    from msprobe.compare.report.html import FAILING_SHOWN

    failing = [row(f"Torch.exp.{i}.{F}.0", "torch.float16", {"均方根误差": "0.05"}) for i in range(30)]
    one_sided = [row(f"Torch.only_npu.{i}.{F}.0") for i in range(12)]
    gpu = [row(f"Torch.exp.{i}.{F}.0", "torch.float16", {"均方根误差": "0.001"}) for i in range(30)]
    out = run_compare(
        write(tmp_path / "n.csv", failing + one_sided), write(tmp_path / "g.csv", gpu), tmp_path
    )
    html = out.report_html.read_text(encoding="utf-8")
    page = Page()
    page.feed(html)
    assert len(page.tables["failing"]) - 1 == FAILING_SHOWN
    assert len(page.tables["failing-more"]) - 1 == 30 - FAILING_SHOWN
    assert html.index('<details><summary>10 more</summary><table id="failing-more"') > 0
    assert '<details><summary>show the 12 rows</summary><table id="missing"' in html
    assert html.count('<section class="api"') == 30 and html.count("<details open>") == 5


def test_a_dump_of_another_run_is_a_warning_and_the_dump_of_this_run_is_not(tmp_path, capsys):
    npu, gpu, dump = _inputs(tmp_path)
    assert run_compare(npu, gpu, tmp_path / "out", dump_dir=dump).warning == ""
    other = tmp_path / "other"
    other.mkdir()
    stack = {"0": [["Functional.gelu.7.forward"], ["File train.py, line 9, in step, \n y = gelu(x)"]]}
    (other / "stack.json").write_text(json.dumps(stack))
    out = run_compare(npu, gpu, tmp_path / "out2", dump_dir=other)
    assert out.warning == f"{other}: its stack.json names none of the 6 compared APIs (another run?)"
    assert out.warning in out.report_md.read_text(encoding="utf-8")
    argv = ["-npu", str(npu), "-gpu", str(gpu), "-o", str(tmp_path / "out3"), "--dump", str(other)]
    assert compare_main([*argv, "--strict"]) == 1
    assert capsys.readouterr().err == f"msprobe: warning: {out.warning}\n"


def test_a_dump_folder_without_stack_json_is_refused(tmp_path):
    npu, gpu, _ = _inputs(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(MsprobeError, match=r"no stack\.json"):
        run_compare(npu, gpu, tmp_path / "out", dump_dir=tmp_path / "empty")


def test_a_broken_stack_json_is_named(tmp_path):
    npu, gpu, dump = _inputs(tmp_path)
    (dump / "step0" / "rank0" / "stack.json").write_text("{not json")
    with pytest.raises(MsprobeError, match=r"stack\.json: unreadable stack\.json"):
        run_compare(npu, gpu, tmp_path / "out", dump_dir=dump)


def _report(tmp_path: Path):
    from msprobe.compare.report.model import build_report
    from msprobe.compare.run import analyse
    from msprobe.compare.table import load_details

    npu, gpu, _ = _inputs(tmp_path)
    return build_report(analyse(load_details(npu), load_details(gpu)))


def test_family_plot_data_is_each_apis_worst_ratio_over_its_bound(tmp_path):
    families = {name: sorted(values.tolist()) for name, values in _report(tmp_path).family_ratios}
    # Torch.exp: RMSE ratio 50 / bound 2; tanh and sum: worst 1 / 2. Functional.linear: ULP ratio 2 / 1.
    # Tensor.add_ is judged by absolute thresholds: no ratio, no point.
    assert families == {"Torch": [0.5, 0.5, 25.0], "Functional": [2.0]}


def _svg(text: str):
    import xml.etree.ElementTree as ET

    root = ET.fromstring(text)  # well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    return root, lambda cls: [e for e in root.iter() if e.get("class") == cls], ns


def _texts(elements) -> list[str]:
    return ["".join(e.itertext()) for e in elements]


def test_plots_label_axes_and_mark_zero_ratios():
    import numpy as np

    from msprobe.compare.report.plots import family_svg, histogram_svg, ratio_histograms, zero_position

    ratios = {"均方根误差比值": np.array([0.0, 0.0, 0.01, 1.0, 50.0])}
    _, of, _ = _svg(histogram_svg(ratios, {"均方根误差比值": 2.0}, {"均方根误差比值": "RMSE ratio"}))
    assert zero_position(ratios["均方根误差比值"]) == -3.0  # a decade left of 10^-2
    ticks = {"".join(t.itertext()): float(t.get("data-x")) for t in of("tick")}
    assert ticks["0"] == -3.0 and ticks["100"] == 0.0  # "10" with superscript "0"
    assert _texts(of("legend")) == ["ratio > 0", "error above", "ratio = 0 (2 rows)"]
    assert "ratio" in _texts(of("xlabel"))[0] and _texts(of("ylabel")) == ["output rows"]
    assert _texts(of("title")) == ["RMSE ratio"]
    (zero_bar,) = of("zero-bar")
    assert zero_bar.get("data-count") == "2"
    assert len(of("bar")) == 3 and len(of("bound")) == 1  # three nonzero ratios in three bins
    assert ratio_histograms(ratios, {}, {}).startswith("data:image/svg+xml;base64,")
    assert ratio_histograms({}, {}, {}) is None

    _, of, _ = _svg(family_svg([("Torch", np.array([0.0, 0.5, 25.0])), ("Functional", np.array([2.0]))]))
    assert _texts(of("ylabels")) == ["Torch (3)", "Functional (1)"]  # first family on top
    assert _texts(of("ylabel")) == ["API family (APIs)"] and "error bound" in _texts(of("xlabel"))[0]
    zero = [t for t in of("tick") if "".join(t.itertext()) == "0"]
    assert float(zero[0].get("data-x")) == zero_position(np.array([0.0, 0.5, 25.0, 2.0]))
    points = of("point")
    assert len(points) == 4  # one point per API
    assert sorted(p.get("fill") for p in points) == ["#3a923a", "#3a923a", "#c0392b", "#c0392b"]


def test_the_family_plot_draws_one_point_per_pixel():
    import numpy as np

    from msprobe.compare.report.plots import family_svg

    values = np.full(50_000, 0.5)  # every API on one x position
    _, of, _ = _svg(family_svg([("Torch", values)]))
    assert 1 <= len(of("point")) <= 11  # the jitter spans 11 pixel rows


def test_a_dump_root_gives_the_stacks_of_the_replayed_rank(tmp_path):
    """Pipeline stages call one API from different lines: with a dump root, the stacks come from the
    step and rank folder of the replay compared (run_ut's ``OUT/<step>/<rank>/``), not rank 0's."""
    npu, gpu, dump = _inputs(tmp_path)
    rank1 = dump / "step0" / "rank1"
    rank1.mkdir()
    stack = {
        "0": [["Functional.linear.0.forward"], ["File stage1.py, line 9, in forward, \n return self.fc(x)"]]
    }
    (rank1 / "stack.json").write_text(json.dumps(stack))
    replayed = tmp_path / "out_npu" / "step0" / "rank1"
    replayed.mkdir(parents=True)
    npu = npu.rename(replayed / npu.name)
    out = run_compare(npu, gpu, tmp_path / "out", dump_dir=dump)
    page = Page()
    page.feed(out.report_html.read_text(encoding="utf-8"))
    assert "stage1.py" in page.stacks["Functional.linear.0"]
    assert "model.py" in page.stacks["Torch.exp.0"]  # only rank 0's file names it


def test_the_error_balance_is_shown_as_not_counted(tmp_path):
    """8.1.1 writes the error balance's verdict but never counts it: beside its "error" the report says
    so, or a row failing on RMSE would seem to fail on it too."""
    from msprobe.compare.report.model import build_report
    from msprobe.compare.run import analyse
    from msprobe.compare.table import load_details

    name = f"Functional.gelu.0.{F}.0"
    npu = write(tmp_path / "n.csv", [row(name, cells={"均方根误差": "0.05", "误差均衡性": "0.1"})])
    gpu = write(tmp_path / "g.csv", [row(name)])
    (api,) = build_report(analyse(load_details(npu), load_details(gpu))).failing
    shown = {m.name: m.status for m in api.rows[0].metrics}
    assert shown["误差均衡性比值"] == "error, not counted"
    assert shown["均方根误差比值"] == "error"


def test_markdown_shows_markup_in_api_names_as_text(tmp_path):
    """A Markdown viewer renders raw HTML: an API name (from a file) must not become a tag."""
    evil = "Torch.x<img src=x onerror=alert(1)>.0"
    npu = write(tmp_path / "npu.csv", [row(f"{evil}.{F}.0", cells={"均方根误差": "0.05"})])
    gpu = write(tmp_path / "gpu.csv", [row(f"{evil}.{F}.0")])  # RMSE ratio 50: failing, listed
    out = run_compare(npu, gpu, tmp_path / "out", ts="20260101000000")
    md = out.report_md.read_text(encoding="utf-8")
    assert "x&lt;img src=x onerror=alert(1)>.0" in md and "<img" not in md
    assert "&gt;" not in md and "> 2 " in md  # the worst metric against its bound, as a terminal shows it


def test_markdown_shows_link_and_image_syntax_in_api_names_as_text(tmp_path):
    """A Markdown viewer fetches ``![t](url)`` (an image) and links ``[t](url)``: an API name from a file
    must stay text, brackets escaped."""
    evil = "Torch.![t](http://2130706433/x).0"
    npu = write(tmp_path / "npu.csv", [row(f"{evil}.{F}.0", cells={"均方根误差": "0.05"})])
    gpu = write(tmp_path / "gpu.csv", [row(f"{evil}.{F}.0")])  # RMSE ratio 50: failing, listed
    md = run_compare(npu, gpu, tmp_path / "out", ts="20260101000000").report_md.read_text(encoding="utf-8")
    assert "Torch.!\\[t\\](http://2130706433/x).0" in md and "![t](" not in md


def test_markdown_keeps_a_carriage_return_in_a_cell_inside_its_table_row(tmp_path):
    """A carriage return ends a Markdown line: inside a cell (here the shape; an API name holding one
    is refused) it cut the failing API's row in two."""
    shape = "(2,\r3)"
    npu = write(tmp_path / "npu.csv", [row(f"Torch.a.0.{F}.0", cells={"均方根误差": "0.05", "Shape": shape})])
    gpu = write(tmp_path / "gpu.csv", [row(f"Torch.a.0.{F}.0", cells={"Shape": shape})])
    md = run_compare(npu, gpu, tmp_path / "out", ts="20260101000000").report_md.read_bytes().decode("utf-8")
    assert "\r" not in md and "| 1 | Torch.a.0 | error |" in md and "(2, 3) |" in md


def test_the_headline_of_a_failing_api_without_details_rows_says_why(tmp_path):
    for side, verdict in (("npu", "error"), ("gpu", "pass")):
        folder = tmp_path / side
        folder.mkdir()
        write(folder / "accuracy_checking_details_20260101000000.csv", [row(f"Torch.a.0.{F}.0")])
        results = [["Torch.a.0", "pass", " ", ""], ["Functional.dropout.0", verdict, " ", ""]]
        ac.write_rows(
            folder / "accuracy_checking_result_20260101000000.csv", ac.RUN_UT_RESULT_HEADER, results
        )
    out = run_compare(
        tmp_path / "npu" / "accuracy_checking_details_20260101000000.csv",
        tmp_path / "gpu" / "accuracy_checking_details_20260101000000.csv",
        tmp_path / "out",
        ts="20260101000000",
    )
    html = out.report_html.read_text(encoding="utf-8")
    said = "no output rows to compare: the replay&#x27;s own verdict (NPU error/-, GPU pass/-)"
    assert f"The worst is <b>Functional.dropout.0</b>: {said}.</p>" in html
    md = out.report_md.read_text(encoding="utf-8")
    assert "| Functional.dropout.0 | error |  |  | no output rows to compare: the replay's own verdict" in md


def test_markdown_shows_a_details_path_as_code_whatever_it_holds(tmp_path):
    """The details files' paths sat in a plain code span: a backtick in a folder name closed it, and
    what followed was raw HTML to a Markdown viewer."""
    folder = tmp_path / "run`<img src=x onerror=alert(1)>`"
    folder.mkdir()
    npu = write(folder / "npu.csv", [row(f"Torch.a.0.{F}.0")])
    md = run_compare(npu, npu, tmp_path / "out").report_md.read_text(encoding="utf-8")
    line = next(line for line in md.splitlines() if line.startswith("NPU details:"))
    assert line == f"NPU details: ``{npu}``  "  # a longer fence: the path's backticks are text


def test_markdown_names_the_standard_dtype_and_shape_of_the_worst_row(tmp_path):
    """The failing-API line's worst metric and its standard, dtype and shape come from one row: here
    the second output (int64 indices, binary, 501x), not the first error row (float values, RMSE 1.5x)."""
    name = f"Torch.max.0.{F}"
    npu = [
        row(f"{name}.0", cells={"均方根误差": "0.003"}),
        row(f"{name}.1", "torch.int64", {"二进制一致错误率": "0.5"}, shape="(4,)", bench=False),
    ]
    gpu = [
        row(f"{name}.0", cells={"均方根误差": "0.001"}),
        row(f"{name}.1", "torch.int64", {"二进制一致错误率": "0"}, shape="(4,)", bench=False),
    ]
    out = run_compare(write(tmp_path / "npu.csv", npu), write(tmp_path / "gpu.csv", gpu), tmp_path / "o")
    line = next(x for x in out.report_md.read_text(encoding="utf-8").splitlines() if x.startswith("| 1 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[5].startswith("binary mismatch rate"), cells
    assert cells[6:] == ["binary (二进制一致法)", "torch.int64", "torch.int64", "(4,)"], cells
