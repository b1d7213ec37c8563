"""Record names of dump.json (spec §4) and the per-step call counters.

API records:    ``{Prefix}.{api}.{n}.{forward|backward}``
Module records: ``Module.{[i.]path}.{Class}.{forward|backward}.{n}``
Tensor files:   ``{record}.{input|output|kwargs|parameters}.{index path}.pt``
"""

from __future__ import annotations

import re
from collections.abc import Sequence

FORWARD = "forward"
BACKWARD = "backward"

# Prefixes that upstream 8.1.1 accepts as L1 scope endpoints (spec §2.2). ``MindSpeed`` and custom
# prefixes are recorded but cannot be scope endpoints there; we accept them too (documented).
SCOPE_API_PREFIXES = (
    "Distributed",
    "Functional",
    "Torch",
    "Tensor",
    "Mint",
    "MintFunctional",
    "Primitive",
    "Aten",
    "VF",
    "NPU",
    "Jit",
    "MindSpeed",
)

API_NAME_RE = re.compile(
    r"^(?P<prefix>[^.]+(?:\.[^.]+)*?)\.(?P<api>[^.]+)\.(?P<index>\d+)\.(?P<dir>forward|backward)$"
)
SCOPE_API_RE = re.compile(r"^(" + "|".join(SCOPE_API_PREFIXES) + r")\..*\.\d+\.(forward|backward)$")
SCOPE_MODULE_RE = re.compile(r"^(Cell|Module)\..*\.(forward|backward)\.\d+$")


def api_record_name(prefix: str, api: str, index: int, direction: str) -> str:
    return f"{prefix}.{api}.{index}.{direction}"


def module_record_name(path: str, class_name: str, direction: str, index: int) -> str:
    return f"Module.{path}.{class_name}.{direction}.{index}"


def parse_api_record_name(name: str) -> tuple[str, str, int, str] | None:
    """``"Functional.linear.2.forward"`` -> ``("Functional", "linear", 2, "forward")``; else None."""
    m = API_NAME_RE.match(name)
    if not m:
        return None
    return m.group("prefix"), m.group("api"), int(m.group("index")), m.group("dir")


def data_file_name(record: str, side: str, path: Sequence[int | str]) -> str:
    """``("Torch.cat.0.forward", "input", (0, 1))`` -> ``Torch.cat.0.forward.input.0.1.pt``."""
    parts = [record, side, *map(str, path)] if side else [record, *map(str, path)]
    return ".".join(parts) + ".pt"


class CallCounter:
    """Per-step counters: one per ``{Prefix}.{api}`` (or module prefix), starting at 0."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def next(self, key: str) -> int:
        n = self._counts.get(key, 0)
        self._counts[key] = n + 1
        return n

    def reset(self) -> None:
        self._counts.clear()
