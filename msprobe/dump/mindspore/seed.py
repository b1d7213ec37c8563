"""``seed_all(seed, mode, rm_dropout)`` for MindSpore."""

from __future__ import annotations

import inspect
import logging
import os
import random
from typing import Any

import mindspore as ms

from msprobe.dump.exceptions import MsprobeException

log = logging.getLogger("msprobe")
_INVALID = MsprobeException.INVALID_PARAM_ERROR
_MARK = "__msprobe_no_dropout__"


def _fail(msg: str) -> MsprobeException:
    log.error(msg)
    return MsprobeException(_INVALID, msg)


def _keep_all_dropout(base: Any, arg: str, value: float) -> type:
    """A subclass of a dropout Primitive/Cell whose ``arg`` (keep_prob or p) is forced to ``value``."""
    signature = inspect.signature(base.__init__)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments[arg] = value
        base.__init__(*bound.args, **bound.kwargs)

    return type(base.__name__, (base,), {"__init__": __init__, "__module__": base.__module__, _MARK: True})


def remove_dropout() -> None:
    """Dropout created from now on keeps every element (upstream's ``rm_dropout``)."""
    from mindspore import mint, ops
    from mindspore.ops import operations as P

    for name in ("Dropout", "Dropout2D", "Dropout3D"):
        for owner in (ops, P):
            base = getattr(owner, name, None)
            if isinstance(base, type) and not getattr(base, _MARK, False):
                setattr(owner, name, _keep_all_dropout(base, "keep_prob", 1.0))
    base = getattr(mint.nn, "Dropout", None)
    if isinstance(base, type) and not getattr(base, _MARK, False):
        mint.nn.Dropout = _keep_all_dropout(base, "p", 0.0)

    def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        return input

    mint.nn.functional.dropout = dropout


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = True) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise _fail(f"seed_all: Seed must be integer, got {seed!r}.")
    if not 0 <= seed <= 4294967295:
        raise _fail(f"seed_all: Seed must be between 0 and 4294967295, got {seed}.")
    if not isinstance(mode, bool):
        raise _fail(f"seed_all: seed_all mode must be bool, got {mode!r}.")
    if not isinstance(rm_dropout, bool):
        raise _fail(f"seed_all: rm_dropout must be bool, got {rm_dropout!r}.")
    os.environ["PYTHONHASHSEED"] = str(seed)
    ms.set_seed(seed)
    random.seed(seed)
    try:
        ms.set_context(deterministic="ON" if mode else "OFF")
    except Exception as exc:  # pragma: no cover - backend without the option
        log.warning("msprobe: seed_all could not set deterministic mode: %s", exc)
    os.environ["HCCL_DETERMINISTIC"] = str(mode)
    if rm_dropout:
        remove_dropout()
