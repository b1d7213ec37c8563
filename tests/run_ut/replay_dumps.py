"""Helpers for replay tests: small dump.json files in upstream's format, written into tmp folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "run_ut"


def tensor(
    dtype: str,
    shape: list[int],
    lo: Any,
    hi: Any,
    *,
    requires_grad: bool = False,
    data_name: str | None = None,
) -> dict[str, Any]:
    """A tensor ARG as upstream's statistics dump writes it (Mean/Norm are not used by replay)."""
    spec: dict[str, Any] = {
        "type": "torch.Tensor",
        "dtype": dtype,
        "shape": shape,
        "Max": hi,
        "Min": lo,
        "Mean": None,
        "Norm": None,
        "requires_grad": requires_grad,
    }
    if data_name is not None:
        spec["data_name"] = data_name
    return spec


def scalar(kind: str, value: Any) -> dict[str, Any]:
    """A non-tensor ARG as upstream's dump writes it (``{"type": "int", "value": 3}``)."""
    return {"type": kind, "value": value}


def forward(*args: Any, output: list[Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    return {"input_args": list(args), "input_kwargs": kwargs, "output": output or []}


def write_dump(folder: Path, data: dict[str, Any], *, task: str = "statistics", level: str = "L1") -> Path:
    """``folder/dump.json`` with the given ``data`` records; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = {
        "task": task,
        "level": level,
        "framework": "pytorch",
        "dump_data_dir": str(folder / "dump_tensor_data") if task == "tensor" else None,
        "data": data,
    }
    (folder / "dump.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return folder


def copy_fixture(name: str, dest: Path) -> Path:
    """A private copy of a committed fixture folder (tests may modify it)."""
    target = dest / name
    shutil.copytree(DATA / name, target)
    return target


def csv_pair(out: Path) -> tuple[Path, Path]:
    results = sorted(out.glob("accuracy_checking_result_*.csv"))
    details = sorted(out.glob("accuracy_checking_details_*.csv"))
    assert len(results) == 1 and len(details) == 1, sorted(out.iterdir())
    return results[0], details[0]


def read_csv(path: Path) -> list[list[str]]:
    import csv

    with open(path, encoding="utf-8-sig", newline="") as fh:
        return list(csv.reader(fh))


# Five one-input APIs; the third fails its standard (exp of float16 inputs up to 12 overflows)
FAILS_THIRD = {
    "Torch.tanh.0.forward": forward(tensor("torch.float32", [32], -1.0, 1.0)),
    "Torch.sigmoid.0.forward": forward(tensor("torch.float32", [32], -1.0, 1.0)),
    "Torch.exp.0.forward": forward(tensor("torch.float16", [64], -1.0, 12.0)),
    "Torch.sin.0.forward": forward(tensor("torch.float32", [32], -1.0, 1.0)),
    "Torch.cos.0.forward": forward(tensor("torch.float32", [32], -1.0, 1.0)),
}
