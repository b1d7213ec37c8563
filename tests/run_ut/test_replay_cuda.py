"""The CUDA device path; skipped where no CUDA device exists (run on a GPU host)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from replay_dumps import DATA, forward, tensor, write_dump

from msprobe.run_ut.device import DeviceError, choose
from msprobe.run_ut.records import read_dump
from msprobe.run_ut.replay import replay

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_default_device_is_the_best_available() -> None:
    assert choose(None) == ("cuda:0" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="only meaningful without CUDA")
def test_asking_for_absent_cuda_is_a_clear_error() -> None:
    with pytest.raises(DeviceError, match="no CUDA device is available"):
        choose("cuda")


@cuda
def test_fixture_replays_on_cuda_with_upstream_verdicts() -> None:
    dump = read_dump(DATA / "cnn_tensor_L1" / "dump.json")
    results = [replay(r, dump.data_dir, "cuda:0") for r in dump.records]
    assert [r.result[1] for r in results] == ["pass"] * len(results)


@cuda
def test_fp16_exp_overflow_on_cuda(tmp_path: Path) -> None:
    data = {"Torch.exp.0.forward": forward(tensor("torch.float16", [64], -1.0, 12.0))}
    dump = read_dump(write_dump(tmp_path, data) / "dump.json")
    assert replay(dump.records[0], dump.data_dir, "cuda:0").result[1] == "error"
