"""Training real transformers models with the dump on leaves every tensor bitwise as without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import zoo
from tests.dump.conftest import load_dump

zoo.require_transformers()


@pytest.mark.slow
@pytest.mark.parametrize("model", ["llama", "bert", "t5", "mixtral"])
@pytest.mark.parametrize("level", ["L1", "L0", "mix"])
def test_training_with_the_dump_is_bitwise_unchanged(
    tmp_path: Path, debugger: Any, model: str, level: str
) -> None:
    reference = zoo.train(model)
    dumped = zoo.train(model, debugger=debugger(level=level))
    assert zoo.differences(reference, dumped) == []
    data = load_dump(tmp_path / "dump" / "step1" / "rank")["data"]
    assert any(name.startswith("Module.") for name in data) == (level != "L1")
    assert any(name.startswith("Functional.") for name in data) == (level != "L0")
