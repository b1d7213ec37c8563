"""The precision fault ``msprobe demo`` plants in its simulated faulty device, as a replay plugin.

``msprobe demo`` replays one dump twice on the CPU: once as the reference device, once with
``-p msprobe.demo_fault``. This plugin answers the replay's ``pytest_msprobe_device_function`` hook
for one API, :data:`PLANTED_API`: its device side runs :func:`bf16_sum_softmax` instead of
``torch.nn.functional.softmax``. The CPU benchmark and every other API are untouched, so the compare
must flag exactly that API. Nothing in the replay knows about this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PLANTED_API = "Functional.softmax"
PLANTED = (
    f"{PLANTED_API} on the faulty device sums its exponentials in bfloat16 "
    "(a softmax kernel with a low-precision accumulator)"
)


def bf16_sum_softmax(function: Callable[..., Any]) -> Callable[..., Any]:
    """``softmax`` as a kernel with a bfloat16 accumulator would compute it: the exponentials and their
    sum rounded to bfloat16, then divided in the input's dtype (its gradient follows from autograd)."""
    import torch

    def softmax(input: Any, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Any:
        if dim is None:  # the implicit-dim legacy form: not the planted kernel
            return function(input, dim, _stacklevel, dtype)
        x = input if dtype is None else input.to(dtype)
        exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
        total = exps.to(torch.bfloat16).sum(dim=dim, keepdim=True, dtype=torch.bfloat16)
        return exps / total.to(exps.dtype)

    return softmax


def pytest_msprobe_device_function(api_type: str, bare_name: str, function: Any) -> Any:
    """The replay hook: the faulty kernel for :data:`PLANTED_API`, ``None`` (unchanged) for the rest."""
    if f"{api_type}.{bare_name}" == PLANTED_API:
        return bf16_sum_softmax(function)
    return None
