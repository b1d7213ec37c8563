"""``seed_all(seed=1234, mode=False, rm_dropout=True)`` with upstream 8.1.1's effects."""

from __future__ import annotations

import functools
import logging
import os
import random
from typing import Any

import numpy as np
import torch

from msprobe.dump.exceptions import MsprobeException

log = logging.getLogger("msprobe")
_INVALID = MsprobeException.INVALID_PARAM_ERROR


def _zero_p(orig: Any) -> Any:
    @functools.wraps(orig)
    def no_dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        return orig(input, 0.0, training, inplace)

    no_dropout._msprobe_original = orig  # type: ignore[attr-defined]
    return no_dropout


def remove_dropout() -> None:
    """Make ``F.dropout``/``dropout2d``/``dropout3d`` use ``p=0`` (so ``nn.Dropout*`` become no-ops)."""
    import torch.nn.functional as F

    for name in ("dropout", "dropout2d", "dropout3d"):
        current = getattr(F, name)
        if getattr(current, "_msprobe_original", None) is None:
            setattr(F, name, _zero_p(current))


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = True) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise MsprobeException(_INVALID, f"seed_all: Seed must be integer, got {seed!r}.")
    if not 0 <= seed <= 4294967295:
        raise MsprobeException(_INVALID, f"seed_all: Seed must be between 0 and 4294967295, got {seed}.")
    if not isinstance(mode, bool):
        raise MsprobeException(_INVALID, f"seed_all: seed_all mode must be bool, got {mode!r}.")
    if not isinstance(rm_dropout, bool):
        raise MsprobeException(_INVALID, f"seed_all: rm_dropout must be bool, got {rm_dropout!r}.")
    try:
        random.seed(seed)
        os.environ["PYTHONHASHSEED"] = str(seed)
        np.random.seed(seed % (2**32))
        torch.manual_seed(seed)
        cuda_version = getattr(torch.version, "cuda", None)
        if cuda_version:
            major, minor = (int(x) for x in cuda_version.split(".")[:2])
            if (major, minor) >= (10, 2):
                os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        os.environ["HCCL_DETERMINISTIC"] = str(mode)
        torch.use_deterministic_algorithms(mode)
        if torch.cuda.is_available():
            torch.cuda.manual_seed(seed)
            torch.cuda.manual_seed_all(seed)
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
            torch.backends.cudnn.enabled = False
        npu = getattr(torch, "npu", None)
        if npu is not None and hasattr(npu, "manual_seed"):
            npu.manual_seed(seed)
            npu.manual_seed_all(seed)
        if rm_dropout:
            remove_dropout()
    except Exception as exc:  # upstream logs, never raises, once the arguments are valid
        log.error("msprobe: seed_all failed: %s", exc)
