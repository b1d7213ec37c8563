"""Shared helpers of the dump tests: a fresh PrecisionDebugger per test, dump readers."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "dump"


def write_config(path: Path, **fields: Any) -> str:
    cfg: dict[str, Any] = {
        "task": "statistics",
        "dump_path": str(path / "dump"),
        "rank": [],
        "step": [],
        "level": "L1",
    }
    sections = {k: fields.pop(k) for k in ("statistics", "tensor") if k in fields}
    cfg.update(fields)
    cfg.update(sections)
    p = path / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


@pytest.fixture
def debugger(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``make(**config_fields)`` -> a fresh PrecisionDebugger dumping under ``tmp_path/dump``."""
    from msprobe.pytorch import PrecisionDebugger

    PrecisionDebugger._shutdown()

    def make(**fields: Any) -> Any:
        return PrecisionDebugger(config_path=write_config(tmp_path, **fields))

    yield make
    PrecisionDebugger._shutdown()


def load_dump(rank_dir: str | os.PathLike[str]) -> dict[str, Any]:
    with open(os.path.join(rank_dir, "dump.json"), encoding="utf-8") as fh:
        return json.load(fh)
