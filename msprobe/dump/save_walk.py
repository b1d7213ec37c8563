"""The nesting walk of ``PrecisionDebugger.save(variable, name)``, any framework.

``variable`` is a tensor, a scalar or a str, or a list/tuple/dict (str keys) nesting of them. The
framework passes its tensor type; this module never sees a tensor's contents.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 50
Path = tuple[int | str, ...]


def check_savable(value: Any, tensor_type: type | tuple[type, ...], depth: int = 0) -> str | None:
    """Why ``value`` cannot be saved, None when it can."""
    if depth > MAX_DEPTH:
        return f"nesting deeper than {MAX_DEPTH}"
    if isinstance(value, (tensor_type, int, float, str)):
        return None
    if isinstance(value, list | tuple):
        for v in value:
            why = check_savable(v, tensor_type, depth + 1)
            if why:
                return why
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"dict key {k!r} is not a str"
            why = check_savable(v, tensor_type, depth + 1)
            if why:
                return why
        return None
    return f"unsupported type {type(value).__name__}"


def tensor_leaves(
    value: Any, tensor_type: type | tuple[type, ...], path: Path = ()
) -> list[tuple[Path, Any]]:
    """Each tensor of the nesting with its path of list indexes and dict keys, in order."""
    if isinstance(value, tensor_type):
        return [(path, value)]
    if isinstance(value, list | tuple):
        return [x for i, v in enumerate(value) for x in tensor_leaves(v, tensor_type, (*path, i))]
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in tensor_leaves(v, tensor_type, (*path, k))]
    return []


def nulls(value: Any) -> Any:
    """The nesting with every leaf ``None`` (tuples become lists, as in JSON)."""
    if isinstance(value, list | tuple):
        return [nulls(v) for v in value]
    if isinstance(value, dict):
        return {k: nulls(v) for k, v in value.items()}
    return None


def set_at(tree: Any, path: Path, value: Any) -> Any:
    """``tree`` with the leaf at ``path`` replaced by ``value`` (in place; the root when path is empty)."""
    if not path:
        return value
    tree[path[0]] = set_at(tree[path[0]], path[1:], value)
    return tree


def save_ignored(task: str, level: str) -> str | None:
    """Why ``save()`` records nothing under this task and level (one warning line), or None."""
    if level == "debug" and task in ("statistics", "tensor"):
        return None
    return (
        f"msprobe: save() records nothing at task {task}, level {level}: it works only at level debug "
        'with task statistics or tensor (set "level": "debug"); further calls are ignored silently'
    )
