"""The module and save paths record through the narrow Recorder protocol, never through the service."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from msprobe.dump.pytorch import debug_save, module_backward, modules, parents
from msprobe.dump.pytorch.recorder import Recorder

_PATHS = (modules, module_backward, debug_save, parents)


def test_the_service_is_a_recorder(debugger: Any) -> None:
    svc = debugger().service
    assert isinstance(svc, Recorder)
    assert svc.modules.rec is svc and svc.saver.rec is svc
    was = svc.enter()
    assert svc.idle() and was is False
    svc.leave(was)
    assert svc.idle()  # not running: nothing to record either


@pytest.mark.parametrize("module", _PATHS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_paths_use_only_the_protocol(module: Any) -> None:
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    reached = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} & {"session", "_inside", "svc"}
    imported = {
        n.module
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module and "service" in n.module
    }
    assert reached == set() and imported == set()
