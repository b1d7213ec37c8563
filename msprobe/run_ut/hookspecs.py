"""msprobe's own pytest hooks (added with ``pytest_addhooks``): seams a ``conftest.py`` may implement."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec(firstresult=True)
def pytest_msprobe_api_info(api_type: str, bare_name: str) -> Any:
    """Return a ``msprobe.run_ut.api_info.ApiInfo`` for an API the built-in table does not know (or
    knows differently); ``None`` keeps the built-in entry. One answer is the whole API: e.g.
    ``ApiInfo("my_op", reference=my_cpu_reference, standard=Standard.ABSOLUTE_THRESHOLD,
    tolerances={"torch.float32": {"rtol": 1e-3}})`` replays a custom op with its CPU reference and
    scores it by the absolute-threshold standard with its own fp32 relative tolerance. ``api_type``
    is the first name segment (``Torch``, ``NPU``), ``bare_name`` the middle one(s) (``linear``,
    ``linalg.inv``). Called once per API item, in the process that replays it. ``msprobe compare``
    routes by the built-in table; a row both replays scored by another standard (an answer that
    changes it) is judged by that standard, with a note saying so.
    """


@pytest.hookspec(firstresult=True)
def pytest_msprobe_device_function(api_type: str, bare_name: str, function: Any) -> Any:
    """Return the callable the device side runs for this API instead of ``function`` (the one the CPU
    benchmark runs), e.g. your own kernel to check against the benchmark, or a deliberately faulty one
    (``msprobe demo`` plants its fault this way); ``None`` runs ``function`` on both sides. Called once
    per API item, in the process that replays it, only for APIs that are replayed.
    """
