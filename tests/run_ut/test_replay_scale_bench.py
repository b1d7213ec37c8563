"""``benchmarks/replay_scale.py``: its synthetic dump is one the replay reads and replays in full."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from replay_dumps import csv_pair, read_csv

from msprobe.run_ut import registry
from msprobe.run_ut.records import read_dump

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "replay_scale.py"


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("replay_scale", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_synthetic_dump_has_the_requested_replayable_records(tmp_path: Path) -> None:
    dump = read_dump(bench().make_dump(tmp_path / "d", 200) / "dump.json")
    assert len(dump.records) == 200
    assert len({r.name for r in dump.records}) == 200
    assert {r.name.rsplit(".", 1)[0] for r in dump.records} == {"Torch.add", "Functional.relu", "Tensor.mul"}
    for record in dump.records:
        assert record.problem is None, record.name
        assert registry.unsupported_reason(record.name, record.api_type, record.grammar_ok) is None


@pytest.mark.slow
def test_synthetic_dump_replays_every_api(tmp_path: Path) -> None:
    dump = bench().make_dump(tmp_path / "d", 200)
    args = ["-q", "-p", "no:cacheprovider", "-W", "ignore", "-n", "0"]
    assert pytest.main([*args, f"--msprobe-dump={dump}", f"--msprobe-out={tmp_path / 'out'}"]) == 0
    rows = read_csv(csv_pair(tmp_path / "out")[0])[1:]
    assert len(rows) == 200 and {r[1] for r in rows} == {"pass"}
