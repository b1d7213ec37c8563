"""Output structure → rows: dropout rule, list/tuple truncation, per-element type rules."""

from __future__ import annotations

import math
from typing import Any

from msprobe.run_ut import registry
from msprobe.run_ut.standards import messages as msg
from msprobe.run_ut.standards import metrics as m
from msprobe.run_ut.standards import rows
from msprobe.run_ut.standards.routing import Scoring
from msprobe.run_ut.standards.tensor import compare_tensor

DROPOUT_MIN_NUMEL = 100  # below this the dropout check passes
DROPOUT_MAX_GAP = 0.1  # pass iff |#zeros(b) − #zeros(d)| / numel < 0.1

_BUILTINS = (bool, int, float, str)


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def compare_structure(
    api_name: str, direction: str, bench: Any, device: Any, scoring: Scoring
) -> list[rows.DetailsRow]:
    prefix = f"{api_name}.{direction}.output"
    if registry.zero_fraction_checked(api_name):
        return [_dropout(api_name, f"{prefix}.0", bench, device)]
    if isinstance(bench, (list, tuple)):
        if not isinstance(device, (list, tuple)):
            return [_error(f"{prefix}.0", msg.TYPE_DIFFERENT)]
        if len(bench) > len(device):
            return [_error(f"{prefix}.0", msg.STRUCTURE_DIFFERENT)]
        return [
            compare_element(api_name, f"{prefix}.{i}", b, d, scoring)
            for i, (b, d) in enumerate(zip(bench, device))
        ]
    return [compare_element(api_name, f"{prefix}.0", bench, device, scoring)]


def _error(name: str, message: str) -> rows.DetailsRow:
    return rows.DetailsRow(name=name, status=rows.ERROR, message=message, reason=f"{name}: {message}")


def compare_element(api_name: str, name: str, bench: Any, device: Any, scoring: Scoring) -> rows.DetailsRow:
    """One element of the output structure (in upstream's order)."""
    both_tensors = _is_tensor(bench) and _is_tensor(device)
    if not both_tensors and type(bench) is not type(device):
        return _error(name, msg.TYPE_DIFFERENT)
    if isinstance(bench, dict):
        if set(bench) != set(device):
            return _error(name, msg.DICT_KEYS_DIFFERENT)
        # upstream compares the values as one list, which is not an accepted element
        return _error(name, msg.unexpected_type(list(bench.values())))
    if both_tensors:
        return compare_tensor(name, bench, device, scoring)
    if isinstance(bench, _BUILTINS):
        dtype = str(type(bench))
        same = bench == device or (
            isinstance(bench, float) and math.isnan(bench) and math.isnan(device)  # ours: NaN == NaN
        )
        if same:
            return rows.DetailsRow(
                name=name,
                status=rows.PASS,
                bench_dtype=dtype,
                device_dtype=dtype,
                metrics={rows.BINARY_ERR_RATE: 0},
            )
        return rows.DetailsRow(
            name=name,
            status=rows.ERROR,
            bench_dtype=dtype,
            device_dtype=dtype,
            reason=f"{name}: bench value {bench!r} != device value {device!r}",
        )
    if bench is None:
        return rows.DetailsRow(name=name, status=rows.SKIP, message=msg.BENCH_NONE)
    return _error(name, msg.unexpected_type(bench))


def _dropout(api_name: str, name: str, bench: Any, device: Any) -> rows.DetailsRow:
    """Zero-fraction check, never written to the details CSV; backward: grad[0] only."""
    if isinstance(bench, (list, tuple)):
        bench = bench[0] if bench else None
    if isinstance(device, (list, tuple)):
        device = device[0] if device else None
    if not (_is_tensor(bench) and _is_tensor(device)):
        return rows.DetailsRow(name=name, status=rows.SKIP, message=msg.BENCH_NONE, written=False)
    numel = bench.numel()
    if numel < DROPOUT_MIN_NUMEL:
        return rows.DetailsRow(name=name, status=rows.PASS, written=False)
    b = bench.detach().cpu().float().numpy()
    d = device.detach().cpu().float().numpy()
    gap = m.dropout_zero_fraction_gap(b, d)
    if gap < DROPOUT_MAX_GAP:
        return rows.DetailsRow(name=name, status=rows.PASS, written=False)
    reason = f"{name}: dropout zero-fraction gap {gap:.6g} >= {DROPOUT_MAX_GAP:g}"
    return rows.DetailsRow(name=name, status=rows.ERROR, reason=reason, written=False)
