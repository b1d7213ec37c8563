"""Sparse, nested, quantized and mkldnn tensors: summarised from what they hold, never a lost record."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe.dump.pytorch.irregular import nested_shape
from msprobe.dump.pytorch.stat_batch import StatsBatch, tensor_stats
from msprobe.dump.pytorch.stats import Slot, tensor_md5
from tests.dump.conftest import load_dump

pytestmark = pytest.mark.filterwarnings("ignore:.*(beta state|prototype stage|deprecated):UserWarning")

SPARSE = {
    "coo": lambda d: d.to_sparse(),
    "csr": lambda d: d.to_sparse_csr(),
    "csc": lambda d: d.to_sparse_csc(),
    "bsr": lambda d: d.to_sparse_bsr((1, 1)),
    "bsc": lambda d: d.to_sparse_bsc((1, 1)),
}


def _assert_stats_of(got: tuple[Any, ...], dense: torch.Tensor) -> None:
    """Max and Min exact; Mean and Norm to float32 rounding of the sum, whose order differs (a CSC
    tensor holds its values column by column), so relative to the largest magnitude."""
    want = (dense.max().item(), dense.min().item(), dense.mean().item(), dense.norm().item())
    assert got[:2] == want[:2], (got, want)
    scale = dense.abs().max().item()
    assert all(math.isclose(g, w, rel_tol=1e-5, abs_tol=1e-5 * scale) for g, w in zip(got[2:], want[2:])), (
        got,
        want,
    )


@settings(max_examples=40, deadline=None)
@given(
    # thousandths: squares that neither underflow (the dense norm of 1e-38 is 0) nor round away
    st.lists(st.integers(-(10**6), 10**6).map(lambda i: i / 1000) | st.just(0.0), min_size=6, max_size=6),
    st.sampled_from(sorted(SPARSE)),
)
def test_a_sparse_tensor_has_the_statistics_of_its_dense_self(values: list[float], layout: str) -> None:
    dense = torch.tensor(values).view(2, 3)
    _assert_stats_of(tensor_stats(SPARSE[layout](dense)), dense)


def test_an_uncoalesced_sparse_tensor_sums_its_duplicates() -> None:
    t = torch.sparse_coo_tensor(
        [[0, 0, 1], [1, 1, 0]], [1.0, 2.0, -4.0], (2, 2), check_invariants=True
    )  # (0, 1) twice
    _assert_stats_of(tensor_stats(t), t.to_dense())


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
def test_a_nested_tensor_has_the_statistics_of_its_components(layout: torch.layout) -> None:
    parts = [torch.randn(2, 4), torch.randn(3, 4)]
    t = torch.nested.nested_tensor(parts, layout=layout)
    _assert_stats_of(tensor_stats(t), torch.cat([p.reshape(-1) for p in parts]))
    assert nested_shape(t) == [2, None, 4]


def test_quantized_and_mkldnn_tensors_have_the_statistics_of_their_values() -> None:
    x = torch.tensor([-1.0, 0.5, 2.0, 0.25])
    q = torch.quantize_per_tensor(x, 0.25, 0, torch.qint8)
    _assert_stats_of(tensor_stats(q), q.dequantize())
    _assert_stats_of(tensor_stats(x.view(2, 2).to_mkldnn()), x)


def test_sparse_md5_tells_where_the_values_sit() -> None:
    def md5(t: torch.Tensor) -> str | None:
        slot, batch = Slot(md5=True), StatsBatch()
        batch.add(t, slot)
        batch.resolve()
        assert slot.done
        return slot.digest

    a = torch.tensor([[0.0, 2.0], [0.0, 0.0]])
    b = torch.tensor([[0.0, 0.0], [0.0, 2.0]])  # the same value elsewhere
    assert md5(a.to_sparse()) == md5(a.clone().to_sparse())
    assert md5(a.to_sparse()) != md5(b.to_sparse())
    assert md5(a.to_sparse_csr()) != md5(b.to_sparse_csr())
    assert md5(torch.ones(3, device="meta")) is None  # no values: no digest, and the slot completes
    assert tensor_md5(a) != md5(a.to_sparse())  # not the dense bytes: the dense form is never made


class _SparseEmbeddingEncoder(torch.nn.Module):
    """A sparse-gradient embedding under a transformer encoder (its padding-mask paths in train and
    eval)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8, sparse=True)
        layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=True)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.enc(self.emb(ids), src_key_padding_mask=mask)
        return out


def _leaves(v: Any) -> list[dict[str, Any]]:
    if isinstance(v, dict):
        return [v] if v.get("type") == "torch.Tensor" else [x for y in v.values() for x in _leaves(y)]
    if isinstance(v, list):
        return [x for y in v for x in _leaves(y)]
    return []


@pytest.mark.parametrize(("task", "level"), [("statistics", "mix"), ("tensor", "L1")])
def test_a_sparse_embedding_loses_no_record(tmp_path: Path, debugger: Any, task: str, level: str) -> None:
    torch.manual_seed(0)
    model = _SparseEmbeddingEncoder()
    opt = torch.optim.SparseAdam(list(model.emb.parameters()))
    ids = torch.randint(0, 50, (2, 6))
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[1, 3:] = True
    dbg = debugger(task=task, level=level)
    dbg.start(model=model)
    model(ids, mask).sum().backward()
    grad = model.emb.weight.grad
    assert grad is not None and grad.is_sparse
    dense_grad = grad.to_dense()
    opt.step()
    model.eval()
    with torch.no_grad():
        model(ids, mask)
    dbg.stop()
    rank = tmp_path / "dump" / "step0" / "rank"
    assert not (rank / "dump_error_info.log").exists()
    data = load_dump(rank)["data"]
    assert all(rec for rec in data.values())  # no record left empty by a failure
    tensors = _leaves(data)
    assert all(t["Max"] is not None for t in tensors if t["shape"] != [0])
    if level == "mix":
        (weight,) = data["Module.emb.Embedding.parameters_grad"]["weight"]
        _assert_stats_of((weight["Max"], weight["Min"], weight["Mean"], weight["Norm"]), dense_grad)
    else:
        files = rank / "dump_tensor_data"
        for t in tensors:
            loaded = torch.load(files / t["data_name"], weights_only=True)
            assert loaded.dtype == getattr(torch, t["dtype"].removeprefix("torch."))
        (backward,) = [v for k, v in data.items() if k.startswith("Functional.embedding.0.backward")]
        sparse_files = [t for t in _leaves(backward) if t["shape"] == [50, 8]]
        assert sparse_files
        loaded = torch.load(files / sparse_files[0]["data_name"], weights_only=True)
        assert loaded.is_sparse and torch.equal(loaded.to_dense(), dense_grad)


def test_one_nested_tensor_spoils_no_other_records_statistics(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger()
    x = torch.randn(4, 4)
    dbg.start()
    torch.relu(x)
    torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]).relu()
    torch.tanh(x)
    dbg.stop()
    data = load_dump(tmp_path / "dump" / "step0" / "rank")["data"]
    assert data["Torch.relu.0.forward"]["output"][0]["Max"] == pytest.approx(torch.relu(x).max().item())
    assert data["Torch.tanh.0.forward"]["output"][0]["Max"] == pytest.approx(torch.tanh(x).max().item())
    (nested,) = data["Tensor.relu.0.forward"]["output"]
    assert nested["shape"] == [2, None] and nested["Min"] == 0.0


def test_md5_leaves_the_storage_of_a_recorded_tensor_resizable(debugger: Any) -> None:
    """md5 reads a tensor's bytes without exporting it to numpy, which would mark its storage
    non-resizable for good: FSDP frees each all-gathered parameter with ``storage.resize_(0)``, and a
    training that resizes a tensor the dump summarised must run as without the dump."""
    dbg = debugger(level="L1", statistics={"summary_mode": "md5"})
    x, param = torch.ones(4), torch.ones(8)
    dbg.start()
    torch.relu(x)
    torch.add(param, 1.0)
    dbg.stop()
    x.resize_(100)  # raised "Trying to resize storage that is not resizable"
    param.untyped_storage().resize_(0)  # FSDP's free_storage
    assert x.shape == (100,) and param.untyped_storage().size() == 0
    assert tensor_md5(torch.arange(6.0).view(2, 3).t()) == tensor_md5(torch.tensor([0.0, 3, 1, 4, 2, 5]))
