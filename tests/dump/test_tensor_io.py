"""The lean ``.pt`` writer: every file loads with ``weights_only=True`` as the tensor torch.save writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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
    torch.complex32,  # the dtypes without a typed storage class: their storage is pickled untyped
    torch.uint16,
    torch.uint32,
    torch.uint64,
]
SHAPES = [(3, 4), (), (0, 3), (1, 5), (5, 1), (2, 1, 3)]


def _make(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    g = torch.Generator().manual_seed(len(shape) * 31 + dtype.itemsize)
    if dtype.is_complex:
        return torch.randn(shape, dtype=torch.complex64, generator=g).to(dtype)
    return (torch.randn(shape, generator=g) * 5).abs().to(dtype)


def _check(path: Path, ref: torch.Tensor) -> None:
    got = torch.load(path, weights_only=True)
    assert type(got) is torch.Tensor
    assert got.dtype == ref.dtype and got.shape == ref.shape and not got.requires_grad
    if ref.dtype == torch.complex32:  # no equal for it: its bytes
        got, ref = got.reshape(-1).view(torch.uint8), ref.resolve_conj().reshape(-1).view(torch.uint8)
    assert torch.equal(got, ref)
    assert os.stat(path).st_mode & 0o777 == 0o640


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
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


# -- a tensor written once per step ---------------------------------------------------------------
def _wrote(tmp_path: Path) -> list[str]:
    return sorted(os.listdir(tmp_path))


def test_the_same_unchanged_tensor_names_the_earlier_file(tmp_path: Path) -> None:
    w = TensorWriter(str(tmp_path))
    t = torch.randn(4, 4)
    assert w.save(t, "a.pt") == "a.pt"
    assert w.save(t, "b.pt") == "a.pt"
    assert _wrote(tmp_path) == ["a.pt"]
    t.add_(1.0)
    assert w.save(t, "c.pt") == "c.pt"
    _check(tmp_path / "c.pt", t)


def test_swapped_memory_is_written_again(tmp_path: Path) -> None:
    w = TensorWriter(str(tmp_path))
    t = torch.randn(4, 4)
    w.save(t, "a.pt")
    t.data = torch.randn(4, 4)  # no version bump
    assert w.save(t, "b.pt") == "b.pt"
    _check(tmp_path / "b.pt", t)
    t.data = t.detach().view(16)  # the same address, read another way
    assert w.save(t, "c.pt") == "c.pt"
    _check(tmp_path / "c.pt", t)


def test_views_of_one_base_with_the_same_layout_share_a_file(tmp_path: Path) -> None:
    w = TensorWriter(str(tmp_path))
    base = torch.randn(4, 4)
    assert w.save(base, "a.pt") == "a.pt"
    assert w.save(base.view(4, 4), "b.pt") == "a.pt"
    assert w.save(base[:], "c.pt") == "a.pt"
    row = base[1]
    assert w.save(row, "d.pt") == "d.pt"
    assert w.save(base[1], "e.pt") == "d.pt"  # sibling views
    base[1].mul_(2.0)  # through another view: the shared version counter moves
    assert w.save(row, "f.pt") == "f.pt"
    assert w.save(base.view(4, 4), "g.pt") == "g.pt"
    _check(tmp_path / "f.pt", row)
    _check(tmp_path / "g.pt", base)


def test_aliases_that_may_change_unseen_are_written(tmp_path: Path) -> None:
    w = TensorWriter(str(tmp_path))
    t = torch.randn(4, 4)
    w.save(t, "a.pt")
    alias = t.data  # its own version counter: a write through it does not move t's
    alias.add_(1.0)
    assert w.save(alias, "b.pt") == "b.pt"
    _check(tmp_path / "b.pt", alias)
    c = torch.randn(3, dtype=torch.complex64)
    w.save(c, "c.pt")
    assert w.save(c.conj(), "d.pt") == "d.pt"  # the same memory, other values
    _check(tmp_path / "d.pt", c.conj().resolve_conj())


def test_forget_drops_the_tensor_and_everything_on_its_memory(tmp_path: Path) -> None:
    w = TensorWriter(str(tmp_path))
    base = torch.randn(4, 4)
    view = base[:]
    w.save(base, "a.pt")
    assert w.save(view, "b.pt") == "a.pt"
    view.data.zero_()  # as a collective writes: no version counter moves ...
    w.forget(view)  # ... so the caller says so
    assert w.save(base, "c.pt") == "c.pt"
    _check(tmp_path / "c.pt", torch.zeros(4, 4))


def test_a_file_written_again_is_not_named_for_its_old_contents(tmp_path: Path) -> None:
    w = TensorWriter(str(tmp_path))
    a, b = torch.randn(3), torch.randn(3)
    w.save(a, "n.pt")
    w.save(b, "n.pt")  # the same name twice: the file now holds b
    assert w.save(a, "m.pt") == "m.pt"
    _check(tmp_path / "m.pt", a)
    _check(tmp_path / "n.pt", b)


def test_inference_tensors_are_written_every_time(tmp_path: Path) -> None:
    w = TensorWriter(str(tmp_path))
    with torch.inference_mode():
        t = torch.randn(3)
    assert w.save(t, "a.pt") == "a.pt"
    assert w.save(t, "b.pt") == "b.pt"  # no version counter: never known to be unchanged
    _check(tmp_path / "b.pt", t)


_FULL_DISK = """
import errno, io, sys
import torch
from msprobe.dump.pytorch.tensor_io import _LeanSaver

class FullDisk(io.RawIOBase):
    written = 0
    def writable(self):
        return True
    def write(self, b):
        if self.written + len(b) > 1 << 16:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.written += len(b)
        return len(b)

try:
    _LeanSaver().save(torch.randn(1 << 18), FullDisk())
except OSError as exc:
    print("raised", exc.errno == errno.ENOSPC)
"""


def test_a_full_disk_is_an_error_not_an_abort(tmp_path: Path) -> None:
    """A write that fails mid-file leaves the archive unfinished; finishing it again in the writer's
    destructor would throw from C++ and abort the training process."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK], env=env, capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout.strip()) == (0, "raised True"), done.stderr[-2000:]


def test_a_failed_write_is_said_as_itself_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk is not a changed writer API: the OSError is raised as it is (not torch.save's retry
    error ``unexpected pos``), the lean writer stays on for the files after it, and the unfinished file
    is removed."""
    import errno

    w = TensorWriter(str(tmp_path))
    real = tensor_io._LeanSaver.save

    def full_disk(self: object, d: torch.Tensor, fh: object) -> None:
        fh.write(b"partial archive")  # type: ignore[attr-defined]
        fh.flush()  # type: ignore[attr-defined]
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tensor_io._LeanSaver, "save", full_disk)
    with pytest.raises(OSError) as exc:
        w.save(torch.randn(3, 3), "f.pt")
    assert exc.value.errno == errno.ENOSPC
    assert w._lean is not None
    assert _wrote(tmp_path) == []
    monkeypatch.setattr(tensor_io._LeanSaver, "save", real)  # room again
    t = torch.randn(3, 3)
    w.save(t, "g.pt")
    _check(tmp_path / "g.pt", t)
    assert w._lean is not None


def test_a_failed_torch_save_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    monkeypatch.setenv("MSPROBE_PT_WRITER", "torch.save")
    w = TensorWriter(str(tmp_path))

    def full_disk(obj: object, fh: Any, *args: object, **kwargs: object) -> None:
        fh.write(b"partial archive")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError):
        w.save(torch.randn(3, 3), "f.pt")
    assert _wrote(tmp_path) == []
