"""dump.json reading for replay: grammar, record checks, dump layouts (no torch needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from replay_dumps import forward, tensor, write_dump

from msprobe.errors import MsprobeError
from msprobe.run_ut.records import data_name_problem, find_dump_files, read_dump


def test_records_in_file_order_with_backward_joined_and_modules_ignored(tmp_path: Path) -> None:
    data = {
        "Module.fc.Linear.forward.0": forward(),
        "Torch.b.0.forward": forward(),
        "Functional.a.0.forward": forward(),
        "Functional.a.0.backward": {"input": [], "output": []},
        "Torch.linalg.inv.0.forward": forward(),
    }
    dump = read_dump(write_dump(tmp_path, data) / "dump.json")
    assert [r.name for r in dump.records] == ["Torch.b.0", "Functional.a.0", "Torch.linalg.inv.0"]
    assert [r.index for r in dump.records] == [0, 1, 2]
    assert dump.records[1].backward is not None and dump.records[0].backward is None
    assert dump.records[2].bare_name == "linalg.inv" and dump.records[2].grammar_ok
    assert dump.data_dir == tmp_path / "dump_tensor_data"


def test_malformed_keys_and_records_are_problems_not_crashes(tmp_path: Path) -> None:
    data = {
        "Torch.x.0.forwardish": forward(),
        "Torch.y.0.forward": [1, 2],
        "Torch.z.0.forward": forward(tensor("torch.float32", [-1], 0.0, 1.0)),
        "Torch.ok.0.forward": forward(),
    }
    problems = {r.name: r.problem for r in read_dump(write_dump(tmp_path, data) / "dump.json").records}
    assert "does not end in '.forward'" in str(problems["Torch.x.0.forwardish"])
    assert problems["Torch.y.0"] == "forward record is not a JSON object"
    assert "is not a list of sizes" in str(problems["Torch.z.0"])
    assert problems["Torch.ok.0"] is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{}", "no 'data' object"),
        ("[1]", "no 'data' object"),
        ("{", "invalid JSON"),
        ('{"data": {}, "framework": "mindspore"}', "pytorch only"),
    ],
)
def test_not_a_dump(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / "dump.json").write_text(text, encoding="utf-8")
    with pytest.raises(MsprobeError, match=why):
        read_dump(tmp_path / "dump.json")


@given(st.lists(st.sampled_from(["a", "b.pt", "..", ".", "x"]), min_size=1, max_size=5))
def test_any_dotdot_component_is_refused(parts: list[str]) -> None:
    name = "/".join(parts)
    problem = data_name_problem(name)
    assert (problem is not None) == (".." in parts)


def test_absolute_and_windows_paths_are_refused() -> None:
    for name in ("/etc/passwd", "C:\\x.pt", "\\\\server\\share\\x.pt", "..\\x.pt", ""):
        assert data_name_problem(name) is not None, name
    assert data_name_problem("Functional.linear.0.forward.input.0.pt") is None


def test_dump_layouts_and_natural_order(tmp_path: Path) -> None:
    for rel in ("step10/rank0", "step2/rank1", "step2/rank0", "step0/proc77"):
        write_dump(tmp_path / rel, {})
    found = [str(p.parent.relative_to(tmp_path)) for p in find_dump_files(tmp_path)]
    assert found == ["step0/proc77", "step2/rank0", "step2/rank1", "step10/rank0"]
    assert find_dump_files(tmp_path / "step2" / "rank0") == [tmp_path / "step2" / "rank0" / "dump.json"]
    assert find_dump_files(tmp_path / "step2" / "rank0" / "dump.json") == [tmp_path / "step2/rank0/dump.json"]
    (tmp_path / "empty").mkdir()
    assert find_dump_files(tmp_path / "empty") == []


def test_upstream_fixture_parses(tmp_path: Path) -> None:
    from replay_dumps import DATA

    dump = read_dump(DATA / "cnn_tensor_L1" / "dump.json")
    assert len(dump.records) == 20 and all(r.problem is None for r in dump.records)
    assert json.loads((DATA / "cnn_tensor_L1" / "dump.json").read_text())["task"] == dump.task == "tensor"


def test_tensor_missing_dtype_or_shape_is_a_broken_record_naming_argument_and_key(tmp_path: Path) -> None:
    full = tensor("torch.float32", [4], 0.0, 1.0)
    no_shape = {k: v for k, v in full.items() if k != "shape"}
    no_dtype = {k: v for k, v in full.items() if k != "dtype"}
    data = {
        "Torch.a.0.forward": forward(full, no_shape),
        "Torch.b.0.forward": forward(full, x=no_dtype),
        "Torch.c.0.forward": forward({**no_dtype, "data_name": "../../secret.pt"}),
        "Torch.d.0.forward": forward(full),
        "Torch.d.0.backward": {"input": [no_shape], "output": []},
        "Torch.e.0.forward": forward([full, {"type": "torch.Tensor"}]),
    }
    problems = {r.name: r.problem for r in read_dump(write_dump(tmp_path, data) / "dump.json").records}
    assert problems == {
        "Torch.a.0": "input_args[1]: tensor has no 'shape' key",
        "Torch.b.0": "input_kwargs['x']: tensor has no 'dtype' key",
        "Torch.c.0": "input_args[0]: data_name '../../secret.pt' escapes the dump folder ('..')",
        "Torch.d.0": "backward input[0]: tensor has no 'shape' key",
        "Torch.e.0": "input_args[0][1]: tensor has no 'dtype' key",
    }
