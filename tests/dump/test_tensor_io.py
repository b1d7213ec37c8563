"""The lean ``.pt`` writer: every file loads with ``weights_only=True`` as the tensor torch.save writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from msprobe.dump.pytorch import tensor_io
from msprobe.dump.pytorch.tensor_io import TensorWriter

DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
]
SHAPES = [(3, 4), (), (0, 3), (1, 5), (5, 1), (2, 1, 3)]


def _make(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    g = torch.Generator().manual_seed(len(shape) * 31 + dtype.itemsize)
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=g)
    return (torch.randn(shape, generator=g) * 5).to(dtype)


def _check(path: Path, ref: torch.Tensor) -> None:
    got = torch.load(path, weights_only=True)
    assert type(got) is torch.Tensor
    assert got.dtype == ref.dtype and got.shape == ref.shape and not got.requires_grad
    assert torch.equal(got, ref)
    assert os.stat(path).st_mode & 0o777 == 0o640


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_plain_tensors_round_trip(tmp_path: Path, dtype: torch.dtype) -> None:
    w = TensorWriter(str(tmp_path))
    for i, shape in enumerate(SHAPES):
        t = _make(dtype, shape)
        w.save(t, f"t{i}.pt")
        _check(tmp_path / f"t{i}.pt", t)
    assert w._lean is not None  # the lean path was taken and did not fall back


def test_views_params_and_special_tensors(tmp_path: Path) -> None:
    base = torch.randn(6, 8)
    cases = [
        base.t(),
        base[:, 2:5],
        base[1],
        base.expand(2, 6, 8),
        torch.randn(4, requires_grad=True) * 2,
        torch.nn.Parameter(torch.randn(3)),
        torch.randn(3, dtype=torch.complex64).conj(),
        torch.randn(3, 4).to(torch.float8_e4m3fn),
    ]
    w = TensorWriter(str(tmp_path))
    for i, t in enumerate(cases):
        w.save(t, f"c{i}.pt")
        ref = t.detach().resolve_conj()
        if ref.dtype.is_floating_point and ref.dtype.itemsize == 1:
            ref = ref.float()
        _check(tmp_path / f"c{i}.pt", ref.contiguous())


def test_same_key_reuses_pickle_but_not_data(tmp_path: Path) -> None:
    w = TensorWriter(str(tmp_path))
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    w.save(a, "a.pt")
    w.save(b, "b.pt")
    _check(tmp_path / "a.pt", a)
    _check(tmp_path / "b.pt", b)


def test_falls_back_to_torch_save_when_writer_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = TensorWriter(str(tmp_path))

    def broken(self: object, d: torch.Tensor, fh: object) -> None:
        fh.write(b"partial garbage")  # type: ignore[attr-defined]
        raise RuntimeError("writer API changed")

    monkeypatch.setattr(tensor_io._LeanSaver, "save", broken)
    t = torch.randn(3, 3)
    w.save(t, "f.pt")
    assert w._lean is None
    _check(tmp_path / "f.pt", t)


def test_env_selects_torch_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MSPROBE_PT_WRITER", "torch.save")
    w = TensorWriter(str(tmp_path))
    assert w._lean is None
    t = torch.randn(2, 3)
    w.save(t, "e.pt")
    _check(tmp_path / "e.pt", t)
