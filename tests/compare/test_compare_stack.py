"""stack.json reading for the report, and leaving the framework's own frames out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msprobe.compare.report.stack import load_stacks, parse_stack, user_frames
from msprobe.errors import MsprobeError

DATA = Path(__file__).parents[1] / "data" / "compare" / "upstream_v811_cnn"


def test_upstream_stack_json_of_a_rank_folder():
    stacks = load_stacks(DATA)
    assert "Functional.conv2d.0" in stacks and "Tensor.add_.7" in stacks
    assert any("F.conv2d(" in frame for frame in stacks["Functional.conv2d.0"])


def test_both_layouts_and_the_forward_suffix():
    grouped = {"0": [["Torch.a.0.forward", "Torch.b.1.forward"], ["File x.py, line 1, in f, \n a()"]]}
    flat = {"Torch.c.0.forward": ["File y.py, line 2, in g, \n c()"]}
    assert parse_stack(grouped, Path("s.json")) == {
        "Torch.a.0": ["File x.py, line 1, in f, \n a()"],
        "Torch.b.1": ["File x.py, line 1, in f, \n a()"],
    }
    assert parse_stack(flat, Path("s.json")) == {"Torch.c.0": ["File y.py, line 2, in g, \n c()"]}
    with pytest.raises(MsprobeError, match=r"s\.json: entry '0' is not \[\[names\], \[frames\]\]"):
        parse_stack({"0": 5}, Path("s.json"))


def test_first_file_wins_and_links_out_of_the_folder_are_not_read(tmp_path):
    root = tmp_path / "dump"
    for step, text in (("step0", "first"), ("step1", "second")):
        (root / step / "rank0").mkdir(parents=True)
        (root / step / "rank0" / "stack.json").write_text(json.dumps({"0": [["Torch.a.0.forward"], [text]]}))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "stack.json").write_text(json.dumps({"0": [["Torch.z.0.forward"], ["secret"]]}))
    (root / "step2").mkdir()
    (root / "step2" / "rank0").symlink_to(outside)
    stacks = load_stacks(root)
    assert stacks == {"Torch.a.0": ["first"]}


def test_user_frames_leave_out_the_framework_packages_only():
    frames = [
        "File /home/me/model.py, line 7, in forward, \n return F.softmax(x)",
        "File /venv/lib/python3.11/site-packages/torch/nn/modules/module.py, line 1789, in call, \n f()",
        "File /usr/lib/python3/dist-packages/torch_npu/utils/hook.py, line 3, in wrap, \n f()",
        "File C:\\Python311\\Lib\\site-packages\\torch\\nn\\functional.py, line 9, in softmax, \n f()",
        "File /venv/lib/python3.11/site-packages/torchvision/ops/boxes.py, line 5, in nms, \n f()",
        "File /home/me/torch/train.py, line 20, in main, \n loss = model(x)",
        "not a frame line",
    ]
    kept, dropped = user_frames(frames)
    assert kept == [frames[0], frames[4], frames[5], frames[6]]  # order kept, torchvision is not torch
    assert dropped == 3
