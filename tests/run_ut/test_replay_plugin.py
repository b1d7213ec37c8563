"""The replay plugin end to end, by running pytest on small statistics dumps (pytester, in process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_dumps import csv_pair, forward, read_csv, tensor, write_dump

# Imported here so pytester's in-process runs find them loaded (torch cannot be imported twice).
import msprobe.run_ut.replay
import msprobe.run_ut.session  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

EXP_OVERFLOW = {"Torch.exp.0.forward": forward(tensor("torch.float16", [64], -1.0, 12.0))}
EXP_SMALL = {"Torch.exp.0.forward": forward(tensor("torch.float16", [64], -1.0, 1.0))}


def run(pytester: pytest.Pytester, dump: Path, *extra: str) -> pytest.RunResult:
    out = pytester.path / "out"
    return pytester.runpytest(
        "-p", "no:cacheprovider", "--msprobe-dump", str(dump), "--msprobe-out", str(out), *extra
    )


def test_fp16_exp_overflow_fails_with_one_line_reason(pytester: pytest.Pytester) -> None:
    dump = write_dump(pytester.path / "d", EXP_OVERFLOW)
    result = run(pytester, dump)
    result.assert_outcomes(failed=1)
    failure = [line for line in result.outlines if line.startswith("Torch.exp.0")]
    assert len(failure) == 1, result.outlines
    assert failure[0].startswith("Torch.exp.0.forward.output.0")
    res, det = csv_pair(pytester.path / "out")
    assert read_csv(res)[1][:2] == ["Torch.exp.0", "error"]
    assert read_csv(det)[1][21] == "error"


def test_fp16_exp_in_unit_range_passes(pytester: pytest.Pytester) -> None:
    dump = write_dump(pytester.path / "d", EXP_SMALL)
    run(pytester, dump).assert_outcomes(passed=1)
    res, _ = csv_pair(pytester.path / "out")
    assert read_csv(res)[1] == ["Torch.exp.0", "pass", " "]


# A device one bf16 ulp high everywhere: erf of [0.33, 0.47] lies in [0.35, 0.5), where that is a
# relative error of 0.2% to 0.7%: the thousandth ratio fails and the hundredth passes, a Warning on
# any CPU (a faultless kernel's own rounding may be exact, which passes).
ULP_HIGH_CONFTEST = """
import torch

def pytest_msprobe_device_function(api_type, bare_name, function):
    def one_ulp_high(*args, **kwargs):
        out = function(*args, **kwargs)
        return torch.nextafter(out, torch.tensor(float("inf"), dtype=out.dtype))
    return one_ulp_high
"""
ERF_BF16 = {"Torch.erf.0.forward": forward(tensor("torch.bfloat16", [4096], 0.33, 0.47))}


def test_warning_is_a_pass_with_its_own_category(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(ULP_HIGH_CONFTEST)
    dump = write_dump(pytester.path / "d", ERF_BF16)
    result = run(pytester, dump, "-rA")
    res, _ = csv_pair(pytester.path / "out")
    status = read_csv(res)[1][1]
    assert status == "Warning"
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*AccuracyWarning: Torch.erf.0*", "*1 accuracy-warning*"])


@pytest.mark.parametrize("tb", ["auto", "line"])
def test_a_warning_made_an_error_by_w_error_fails_in_one_line(pytester: pytest.Pytester, tb: str) -> None:
    # -W error (or a project's filterwarnings = error) turns the Warning verdict into a failure: its
    # reason in one line, as an error's, not pytest's traceback through its hook machinery
    pytester.makeconftest(ULP_HIGH_CONFTEST)
    dump = write_dump(pytester.path / "d", ERF_BF16)
    result = run(pytester, dump, "-W", "error::msprobe.run_ut.collect.AccuracyWarning", f"--tb={tb}")
    result.assert_outcomes(failed=1)
    assert read_csv(csv_pair(pytester.path / "out")[0])[1][1] == "Warning"
    assert not any("_pytest/" in line or "_multicall" in line for line in result.outlines), result.outlines
    assert any("Torch.erf.0.forward.output.0" in line for line in result.outlines)


def test_skip_reasons_blacklist_unsupported_and_missing_function(pytester: pytest.Pytester) -> None:
    data = {
        "Torch.empty_like.0.forward": forward(tensor("torch.float32", [2], 0.0, 1.0)),
        "Distributed.all_reduce.0.forward": forward(tensor("torch.float32", [2], 0.0, 1.0)),
        "Torch.no_such_api.0.forward": forward(tensor("torch.float32", [2], 0.0, 1.0)),
        "NPU.npu_made_up.0.forward": forward(tensor("torch.float16", [2], 0.0, 1.0)),
    }
    dump = write_dump(pytester.path / "d", data)
    result = run(pytester, dump, "-rs")
    result.assert_outcomes(skipped=4)
    rows = {r[0]: r for r in read_csv(csv_pair(pytester.path / "out")[0])[1:]}
    assert rows["Torch.empty_like.0"] == [
        "Torch.empty_like.0",
        "SKIP",
        "SKIP",
        "API empty_like in black list or not in white list. SKIP.",
    ]
    assert rows["Distributed.all_reduce.0"][3] == "API Distributed.all_reduce.0 not support for run ut. SKIP."
    assert rows["NPU.npu_made_up.0"][3] == "no CPU reference for NPU.npu_made_up"
    assert rows["Torch.no_such_api.0"][1] == "SKIP"
    result.stdout.fnmatch_lines(["*no CPU reference for NPU.npu_made_up*"])


def test_module_records_are_ignored_and_k_selects(pytester: pytest.Pytester) -> None:
    data = {
        "Module.fc.Linear.forward.0": forward(tensor("torch.float32", [2], 0.0, 1.0)),
        "Torch.exp.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
        "Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
    }
    dump = write_dump(pytester.path / "d", data)
    result = run(pytester, dump, "-k", "tanh", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*::Torch.tanh.0"])
    assert not any("exp" in line or "Module" in line for line in result.outlines)
    assert not (pytester.path / "out").exists()  # --collect-only writes no CSV


def test_config_white_list(pytester: pytest.Pytester) -> None:
    data = {
        "Torch.exp.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
        "Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
    }
    dump = write_dump(pytester.path / "d", data)
    cfg = pytester.path / "config.json"
    cfg.write_text('{"run_ut": {"white_list": ["tanh"]}}', encoding="utf-8")
    run(pytester, dump, "--msprobe-config", str(cfg)).assert_outcomes(passed=1, skipped=1)


def test_backward_rows_from_generated_grad(pytester: pytest.Pytester) -> None:
    data = {
        "Torch.tanh.0.forward": forward(tensor("torch.float32", [16], -1.0, 1.0, requires_grad=True)),
        "Torch.tanh.0.backward": {"input": [tensor("torch.float32", [16], -1.0, 1.0)], "output": [None]},
        "Torch.max.0.forward": forward(
            tensor("torch.float32", [4, 4], -1.0, 1.0, requires_grad=True), {"type": "int", "value": 1}
        ),
        "Torch.max.0.backward": {"input": [tensor("torch.float32", [4], -1.0, 1.0)], "output": [None]},
        "Torch.mul.0.forward": forward(
            tensor("torch.float32", [4], -1.0, 1.0),
            {"type": "float", "value": 2.0},
            out=tensor("torch.float32", [4], -1.0, 1.0),
        ),
    }
    dump = write_dump(pytester.path / "d", data)
    run(pytester, dump).assert_outcomes(passed=3)
    res, det = csv_pair(pytester.path / "out")
    rows = {r[0]: r for r in read_csv(res)[1:]}
    assert rows["Torch.tanh.0"] == ["Torch.tanh.0", "pass", "pass"]
    assert rows["Torch.max.0"] == ["Torch.max.0", "pass", "SKIP", "Multiple backward is not supported."]
    assert rows["Torch.mul.0"][2:] == [
        "SKIP",
        "function with out=... arguments don't support automatic differentiation, skip backward.",
    ]
    names = [r[0] for r in read_csv(det)[1:]]
    assert "Torch.tanh.0.backward.output.0" in names


def test_not_a_dump_is_one_line_usage_error(pytester: pytest.Pytester) -> None:
    folder = pytester.path / "empty"
    folder.mkdir()
    result = run(pytester, folder)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*not a dump*"])


def test_dump_without_data_key_is_a_usage_error(pytester: pytest.Pytester) -> None:
    folder = pytester.path / "bad"
    folder.mkdir()
    (folder / "dump.json").write_text('{"task": "tensor"}', encoding="utf-8")
    result = run(pytester, folder)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    reason = "*dump.json: not a dump (no 'data' object)*"
    result.stderr.fnmatch_lines([f"ERROR: --msprobe-dump={folder}: {reason}"])
    assert not any("Traceback" in line for line in result.outlines + result.errlines)


def test_conftest_can_supply_a_registry_entry_through_the_hook(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import torch
        from msprobe.run_ut.registry import ApiInfo

        def pytest_msprobe_api_info(api_type, bare_name):
            if bare_name == "my_gelu":
                return ApiInfo("my_gelu", reference=lambda x: x * torch.sigmoid(1.702 * x))
            return None
        """
    )
    data = {"NPU.my_gelu.0.forward": forward(tensor("torch.float32", [32], -1.0, 1.0))}
    dump = write_dump(pytester.path / "d", data)
    run(pytester, dump).assert_outcomes(passed=1)


def test_conftest_can_replace_the_device_side_function_through_the_hook(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        def pytest_msprobe_device_function(api_type, bare_name, function):
            if (api_type, bare_name) == ("Torch", "exp"):
                return lambda x: function(x) * 1.5  # the device side only: the benchmark stays exact
            return None
        """
    )
    data = {
        "Torch.exp.0.forward": forward(tensor("torch.float32", [32], -1.0, 1.0)),
        "Torch.tanh.0.forward": forward(tensor("torch.float32", [32], -1.0, 1.0)),
    }
    dump = write_dump(pytester.path / "d", data)
    run(pytester, dump).assert_outcomes(passed=1, failed=1)
    verdicts = {r[0]: r[1] for r in read_csv(csv_pair(pytester.path / "out")[0])[1:]}
    assert verdicts == {"Torch.exp.0": "error", "Torch.tanh.0": "pass"}


def test_the_projects_conftest_answers_the_hooks_for_a_dump_outside_the_project(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # pytest from the project folder with --msprobe-dump elsewhere: the conftest there is imported, and
    # its answers must apply although the dump's items do not live under its folder
    pytester.makeconftest(
        """
        import torch
        from msprobe.run_ut.registry import ApiInfo

        def pytest_msprobe_device_function(api_type, bare_name, function):
            if (api_type, bare_name) == ("Torch", "exp"):
                return lambda x: function(x) * 1.5
            return None

        def pytest_msprobe_api_info(api_type, bare_name):
            if bare_name == "my_gelu":
                return ApiInfo("my_gelu", reference=lambda x: x * torch.sigmoid(1.702 * x))
            return None
        """
    )
    data = {
        "Torch.exp.0.forward": forward(tensor("torch.float32", [32], -1.0, 1.0)),
        "NPU.my_gelu.0.forward": forward(tensor("torch.float32", [32], -1.0, 1.0)),
    }
    dump = write_dump(tmp_path_factory.mktemp("elsewhere") / "d", data)
    run(pytester, dump).assert_outcomes(passed=1, failed=1)
    verdicts = {r[0]: r[1] for r in read_csv(csv_pair(pytester.path / "out")[0])[1:]}
    assert verdicts == {"Torch.exp.0": "error", "NPU.my_gelu.0": "pass"}


def test_a_node_id_inside_the_dump_selects_one_api(pytester: pytest.Pytester) -> None:
    data = {
        "Torch.exp.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
        "Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
    }
    dump = write_dump(pytester.path / "d", data)
    run(pytester, dump, f"{dump / 'dump.json'}::Torch.tanh.0").assert_outcomes(passed=1)
    assert [r[0] for r in read_csv(csv_pair(pytester.path / "out")[0])[1:]] == ["Torch.tanh.0"]


def test_backward_record_without_first_grad_is_not_dropped(pytester: pytest.Pytester) -> None:
    # ``a, b = x.split(2)`` with ``a`` unused: the dump's backward input is [null, grad_b]
    data = {
        "Torch.split.0.forward": forward(
            tensor("torch.float32", [4, 3], -1.0, 1.0, requires_grad=True), {"type": "int", "value": 2}
        ),
        "Torch.split.0.backward": {
            "input": [None, tensor("torch.float32", [2, 3], -1.0, 1.0)],
            "output": [None],
        },
        "Torch.tanh.0.forward": forward(tensor("torch.float32", [16], -1.0, 1.0, requires_grad=True)),
        "Torch.tanh.0.backward": {"input": [None], "output": [None]},
    }
    dump = write_dump(pytester.path / "d", data)
    run(pytester, dump).assert_outcomes(passed=2)
    res, _ = csv_pair(pytester.path / "out")
    rows = {r[0]: r for r in read_csv(res)[1:]}
    assert rows["Torch.split.0"] == ["Torch.split.0", "pass", "SKIP", "Multiple backward is not supported."]
    assert rows["Torch.tanh.0"][:3] == ["Torch.tanh.0", "pass", "SKIP"]
    assert "no gradient" in rows["Torch.tanh.0"][3]


def test_the_gradient_of_a_call_returning_another_output_of_its_node_is_found(
    pytester: pytest.Pytester,
) -> None:
    """``linalg.svdvals`` returns output 1 of the SVD's node: its backward record's input is [null,
    grad, null], and the one gradient there is its output's (it was a SKIP, "no gradient")."""
    x = tensor("torch.float32", [4, 3], -1.0, 1.0, requires_grad=True)
    data = {
        "Torch.svdvals.0.forward": forward(x, output=[tensor("torch.float32", [3], 0.5, 2.0)]),
        "Torch.svdvals.0.backward": {
            "input": [None, tensor("torch.float32", [3], -1.0, 1.0), None],
            "output": [tensor("torch.float32", [4, 3], -1.0, 1.0)],
        },
    }
    dump = write_dump(pytester.path / "d", data)
    run(pytester, dump).assert_outcomes(passed=1)
    res, details = csv_pair(pytester.path / "out")
    assert read_csv(res)[1][:3] == ["Torch.svdvals.0", "pass", "pass"]
    (row,) = [r for r in read_csv(details)[1:] if r[0] == "Torch.svdvals.0.backward.output.0"]
    assert row[3] == "(4, 3)"


@pytest.mark.parametrize(
    "api, kwargs, out, said",
    [
        # tensors in a keyword list are replayed without grad (8.1.1's rule): the backward cannot run,
        # which must not cost the forward its verdict
        ("Torch.cat", {"tensors": ["t", "t"], "dim": {"type": "int", "value": 0}}, [8, 4], "requires grad"),
        # only positional gradients are compared: the backward ran and compared nothing, a blank cell
        # (a faulty backward unseen) where the backward record asked for one
        ("Torch.matmul", {"input": "t", "other": "t"}, [4, 4], "keyword arguments"),
    ],
)
def test_a_backward_of_keyword_inputs_is_a_skip_saying_why(
    pytester: pytest.Pytester, api: str, kwargs: dict, out: list[int], said: str
) -> None:
    t = tensor("torch.float32", [4, 4], -1.0, 1.0, requires_grad=True)
    given = {k: ([t for _ in v] if isinstance(v, list) else t if v == "t" else v) for k, v in kwargs.items()}
    data = {
        f"{api}.0.forward": {
            "input_args": [],
            "input_kwargs": given,
            "output": [tensor("torch.float32", out, -1.0, 1.0, requires_grad=True)],
        },
        f"{api}.0.backward": {"input": [tensor("torch.float32", out, -1.0, 1.0)], "output": [None, None]},
    }
    dump = write_dump(pytester.path / "d", data)
    run(pytester, dump).assert_outcomes(passed=1)
    res, _ = csv_pair(pytester.path / "out")
    (row,) = read_csv(res)[1:]
    assert row[:3] == [f"{api}.0", "pass", "SKIP"]
    assert said in row[3]
