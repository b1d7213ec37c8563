"""Acceptance: a statistics dump with one record of each fused NPU op replays on a CPU-only
host, and every op gets a forward verdict; none is skipped for lack of a reference."""

from pathlib import Path

import pytest
from npu_cases import FIFTEEN

from msprobe.run_ut.records import read_dump
from msprobe.run_ut.replay import replay

DUMP = Path(__file__).parents[1] / "data" / "npu_ops" / "fused_stats_dump" / "dump.json"

RECORDS = read_dump(DUMP).records


def test_the_dump_holds_every_fused_op():
    assert {r.bare_name for r in RECORDS} >= set(FIFTEEN)


@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_every_fused_op_gets_a_forward_verdict_on_cpu(record):
    result = replay(record, DUMP.parent / "dump_tensor_data", "cpu")
    forward_status = result.result[1]
    assert forward_status in ("pass", "Warning", "error"), (record.name, result.reason)
    assert "no CPU reference" not in result.reason
