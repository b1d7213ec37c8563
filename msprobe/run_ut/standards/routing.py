"""API name -> precision standard, read from the API table (upstream 8.1.1 routing).

Each entry of :mod:`msprobe.run_ut.api_table` carries its ``standard``; upstream's lists (absolute
threshold, binary, ULP, thousandth, accumulative, checked in that order, first match wins; no match:
benchmark) are the ``standard`` fields of the type-free entries. Lookup is by API type and *bare*
name (the middle segment(s) of ``Type.api.N`` / ``Type.prefix.api.N``); 4-segment names look up
``prefix.api`` and so never match a list, exactly as upstream.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from msprobe.formats import record_names
from msprobe.run_ut import registry
from msprobe.run_ut.api_info import ApiInfo, Standard

__all__ = [
    "DEFAULT_ROUTING",
    "POLICIES",
    "ROUTING",
    "Scoring",
    "Standard",
    "bare_name",
    "scoring_for",
    "standard_for",
]

ROUTING: MappingProxyType[str, Standard] = MappingProxyType(
    {
        name: info.standard
        for (t, name), info in registry.INDEX.items()
        if t is None and info.standard is not Standard.BENCHMARK
    }
)
"""bare API name -> standard of every type-free entry routed off benchmark (a view of the table)."""


def bare_name(api_name: str) -> str:
    """``Functional.linear.0`` → ``linear``; ``Torch.linalg.inv.0`` → ``linalg.inv``; a bare name stays.

    Accepts per-output names too (``Functional.linear.0.forward.output.0``).
    """
    return record_names.bare_name(api_name)


def _api_type(api_name: str) -> str | None:
    """``Torch`` for a full or per-output name, None for a bare name (which only type-free entries match)."""
    return record_names.replay_api_type(api_name) if bare_name(api_name) != api_name else None


def _by_table(info: ApiInfo) -> Standard:
    return info.standard


def _all_benchmark(info: ApiInfo) -> Standard:
    return Standard.BENCHMARK


POLICIES: MappingProxyType[str, Callable[[ApiInfo], Standard]] = MappingProxyType(
    {
        "8.1.1": _by_table,  # normative: the entry's standard
        # 26.x: every fp16/bf16/fp32/fp64 output -> benchmark. Its fp8 steps do not apply: 8.1.1 (and so
        # this replay) cannot compare fp8 outputs.
        "26.x": _all_benchmark,
    }
)
DEFAULT_ROUTING = "8.1.1"


def standard_for(api_name: str, routing: str = DEFAULT_ROUTING, info: ApiInfo | None = None) -> Standard:
    """The standard of an API's float outputs: its table entry's (``info`` when given, else the
    :func:`registry.lookup` of the name), benchmark for an API without one (8.1.1);
    ``routing="26.x"`` is 26.x's "every float output -> benchmark" (documented option).

    ``api_name`` may be full (``Tensor.__add__.0``), per-output or bare (``__add__``). Only meaningful
    for fp16/bf16/fp32 outputs; integer/bool outputs never reach routing on the run_ut side.
    """
    return scoring_for(api_name, routing, info).standard


@dataclass(frozen=True)
class Scoring:
    """How one API's float outputs are scored: the standard, and the API's changes to its numbers."""

    standard: Standard
    tolerances: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


def scoring_for(api_name: str, routing: str = DEFAULT_ROUTING, info: ApiInfo | None = None) -> Scoring:
    """:func:`standard_for` plus the entry's ``tolerances`` (only when its own standard scores it)."""
    try:
        policy = POLICIES[routing]
    except KeyError:
        raise ValueError(f"unknown routing {routing!r}; choose one of {sorted(POLICIES)}") from None
    if info is None:
        info = registry.lookup(_api_type(api_name), bare_name(api_name))
    standard = policy(info)
    return Scoring(standard, info.tolerances if standard is info.standard else {})
