"""``import msprobe.mindspore`` never imports torch; ``import msprobe.pytorch`` never imports mindspore.

Each half runs where its framework is installed (this file is collected in both venvs).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest


def _loaded_after(import_line: str, module: str) -> bool:
    code = f"import sys; {import_line}; print({module!r} in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1] == "True"


def _installed(module: str) -> bool:
    spec = importlib.util.find_spec(module)  # a namespace match (this folder) is not an installation
    return spec is not None and spec.origin is not None


@pytest.mark.skipif(not _installed("mindspore"), reason="needs mindspore")
def test_mindspore_front_door_does_not_import_torch():
    assert not _loaded_after("import msprobe.mindspore", "torch")
    assert _loaded_after("import msprobe.mindspore", "mindspore")


@pytest.mark.skipif(not _installed("torch"), reason="needs torch")
def test_pytorch_front_door_does_not_import_mindspore():
    assert not _loaded_after("import msprobe.pytorch", "mindspore")
    assert _loaded_after("import msprobe.pytorch", "torch")


def test_core_imports_neither_framework():
    code = "import msprobe.dump.config, msprobe.dump.session, msprobe.dump.writer, msprobe.dump.frontdoor"
    code += ", msprobe.dump.save_walk"
    assert not _loaded_after(code, "torch")
    assert not _loaded_after(code, "mindspore")
