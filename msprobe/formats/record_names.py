"""Record names: the grammar of dump.json keys, construct.json and stack.json entries, tensor files and
the per-output rows of the replay CSVs, and the API prefixes. Imports no framework.

=================  ==========================================================================
API record         ``{Prefix}.{api}.{n}.{forward|backward}`` (``Functional.linear.0.forward``)
API name           the record without its direction: ``Type.api.N``, or ``Type.prefix.api.N``
                   (``Torch.linalg.inv.0``)
Module record      ``Module.{[i.]path}.{Class}.{forward|backward}.{n}`` (MindSpore: ``Cell.``)
Output row         ``{API name}.{forward|backward}.output.{k}`` (replay and compare CSVs)
Tensor file        ``{record}.{input|output|kwargs|parameters}.{index path}.pt``
=================  ==========================================================================

Each stage reads a name the way upstream 8.1.1 does, and those ways differ in details (how a
malformed name fails, whether the call index must be digits); every one of them is here, named after
its reader: the dump's scope endpoints (regexes), replay (:func:`split_direction` and the
``replay_*`` functions), precision routing (:func:`bare_name`), the fused-op table
(:func:`split_op_name`), compare (:func:`output_row_parts`) and the call-stack report
(:func:`strip_direction`). Builders are plain string joins; the dump's per-call hot paths write the
same joins inline with :data:`FORWARD`/:data:`BACKWARD`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import overload

FORWARD = "forward"
BACKWARD = "backward"
DIRECTIONS = (FORWARD, BACKWARD)
MODULE = "Module"  # PyTorch module records
CELL = "Cell"  # MindSpore cell records
OUTPUT = "output"
TENSOR_SUFFIX = ".pt"


@dataclass(frozen=True)
class ApiPrefix:
    """One API record prefix and what each stage knows about it."""

    name: str
    torch_native: bool = False  # torch's own namespaces (the rest may write into their arguments)
    scope: bool = False  # may be a scope endpoint (config ``scope``)
    replay: bool = False  # an API type of the replay name grammar
    fused: bool = False  # NPU fused operators (torch_npu, MindSpeed): replayed with CPU references


# ``scope``: upstream 8.1.1's L1 endpoint list, plus ``MindSpeed`` (recorded there but refused as an
# endpoint; accepted here). Custom prefixes (``register_custom_api``) are recorded, not listed.
API_PREFIXES: tuple[ApiPrefix, ...] = (
    ApiPrefix("Functional", torch_native=True, scope=True, replay=True),
    ApiPrefix("Tensor", torch_native=True, scope=True, replay=True),
    ApiPrefix("Torch", torch_native=True, scope=True, replay=True),
    ApiPrefix("Aten", torch_native=True, scope=True, replay=True),
    ApiPrefix("VF", torch_native=True, scope=True, replay=True),
    ApiPrefix("Distributed", scope=True, replay=True),
    ApiPrefix("NPU", scope=True, replay=True, fused=True),
    ApiPrefix("MindSpeed", scope=True, replay=True, fused=True),
    ApiPrefix("Mint", scope=True),
    ApiPrefix("MintFunctional", scope=True),
    ApiPrefix("Primitive", scope=True),
    ApiPrefix("Jit", scope=True),
    ApiPrefix("MintDistributed"),
)

NPU_PREFIX = "NPU"
MINDSPEED_PREFIX = "MindSpeed"
TORCH_PREFIXES = frozenset(p.name for p in API_PREFIXES if p.torch_native)
SCOPE_API_PREFIXES = tuple(p.name for p in API_PREFIXES if p.scope)
REPLAY_TYPES = frozenset(p.name for p in API_PREFIXES if p.replay)
FUSED_PREFIXES = frozenset(p.name for p in API_PREFIXES if p.fused)

# The name regexes (the only ones): the dump's grammar and its scope endpoints, and the suffix of an
# output row.
API_NAME_RE = re.compile(
    r"^(?P<prefix>[^.]+(?:\.[^.]+)*?)\.(?P<api>[^.]+)\.(?P<index>\d+)\.(?P<dir>forward|backward)$"
)
SCOPE_API_RE = re.compile(r"^(" + "|".join(SCOPE_API_PREFIXES) + r")\..*\.\d+\.(forward|backward)$")
SCOPE_MODULE_RE = re.compile(r"^(" + CELL + "|" + MODULE + r")\..*\.(forward|backward)\.\d+$")
OUTPUT_ROW_SUFFIX_RE = re.compile(r"\.(forward|backward)\.output\.\d+$")
OUTPUT_ROW_RE = re.compile(
    r"(?P<api>(?P<type>[^.]*)\.(?P<bare>[^.]*(?:\.[^.]*)?)\.[^.]*)\.(?P<dir>[^.]*)\.[^.]*\.[^.]*"
)
"""An output row as compare reads it (``fullmatch``): 6 or 7 segments, whatever they hold."""


# -- building ------------------------------------------------------------------------------------------
def record_api_name(dotted: str) -> str:
    """The api part of a record name: the last dotted component (``linalg.norm`` -> ``norm``)."""
    return dotted.rsplit(".", 1)[-1]


def api_record_name(prefix: str, api: str, index: int, direction: str) -> str:
    return f"{prefix}.{api}.{index}.{direction}"


def module_record_name(path: str, class_name: str, direction: str, index: int, kind: str = MODULE) -> str:
    """``Module.{path}.{Class}.{direction}.{index}``; ``kind=CELL`` for MindSpore."""
    return f"{kind}.{path}.{class_name}.{direction}.{index}"


@overload
def module_backward_name(forward_record: str) -> str: ...
@overload
def module_backward_name(forward_record: None) -> None: ...
def module_backward_name(forward_record: str | None) -> str | None:
    """``Cell.fc.Dense.forward.0`` -> ``Cell.fc.Dense.backward.0`` (None stays None)."""
    if forward_record is None:
        return None
    # the direction is the component before the index: a class or path component named "forward"
    # (type("forward", (nn.Linear,), {})) must stay as it is
    head, sep, index = forward_record.rpartition(f".{FORWARD}.")
    return f"{head}.{BACKWARD}.{index}" if sep else forward_record


def output_row_name(api_name: str, direction: str, k: int) -> str:
    """``("Functional.linear.0", "forward", 1)`` -> ``Functional.linear.0.forward.output.1``."""
    return f"{api_name}.{direction}.{OUTPUT}.{k}"


def data_file_name(record: str, side: str, path: Sequence[int | str], suffix: str = TENSOR_SUFFIX) -> str:
    """``("Torch.cat.0.forward", "input", (0, 1))`` -> ``Torch.cat.0.forward.input.0.1.pt``."""
    parts = [record, side, *map(str, path)] if side else [record, *map(str, path)]
    return file_safe(".".join(parts) + suffix)


def file_safe(name: str) -> str:
    """A tensor file name made of a record name: a ``/`` of a module's or class's name (torch and
    MindSpore accept ``add_module("a/b", ...)``) is written ``%2F``, so the file is one name inside
    ``dump_tensor_data``; the record keeps the name as it is. A ``%`` is written ``%25`` first, so
    that ``a/b`` and a module literally named ``a%2Fb`` do not share (and overwrite) one file."""
    if "/" not in name and "%" not in name:
        return name
    return name.replace("%", "%25").replace("/", "%2F")


# -- the dump's reading ----------------------------------------------------------------------------------
def parse_api_record_name(name: str) -> tuple[str, str, int, str] | None:
    """``"Functional.linear.2.forward"`` -> ``("Functional", "linear", 2, "forward")``; else None.

    ``api`` is the last segment before the index (the dump writes the last dotted component of an
    API's name), a dotted rest is the prefix.
    """
    m = API_NAME_RE.match(name)
    if not m:
        return None
    return m.group("prefix"), m.group("api"), int(m.group("index")), m.group("dir")


def is_scope_api_name(name: str) -> bool:
    return SCOPE_API_RE.match(name) is not None


def is_scope_module_name(name: str) -> bool:
    return SCOPE_MODULE_RE.match(name) is not None


# -- replay (upstream 8.1.1's reading of dump.json keys) ------------------------------------------------
def is_module_key(key: str) -> bool:
    """Replay ignores every key containing ``Module`` (anywhere, as upstream)."""
    return MODULE in key


_NOT_IN_PLACE_DUNDERS = frozenset(
    ("__init__", "__init_subclass__", "__index__", "__int__", "__invert__", "__iter__")
)


def in_place_name(api: str) -> bool:
    """The naming, in torch and MindSpore alike, of an API that writes into its first argument: a
    trailing ``_`` (``add_``) or an augmented-assignment dunder (``__iadd__``)."""
    if api.startswith("__"):
        return api.startswith("__i") and api.endswith("__") and api not in _NOT_IN_PLACE_DUNDERS
    return api.endswith("_")


def split_direction(key: str) -> tuple[str, str] | None:
    """``"Functional.linear.0.forward"`` -> ``("Functional.linear.0", "forward")``; None if malformed.

    The direction is the last segment, which must be exactly ``forward`` or ``backward`` (an API whose
    name holds one of the words, ``Functional.multi_head_attention_forward.0.backward``, is still split
    by its last segment).
    """
    name, _, last = key.rpartition(".")
    if last not in (FORWARD, BACKWARD) or not name:
        return None
    return name, last


def replay_op_name(api_type: str, bare: str) -> str:
    """The operator's own name in a bare name: its last part (``inv`` of ``linalg.inv``), but the first
    for an ``Aten`` record, whose second part is the overload (``add_`` of ``add_.Tensor``)."""
    return bare.split(".", 1)[0] if api_type == "Aten" else bare.rsplit(".", 1)[-1]


def replay_api_type(api_name: str) -> str:
    """``Functional.linear.0`` -> ``Functional`` (the first segment)."""
    return api_name.split(".")[0]


def replay_bare_name(api_name: str) -> str:
    """The middle segment(s): ``linear`` for ``Functional.linear.0``, ``linalg.inv`` for 4 segments;
    any other segment count gives the name itself."""
    parts = api_name.split(".")
    return ".".join(parts[1:-1]) if len(parts) in (3, 4) else api_name


def drop_call_index(api_name: str) -> str:
    """``Functional.linear.0`` -> ``Functional.linear`` (the last segment dropped)."""
    return api_name.rsplit(".", 1)[0]


def replay_grammar_ok(api_name: str) -> bool:
    """``Type.api.N`` or ``Type.prefix.api.N`` with a known API type."""
    parts = api_name.split(".")
    return len(parts) in (3, 4) and parts[0] in REPLAY_TYPES


# -- routing, fused ops, compare, stacks -----------------------------------------------------------------
def bare_name(api_name: str) -> str:
    """``Functional.linear.0`` -> ``linear``; ``Torch.linalg.inv.0`` -> ``linalg.inv``; a bare name stays.

    Accepts per-output names too (``Functional.linear.0.forward.output.0``): the name is cut at its first
    ``forward``/``backward`` segment after the type; a 3- or 4-segment rest ending in digits gives its
    middle, anything else is returned whole.
    """
    parts = api_name.split(".")
    for marker in DIRECTIONS:
        if marker in parts[1:]:
            parts = parts[: parts.index(marker, 1)]
            break
    if len(parts) in (3, 4) and parts[-1].isdigit():
        return ".".join(parts[1:-1])
    return api_name


def split_op_name(api_name: str) -> tuple[str | None, str]:
    """``NPU.npu_rms_norm.0.forward`` -> ``("NPU", "npu_rms_norm")``; a bare ``npu_rms_norm`` ->
    ``(None, "npu_rms_norm")``. A trailing direction, then a trailing call index, are dropped; the
    prefix is the first segment, the op the rest."""
    parts = api_name.split(".")
    if parts[-1] in DIRECTIONS:
        parts = parts[:-1]
    if len(parts) > 1 and parts[-1].isdigit():
        parts = parts[:-1]
    if len(parts) <= 1:
        return None, parts[0] if parts else ""
    return parts[0], ".".join(parts[1:])


def output_row_parts(name: str) -> tuple[str, str, str] | None:
    """``Type[.prefix].api.N.dir.output.k`` -> ``(API name, bare name, direction)``; None unless the
    name has 6 or 7 segments (compare's validity rule, as upstream 8.1.1)."""
    m = OUTPUT_ROW_RE.fullmatch(name)
    return None if m is None else (m["api"], m["bare"], m["dir"])


def output_rows_columns(
    names: Iterable[str],
) -> tuple[list[bool], list[str], list[str], list[str], list[str]]:
    """:func:`output_row_parts` of many names as columns: (valid, API name, API type, bare name,
    direction), ``""`` in the text columns of an invalid name.

    One regex match per name and no object per row besides the texts (a tuple per row would make the
    garbage collector walk them all, many times over).
    """
    valid: list[bool] = []
    api: list[str] = []
    api_type: list[str] = []
    bare: list[str] = []
    direction: list[str] = []
    for name in names:
        m = OUTPUT_ROW_RE.fullmatch(name)
        valid.append(m is not None)
        api.append(m["api"] if m else "")
        api_type.append(m["type"] if m else "")
        bare.append(m["bare"] if m else "")
        direction.append(m["dir"] if m else "")
    return valid, api, api_type, bare, direction


def output_row_index(name: str) -> int | None:
    """``Functional.linear.0.forward.output.1`` -> ``1``: the output's position; None if there is none."""
    last = name.rsplit(".", 1)[-1]
    return int(last) if last.isdigit() else None


def output_row_api(name: str) -> str:
    """``Functional.linear.0.forward.output.1`` -> ``Functional.linear.0`` (other names unchanged)."""
    return OUTPUT_ROW_SUFFIX_RE.sub("", name)


def strip_direction(record: str) -> str:
    """``Functional.conv2d.0.forward`` -> ``Functional.conv2d.0`` (a name without the suffix stays)."""
    for direction in DIRECTIONS:
        if record.endswith("." + direction):
            return record[: -len(direction) - 1]
    return record
