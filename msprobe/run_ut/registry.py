"""Looking APIs up in the table: (API type, bare name) -> :class:`ApiInfo`, and the function to run.

Generic code (inputs, execution, scoring, compare) never tests an API name; it asks :func:`lookup`.
Order: the exact ``(type, name)`` key (names and aliases of the entries declared for that type) ->
the type-free entries (names and aliases) -> the family default of the API type (:data:`API_TYPES`).
No prefix or substring matching. Imports no torch.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from msprobe.formats.record_names import record_api_name, replay_op_name
from msprobe.run_ut.api_info import (
    NO_BACKWARD_DATA,
    NO_BACKWARD_UT,
    ApiInfo,
    Skip,
    Standard,
    loaded,
)
from msprobe.run_ut.api_table import ENTRIES, MINDSPEED, NPU, PLAIN, RANDOM_REASON, ZERO_FRACTION_MARKER

__all__ = [
    "API_TYPES",
    "INDEX",
    "NOT_SUPPORTED",
    "NO_BACKWARD_DATA",
    "NO_BACKWARD_UT",
    "RANDOM_REASON",
    "ApiInfo",
    "ApiType",
    "Skip",
    "Standard",
    "build_index",
    "find",
    "lookup",
    "missing_reason",
    "resolve",
    "unsupported_reason",
    "zero_fraction_checked",
]

NOT_SUPPORTED = "API {name} not support for run ut. SKIP."
NO_FUNCTION = "'NoneType' object is not callable: no function for {api} in this build"
NO_REFERENCE = "no CPU reference for {api_type}.{bare}"
NOT_RECORDED = (
    "{api}: not an API a dump records (in no API list of support_wrap_ops.yaml, and no tensor operation "
    "of {namespace}): a dump.json naming it is not replayed"
)


def _attr_path(root: Any, dotted: str) -> Any:
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _namespace(module: str) -> Callable[[str], Any]:
    return lambda bare: _attr_path(importlib.import_module(module), bare)


def _tensor_method(bare: str) -> Any:
    import torch

    return getattr(torch.Tensor, bare, None)


def _aten(bare: str) -> Any:
    import torch

    return _attr_path(torch.ops.aten, bare)


@dataclass(frozen=True)
class ApiType:
    """An API type (first name segment): where its functions live and what an unknown API gets."""

    find: Callable[[str], Any] | None  # bare name -> framework function; None: only table references
    default: ApiInfo = PLAIN  # the family default of an API of this type without an entry
    replayable: bool = True  # False: every API of the type is 8.1.1's "not support" SKIP
    missing: str = NO_FUNCTION  # SKIP reason when no function is found ({api}, {api_type}, {bare})
    family: str | None = None  # the dump's API family (support_wrap_ops.yaml section) of the type
    namespace: str = ""  # where the dump finds the family's functions
    # the dump family whose real kernels an NPU device runs: the table's CPU references stand in for
    # them on CPU and CUDA only (on both sides of an NPU replay a faulty kernel could never fail)
    kernels: str | None = None


@functools.cache
def _dump_lists() -> dict[str, frozenset[str]]:
    """Each family's API names as records name them: its API list, and the names the dump leaves out
    by choice (upstream's dumps may hold them: ``Tensor.__getitem__``), read once."""
    from msprobe.dump.api_families import DENY_KEY, load_api_list

    lists = load_api_list()
    names = {key: {record_api_name(n) for n in listed} for key, listed in lists.items()}
    for entry in lists.get(DENY_KEY, []):
        key, _, name = entry.partition(".")
        names.setdefault(key, set()).add(record_api_name(name))
    return {key: frozenset(listed) for key, listed in names.items()}


API_TYPES: Mapping[str, ApiType] = MappingProxyType(
    {
        "Functional": ApiType(
            _namespace("torch.nn.functional"), family="functional", namespace="torch.nn.functional"
        ),
        "Torch": ApiType(_namespace("torch"), family="torch", namespace="torch"),
        "Tensor": ApiType(_tensor_method, family="tensor", namespace="torch.Tensor"),
        "VF": ApiType(_namespace("torch._VF"), family="_VF", namespace="torch._VF"),
        "Aten": ApiType(_aten),
        "Distributed": ApiType(None, replayable=False),
        "NPU": ApiType(None, NPU, missing=NO_REFERENCE, kernels="torch_npu"),
        "MindSpeed": ApiType(None, MINDSPEED, missing=NO_REFERENCE, kernels="mindspeed"),
    }
)


def build_index(entries: Iterable[ApiInfo]) -> Mapping[tuple[str | None, str], ApiInfo]:
    """``(type or None, name or alias) -> entry``; a key given twice is an error naming both entries."""
    index: dict[tuple[str | None, str], ApiInfo] = {}
    for info in entries:
        for api_type in info.types or (None,):
            for name in info.names:
                key = (api_type, name)
                if key in index:
                    raise ValueError(f"API table: {key} is in two entries ({index[key].name}, {info.name})")
                index[key] = info
    return MappingProxyType(index)


INDEX = build_index(ENTRIES)
"""Every key of the table: ``(API type, name)`` for typed entries, ``(None, name)`` for type-free ones."""


def find(api_type: str | None, bare: str) -> ApiInfo | None:
    """The table's entry for an API, or None when only a family default applies."""
    return INDEX.get((api_type, bare)) or INDEX.get((None, bare))


def lookup(api_type: str | None, bare: str) -> ApiInfo:
    """The entry for an API: exact key, type-free key, else the family default of its type."""
    found = find(api_type, bare)
    if found is not None:
        return found
    kind = API_TYPES.get(api_type or "")
    return (kind.default if kind is not None else PLAIN).variant(bare)


def resolve(api_type: str, bare: str, info: ApiInfo) -> Callable[..., Any] | None:
    """The function to call for an API, or None when this build cannot run it."""
    if info.reference is not None:
        return loaded(info.reference)
    kind = API_TYPES.get(api_type)
    if kind is None or kind.find is None:
        return None
    func = kind.find(bare)
    return func if callable(func) else None


def npu_kernel(api_type: str, bare: str) -> Callable[..., Any] | str | None:
    """What an NPU device runs for an API whose entry has a CPU reference: the fused op's own kernel
    (torch_npu's, MindSpeed's), found as the dump finds it; a string, the SKIP reason, when this host
    lacks it; None when the API's type has no kernels (its function runs on every device)."""
    kind = API_TYPES.get(api_type)
    if kind is None or kind.kernels is None:
        return None
    from msprobe.dump.pytorch.capture import family_function

    func = family_function(kind.kernels, bare)
    if func is None:
        return f"no {kind.kernels} kernel {bare} on this host: the NPU device side has nothing to run"
    return func


def recordable(api_type: str, bare: str, func: Any) -> bool:
    """Whether a dump could have recorded ``func`` (found for ``bare``) as this API: the table has an
    entry for it, it is in the family's API list (or one the dump leaves out by choice), or it is a
    public function of its namespace that torch hands to ``__torch_function__`` (or, in
    ``torch.nn.functional``, a Python function of that module). What no dump records (``torch.load``,
    ``torch.save``, ``torch.set_default_dtype``, ``torch.hub...``) is never called for a dump.json
    that names it."""
    kind = API_TYPES.get(api_type)
    if kind is None or kind.family is None:
        return kind is not None and replay_op_name(api_type, bare) not in _UNSAFE_KERNELS
    if find(api_type, bare) is not None or bare in _dump_lists().get(kind.family, ()):
        return True
    if bare.startswith("_") or "." in bare:  # the dump discovers public names only
        return False
    import torch

    owner: Any = importlib.import_module(kind.namespace) if kind.namespace != "torch.Tensor" else torch.Tensor
    try:
        if func in torch.overrides.get_overridable_functions().get(owner, ()):
            return True
    except TypeError:  # unhashable: no function
        return False
    return kind.family == "functional" and getattr(func, "__module__", None) == kind.namespace


_UNSAFE_KERNELS = frozenset({"from_file"})
"""Aten kernels that read a file named by an argument (no dump records an Aten call of its own)."""


def not_recorded_reason(api: str, api_type: str) -> str:
    """The SKIP reason of an API :func:`recordable` refuses."""
    kind = API_TYPES.get(api_type)
    return NOT_RECORDED.format(api=api, namespace=kind.namespace if kind is not None else api_type)


def missing_reason(api: str, api_type: str, bare: str) -> str:
    """The SKIP reason of an API :func:`resolve` found no function for."""
    kind = API_TYPES.get(api_type)
    template = kind.missing if kind is not None else NO_FUNCTION
    return template.format(api=api, api_type=api_type, bare=bare)


def unsupported_reason(full_name: str, api_type: str, grammar_ok: bool) -> str | None:
    """The 8.1.1 "not support" SKIP for names outside the grammar or types with no replay."""
    kind = API_TYPES.get(api_type)
    if not grammar_ok or kind is None or not kind.replayable:
        return NOT_SUPPORTED.format(name=full_name)
    return None


def zero_fraction_checked(api_name: str) -> bool:
    """Whether the outputs of an API (full name) get the dropout zero-fraction check (upstream's rule
    on the name, :data:`api_table.ZERO_FRACTION_MARKER`)."""
    return ZERO_FRACTION_MARKER in api_name
