"""A tensor dump whose records share files (a tensor seen again unchanged is written once) replays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from replay_dumps import csv_pair, read_csv

from msprobe.run_ut.inputs import ArgBuilder
from msprobe.run_ut.records import read_dump


def _dump_chain(root: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    """relu -> exp -> tanh in tensor mode: each output is the next call's input."""
    from msprobe.pytorch import PrecisionDebugger

    PrecisionDebugger._shutdown()
    try:
        dbg = PrecisionDebugger(dump_path=str(root), task="tensor", level="L1")
        x = torch.randn(64, generator=torch.Generator().manual_seed(3))
        dbg.start()
        y = torch.relu(x)
        z = torch.exp(y)
        torch.tanh(z)
        dbg.stop()
    finally:
        PrecisionDebugger._shutdown()
    return root / "step0" / "rank", {"Torch.exp.0": y, "Torch.tanh.0": z}


def test_records_naming_an_earlier_file_replay_from_it(tmp_path: Path) -> None:
    rank, inputs = _dump_chain(tmp_path / "dump")
    data = json.loads((rank / "dump.json").read_text())["data"]
    assert data["Torch.exp.0.forward"]["input_args"][0]["data_name"] == "Torch.relu.0.forward.output.0.pt"
    assert data["Torch.tanh.0.forward"]["input_args"][0]["data_name"] == "Torch.exp.0.forward.output.0.pt"
    assert not (rank / "dump_tensor_data" / "Torch.exp.0.forward.input.0.pt").exists()
    dump = read_dump(rank / "dump.json")
    for record in dump.records:
        assert record.problem is None, record.problem
        if record.name in inputs:
            args, _ = ArgBuilder(dump.data_dir, torch.Generator(), record.name).build(record.forward)
            assert torch.equal(args[0].tensor, inputs[record.name])

    out = tmp_path / "out"
    argv = ["-q", "-p", "no:cacheprovider", "-W", "ignore", "--rootdir", str(rank), "-n", "0"]
    code = int(pytest.main([*argv, "--msprobe-dump", str(rank), "--msprobe-out", str(out)]))
    assert code == 0
    rows = read_csv(csv_pair(out)[0])[1:]
    assert sorted(r[0] for r in rows) == ["Torch.exp.0", "Torch.relu.0", "Torch.tanh.0"]
    assert all(r[1] == "pass" for r in rows), rows


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_sparse_embeddings_records_replay_and_compare_densely(tmp_path: Path) -> None:
    """``nn.Embedding(sparse=True)`` and SparseAdam: a sparse gradient, coalesced and masked; its
    records replay with the sparse tensors read back from their files, compared as dense ones."""
    from msprobe.pytorch import PrecisionDebugger

    PrecisionDebugger._shutdown()
    try:
        torch.manual_seed(0)
        emb = torch.nn.Embedding(50, 8, sparse=True)
        opt = torch.optim.SparseAdam(list(emb.parameters()))
        dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="tensor", level="L1")
        dbg.start()
        emb(torch.randint(0, 50, (2, 6))).square().sum().backward()
        opt.step()
        dbg.stop()
    finally:
        PrecisionDebugger._shutdown()
    rank = tmp_path / "dump" / "step0" / "rank"
    out = tmp_path / "out"
    argv = ["-q", "-p", "no:cacheprovider", "-W", "ignore", "--rootdir", str(rank), "-n", "0"]
    code = int(pytest.main([*argv, "--msprobe-dump", str(rank), "--msprobe-out", str(out)]))
    rows = {r[0]: r[1:3] for r in read_csv(csv_pair(out)[0])[1:]}
    sparse_apis = [name for name in rows if name.startswith(("Tensor.coalesce", "Tensor.sparse_mask"))]
    assert sparse_apis, sorted(rows)
    assert all(rows[name][0] == "pass" for name in sparse_apis), rows
    assert rows["Functional.embedding.0"] == ["pass", "pass"]
    assert code == 0, rows
