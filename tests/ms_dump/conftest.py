"""MindSpore tests: collected only where mindspore imports (the main suite runs in a torch venv).

``test_ms_isolation.py`` is the exception: its torch half runs in the torch venv as well.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator

import pytest


def installed(module: str) -> bool:
    """A real installed package (this folder itself looks like a namespace package "mindspore" when
    ``tests/`` is on sys.path, which pytest does for the packages under tests/)."""
    spec = importlib.util.find_spec(module)
    return spec is not None and spec.origin is not None


HAVE_MINDSPORE = installed("mindspore")
collect_ignore_glob = [] if HAVE_MINDSPORE else ["test_ms_[!i]*.py"]

sys.path.insert(0, os.path.dirname(__file__))  # fixture_compare, nets

if HAVE_MINDSPORE:

    @pytest.fixture(autouse=True)
    def _fresh_debugger() -> Iterator[None]:
        """One PrecisionDebugger per test (the class is a process-wide singleton)."""
        import mindspore as ms

        from msprobe.dump.mindspore.debugger import PrecisionDebugger

        ms.set_context(mode=ms.PYNATIVE_MODE)
        PrecisionDebugger._shutdown()
        yield
        PrecisionDebugger._shutdown()
        ms.set_context(mode=ms.PYNATIVE_MODE)
