"""The API table end to end through the pytest plugin: MindSpeed records use the MindSpeed references,
and a new API (function, standard, tolerance) given in one place (a conftest hook answer) replays."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from replay_dumps import csv_pair, forward, read_csv, scalar, tensor, write_dump

# Imported here so pytester's in-process runs find them loaded (torch cannot be imported twice).
import msprobe.run_ut.replay
import msprobe.run_ut.session  # noqa: F401
from msprobe.formats.accuracy_csv import RUN_UT_DETAILS_HEADER

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def fusion_attention(**spelling: Any) -> dict[str, Any]:
    """A BSH fusion-attention record (1 x 8 tokens, 2 heads of 16) with the given keyword arguments."""
    q = tensor("torch.float16", [1, 8, 32], -1.0, 1.0, requires_grad=True)
    kwargs = {k: scalar("int", v) for k, v in spelling.items()}
    return forward(q, q, q, scalar("int", 2), scalar("str", "BSH"), scale=scalar("float", 0.25), **kwargs)


# MindSpeed spells the window pre_tokens/next_tokens and has pse_type; torch_npu spells pre_tockens.
MINDSPEED_FA = fusion_attention(pre_tokens=65536, next_tokens=65536, pse_type=1, sparse_mode=0)
TORCH_NPU_FA = fusion_attention(pre_tockens=65536, next_tockens=65536, sparse_mode=0)
ROTARY = forward(
    tensor("torch.float16", [1, 4, 2, 8], -1.0, 1.0, requires_grad=True),
    tensor("torch.float16", [1, 4, 1, 8], -1.0, 1.0),
    tensor("torch.float16", [1, 4, 1, 8], -1.0, 1.0),
    mode=scalar("int", 1),
)
GRAD_FA = {"input": [tensor("torch.float16", [1, 8, 32], -1e-3, 1e-3)], "output": [None, None, None]}
GRAD_ROTARY = {"input": [tensor("torch.float16", [1, 4, 2, 8], -1e-3, 1e-3)], "output": [None, None, None]}


def run(pytester: pytest.Pytester, data: dict[str, Any]) -> tuple[pytest.RunResult, dict[str, list[str]]]:
    dump = write_dump(pytester.path / "d", data)
    out = pytester.path / "out"
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--msprobe-dump", str(dump), "--msprobe-out", str(out)
    )
    res, _ = csv_pair(out)
    return result, {row[0]: row for row in read_csv(res)[1:]}


def details(pytester: pytest.Pytester) -> dict[str, dict[str, str]]:
    _, det = csv_pair(pytester.path / "out")
    rows = read_csv(det)
    assert tuple(rows[0]) == RUN_UT_DETAILS_HEADER
    return {row[0]: dict(zip(RUN_UT_DETAILS_HEADER, row)) for row in rows[1:]}


def test_mindspeed_records_replay_with_the_mindspeed_references(pytester: pytest.Pytester) -> None:
    data = {
        "MindSpeed.npu_fusion_attention.0.forward": MINDSPEED_FA,
        "MindSpeed.npu_fusion_attention.0.backward": GRAD_FA,
        "MindSpeed.npu_rotary_position_embedding.0.forward": ROTARY,
        "MindSpeed.npu_rotary_position_embedding.0.backward": GRAD_ROTARY,
        "NPU.npu_fusion_attention.0.forward": TORCH_NPU_FA,
    }
    result, rows = run(pytester, data)
    result.assert_outcomes(passed=3)
    assert rows["MindSpeed.npu_fusion_attention.0"] == ["MindSpeed.npu_fusion_attention.0", "pass", "pass"]
    assert rows["MindSpeed.npu_rotary_position_embedding.0"] == [
        "MindSpeed.npu_rotary_position_embedding.0",
        "pass",
        "pass",
    ]
    assert rows["NPU.npu_fusion_attention.0"][:2] == ["NPU.npu_fusion_attention.0", "pass"]
    # forward_outputs=(0,) of the MindSpeed entry: one forward row, not the four outputs
    names = set(details(pytester))
    assert "MindSpeed.npu_fusion_attention.0.forward.output.0" in names
    assert "MindSpeed.npu_fusion_attention.0.forward.output.1" not in names


def test_each_spelling_fails_on_the_other_reference(pytester: pytest.Pytester) -> None:
    """The two fusion-attention entries really differ: each record is refused by the other's reference,
    and torch_npu has no rotary_position_embedding (8.1.1's skip, named after the missing reference)."""
    data = {
        "NPU.npu_fusion_attention.0.forward": MINDSPEED_FA,
        "MindSpeed.npu_fusion_attention.0.forward": TORCH_NPU_FA,
        "NPU.npu_rotary_position_embedding.0.forward": ROTARY,
    }
    result, rows = run(pytester, data)
    result.assert_outcomes(skipped=3)
    assert "unexpected keyword argument 'pre_tokens'" in rows["NPU.npu_fusion_attention.0"][3]
    assert "unexpected keyword argument 'pre_tockens'" in rows["MindSpeed.npu_fusion_attention.0"][3]
    assert rows["NPU.npu_rotary_position_embedding.0"][3] == (
        "no CPU reference for NPU.npu_rotary_position_embedding"
    )


NEW_API_CONFTEST = """
import torch
from msprobe.run_ut.api_info import ApiInfo, Standard


def off_by_1e4(x):
    # the "device kernel": fp32 results 1e-4 too large; the fp64 benchmark is exact
    return x * (1.0 + 1e-4) if x.dtype == torch.float32 else x * 1.0


ENTRIES = {
    "my_scale": ApiInfo(
        "my_scale",
        reference=off_by_1e4,
        standard=Standard.ABSOLUTE_THRESHOLD,
        tolerances={"torch.float32": {"rtol": 1e-3}},
    ),
    "my_scale_strict": ApiInfo("my_scale_strict", reference=off_by_1e4, standard=Standard.ABSOLUTE_THRESHOLD),
}


def pytest_msprobe_api_info(api_type, bare_name):
    return ENTRIES.get(bare_name)
"""


def test_a_new_api_given_in_one_place_replays_with_its_standard_and_tolerance(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(NEW_API_CONFTEST)
    x = tensor("torch.float32", [64], 0.5, 1.0, requires_grad=True)
    grad = {"input": [tensor("torch.float32", [64], 0.5, 1.0)], "output": [None]}
    data = {
        "Torch.my_scale.0.forward": forward(x),
        "Torch.my_scale.0.backward": grad,
        "Torch.my_scale_strict.0.forward": forward(x),
    }
    result, rows = run(pytester, data)
    result.assert_outcomes(passed=2)  # 8.1.1's run_ut status: max abs error 1e-4 < 0.001
    assert rows["Torch.my_scale.0"] == ["Torch.my_scale.0", "pass", "pass"]
    rows_by_name = details(pytester)
    tolerant = rows_by_name["Torch.my_scale.0.forward.output.0"]
    strict = rows_by_name["Torch.my_scale_strict.0.forward.output.0"]
    # the absolute-threshold standard fills its rates (and no benchmark column) ...
    assert tolerant["均方根误差"] == strict["均方根误差"] == " "
    assert float(tolerant["inf/nan错误率"]) == float(strict["inf/nan错误率"]) == 0.0
    # ... judged with rtol 1e-3 for my_scale, and the default fp32 rtol 2**-20 for my_scale_strict
    assert float(tolerant["相对误差错误率"]) == 0.0
    assert float(strict["相对误差错误率"]) == 1.0
    assert float(rows_by_name["Torch.my_scale.0.backward.output.0"]["相对误差错误率"]) == 0.0


def _linalg_samples() -> dict[str, dict[str, Any]]:
    """A forward record per ``torch.linalg`` entry of the table (float32, statistics mode)."""

    def t(*shape: int) -> dict[str, Any]:
        return tensor("torch.float32", list(shape), -1.0, 1.0)

    m, rhs = t(3, 3), t(3, 2)
    args: dict[str, tuple[Any, ...]] = {
        "vector_norm": (t(64), scalar("float", 2.0)),
        "solve": (m, rhs),
        "solve_ex": (m, rhs),
        "lstsq": (m, rhs),
        "vecdot": (t(4, 3), t(4, 3)),
        "multi_dot": ([m, m, rhs],),
        "householder_product": (m, t(2)),
        "tensorsolve": (t(2, 3, 6), t(2, 3)),
    }
    names = (
        "vector_norm matrix_norm cond matrix_rank lu lu_factor svdvals solve lstsq inv pinv vecdot multi_dot "
        "householder_product tensorsolve cholesky_ex inv_ex solve_ex lu_factor_ex ldl_factor ldl_factor_ex"
    )
    return {name: forward(*args.get(name, (m,))) for name in names.split()}


LINALG_SAMPLES = _linalg_samples()


def test_linalg_records_replay_with_torch_linalg(pytester: pytest.Pytester) -> None:
    """The dump names ``torch.linalg.X`` ``Torch.X`` (upstream's rule: the last name component).
    Where torch's own ``X`` is missing (``vector_norm``: ``clip_grad_norm_``'s), removed (``solve``)
    or another function (``cond``, control flow), the record replays with ``torch.linalg.X``."""
    data = {f"Torch.{name}.0.forward": LINALG_SAMPLES[name] for name in ("vector_norm", "cond", "solve")}
    _, rows = run(pytester, data)
    assert set(rows) == {name.rsplit(".", 1)[0] for name in data}
    skipped = {name: row[3] for name, row in rows.items() if row[1] == "SKIP"}
    assert not skipped, skipped
    names = set(details(pytester))
    assert "Torch.solve.0.forward.output.0" in names and "Torch.cond.0.forward.output.0" in names


OWN_GENERATOR_CONFTEST = """
import torch


def pytest_msprobe_device_function(api_type, bare_name, function):
    # a device whose random generator is not the CPU's (CUDA, NPU): its own dropout masks
    def own_generator(*args, **kwargs):
        torch.manual_seed(987654321)
        return function(*args, **kwargs)

    return own_generator
"""


def test_attention_with_dropout_replays_without_it(pytester: pytest.Pytester) -> None:
    """Training calls attention with ``dropout_p`` > 0 (GPT-2's and BERT's attention dropout): the
    device's mask is not the CPU's, so both sides replay it with ``dropout_p`` 0, as 8.1.1 replays
    ``dropout`` itself with p 0, and the attention's precision is what is compared."""
    pytester.makeconftest(OWN_GENERATOR_CONFTEST)
    q = tensor("torch.float32", [2, 2, 8, 16], -1.0, 1.0, requires_grad=True)
    grad = {"input": [tensor("torch.float32", [2, 2, 8, 16], -1e-3, 1e-3)], "output": [None, None, None]}
    dropout = scalar("float", 0.1)
    data = {
        "Functional.scaled_dot_product_attention.0.forward": forward(q, q, q, dropout_p=dropout),
        "Functional.scaled_dot_product_attention.0.backward": grad,
        "Functional.scaled_dot_product_attention.1.forward": forward(q, q, q, None, dropout),
    }
    _, rows = run(pytester, data)
    assert rows["Functional.scaled_dot_product_attention.0"][1:3] == ["pass", "pass"]
    assert rows["Functional.scaled_dot_product_attention.1"][1] == "pass"


NAN_TO_NUM_FAULT_CONFTEST = """
import torch

def pytest_msprobe_device_function(api_type, bare_name, function):
    if api_type == "Torch" and bare_name == "nan_to_num":
        return lambda x, *a, **k: x.clone()  # leaves inf and NaN in place
    return None
"""


def test_nan_to_num_replaces_inf_by_the_dumped_dtypes_limits_on_both_sides(pytester: pytest.Pytester) -> None:
    """``nan_to_num`` puts the largest/lowest finite value of the input's dtype where it finds
    ``±inf``: ``±3.4e38`` for a float32 device, and ``±1.8e308`` for the float64 bench if left to the
    default, a false error of an exact result. Both sides get the dumped dtype's limits (positional,
    keyword, ``Tensor.nan_to_num_``, fp16 and bf16), and a device that leaves inf still fails."""
    x32 = tensor("torch.float32", [6], float("-inf"), float("inf"))
    data = {
        "Torch.nan_to_num.0.forward": forward(x32),
        "Torch.nan_to_num.1.forward": forward(x32, scalar("float", 0.0), None, scalar("float", -7.0)),
        "Tensor.nan_to_num_.0.forward": forward(x32, posinf=scalar("float", 1e5)),
        "Tensor.nan_to_num.0.forward": forward(tensor("torch.float16", [6], float("-inf"), float("inf"))),
        "Tensor.nan_to_num.1.forward": forward(tensor("torch.bfloat16", [6], float("-inf"), float("inf"))),
    }
    _, rows = run(pytester, data)
    assert {name: row[1] for name, row in rows.items()} == dict.fromkeys(
        (
            "Torch.nan_to_num.0",
            "Torch.nan_to_num.1",
            "Tensor.nan_to_num_.0",
            "Tensor.nan_to_num.0",
            "Tensor.nan_to_num.1",
        ),
        "pass",
    )
    pytester.makeconftest(NAN_TO_NUM_FAULT_CONFTEST)
    shutil.rmtree(pytester.path / "out")
    _, rows = run(pytester, {"Torch.nan_to_num.0.forward": forward(x32)})
    assert rows["Torch.nan_to_num.0"][1] == "error"
