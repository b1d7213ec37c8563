"""Which calls may write into their arguments, for the summary cache.

The cache (:class:`~msprobe.dump.pytorch.stats.SummaryCache`) trusts a tensor's version counter,
which every in-place op bumps, but only the written tensor's own: a ``.data`` alias of it has another.
So after a call that writes (:func:`call_mutates`) the service forgets what is cached on the memory of
the tensors it wrote (:func:`written_tensors`), or, when that is unsure, of every argument: some calls
write without bumping any counter (``batch_norm``'s running statistics, ``embedding``'s ``max_norm``
renormalisation, families outside torch's own namespaces: ``Distributed.*``, ``NPU.*``, custom APIs).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from msprobe.dump.api_families import WRITES_UNNAMED, WRITES_UNNAMED_EXACT

# Torch families write only when the predicate says so; every other prefix may always.
from msprobe.formats.record_names import TORCH_PREFIXES, in_place_name

IMPLICIT_MUTATORS = tuple(WRITES_UNNAMED)  # the table's facts, with their reasons
IMPLICIT_EXACT = frozenset(WRITES_UNNAMED_EXACT)
_MAX_NORM_AT = 3  # F.embedding(input, weight, padding_idx, max_norm, ...)


def name_mutates(name: str) -> bool:
    """Whether an API of this name may write into its arguments (or, for backward, into ``.grad``)."""
    if name.startswith("__"):
        return in_place_name(name) or name == "__setitem__"
    return in_place_name(name) or name in IMPLICIT_EXACT or any(m in name for m in IMPLICIT_MUTATORS)


def kwargs_mutate(kwargs: dict[str, Any]) -> bool:
    return bool(kwargs) and (kwargs.get("out") is not None or kwargs.get("inplace") is True)


def _embedding_renorms(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``embedding`` writes its weight only to renormalise rows (``max_norm`` given)."""
    if kwargs and kwargs.get("max_norm") is not None:
        return True
    return len(args) > _MAX_NORM_AT and args[_MAX_NORM_AT] is not None


# APIs whose name says they may write, but whose arguments say whether this call does
_WRITES_IF = {"embedding": _embedding_renorms}


@functools.cache  # asked at every recorded call, of a bounded set of names
def mutates_by_name(api: str) -> bool:
    """Whether every call of this torch API may write (the name alone decides)."""
    return api not in _WRITES_IF and name_mutates(api)


def mutates_by_args(api: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether this call writes because of its arguments (``out=``, ``inplace=True``, ``max_norm``)."""
    if kwargs_mutate(kwargs):
        return True
    check = _WRITES_IF.get(api)
    return check is not None and check(args, kwargs)


def call_mutates(prefix: str, api: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if prefix not in TORCH_PREFIXES:
        return True
    return mutates_by_name(api) or mutates_by_args(api, args, kwargs)


def written_tensors(prefix: str, api: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any] | None:
    """The tensors a mutating call writes when that is certain (``self`` of an in-place Tensor method,
    ``out=`` of a torch function); None when it is not."""
    if prefix not in TORCH_PREFIXES or api in IMPLICIT_EXACT or any(m in api for m in IMPLICIT_MUTATORS):
        return None
    out = kwargs.get("out") if kwargs else None
    if out is not None:
        if kwargs.get("inplace") is True or (prefix == "Tensor" and name_mutates(api)):
            return None
        outs = list(out) if isinstance(out, list | tuple) else [out]
        return outs if all(isinstance(t, torch.Tensor) for t in outs) else None
    if prefix == "Tensor" and name_mutates(api) and args and isinstance(args[0], torch.Tensor):
        return [args[0]]
    return None
