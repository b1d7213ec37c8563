"""Reading ``dump.json`` for replay: API records, record checks and file order.

The file and its name grammar are :mod:`msprobe.formats.dump_json` and
:mod:`msprobe.formats.record_names` (upstream 8.1.1's replay rules: keys containing ``Module`` are
ignored, forward/backward by the key's words, full names ``Type.api.N`` or ``Type.prefix.api.N``).
Tensors live in ``<dir of dump.json>/dump_tensor_data`` whatever ``dump_data_dir`` says (dumps can be
moved). Imports no torch.

Problems are sorted in two kinds: a file that is not a dump at all raises :class:`MsprobeError`
(the collector turns it into one ``CollectError`` line); a single broken record becomes an
:class:`ApiRecord` with ``problem`` set, so the rest of the file still replays.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from msprobe.errors import MsprobeError
from msprobe.formats import dump_json
from msprobe.formats.accuracy_csv import unsafe_name
from msprobe.formats.dump_json import DEBUG_JSON, DUMP_JSON, TENSOR_DIR
from msprobe.formats.record_names import replay_api_type, replay_bare_name, replay_grammar_ok
from msprobe.paths import natural_order, where


@dataclass(frozen=True)
class ApiRecord:
    """One API call of a dump: its forward record, its backward record (if any) and where it sits."""

    name: str  # full name, e.g. "Functional.linear.0"
    index: int  # position among the forward records of the file (the output order)
    forward: Mapping[str, Any]
    backward: Mapping[str, Any] | None
    problem: str | None = None  # a broken record: the one-line reason

    @property
    def api_type(self) -> str:
        return replay_api_type(self.name)

    @property
    def bare_name(self) -> str:
        """The middle segment(s): ``linear`` for ``Functional.linear.0``, ``linalg.inv`` for 4 segments."""
        return replay_bare_name(self.name)

    @property
    def grammar_ok(self) -> bool:
        return replay_grammar_ok(self.name)


@dataclass(frozen=True)
class DumpFile:
    """A parsed dump.json: header facts plus its API records in file order."""

    path: Path
    task: str
    data_dir: Path
    records: tuple[ApiRecord, ...]


#: The ``type`` of a tensor argument; a description without ``type`` is a tensor when it has dtype/shape.
TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter")


def is_tensor_spec(spec: Mapping[str, Any]) -> bool:
    kind = spec.get("type")
    return kind in TENSOR_TYPES or (kind is None and ("dtype" in spec or "shape" in spec))


def _tensor_specs(value: Any, where: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every tensor description inside one argument (lists walked, as replay walks them), with its place."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _tensor_specs(item, f"{where}[{i}]")
    elif isinstance(value, Mapping) and is_tensor_spec(value):
        yield where, value


def _arguments(args: list[Any], kwargs: Mapping[str, Any], backward: Any) -> Iterator[tuple[str, Any]]:
    """A record's arguments, each with the name a reason gives it (``input_args[0]``, ...)."""
    for i, arg in enumerate(args):
        yield f"input_args[{i}]", arg
    for key, arg in kwargs.items():
        yield f"input_kwargs[{key!r}]", arg
    for i, arg in enumerate([] if backward is None else backward.get("input", [])):
        yield f"backward input[{i}]", arg


def data_name_problem(name: Any) -> str | None:
    """Why a ``data_name`` may not be read (absolute, ``..``, not a plain relative path); None if fine."""
    if not isinstance(name, str) or not name:
        return f"data_name {name!r} is not a file name"
    if "\x00" in name:
        return f"data_name {name!r} holds a NUL byte"
    for flavour in (PurePosixPath(name), PureWindowsPath(name)):
        if flavour.is_absolute() or flavour.drive or flavour.root:
            return f"data_name {name!r} is an absolute path outside the dump folder"
        if ".." in flavour.parts:
            return f"data_name {name!r} escapes the dump folder ('..')"
    return None


def _record_problem(name: str, forward: Any, backward: Any) -> str | None:
    if why := unsafe_name(name):
        return f"API name {name!r} {why}; refusing to replay or write it"
    if not isinstance(forward, Mapping):
        return "forward record is not a JSON object"
    args, kwargs = forward.get("input_args", []), forward.get("input_kwargs", {})
    if not isinstance(args, list):
        return "'input_args' is not a list"
    if not isinstance(kwargs, Mapping):
        return "'input_kwargs' is not an object"
    if backward is not None:
        if not isinstance(backward, Mapping):
            return "backward record is not a JSON object"
        if not isinstance(backward.get("input", []), list):
            return "backward 'input' is not a list"
    for argument, value in _arguments(args, kwargs, backward):
        for place, spec in _tensor_specs(value, argument):
            if why := _tensor_problem(spec):
                return f"{place}: {why}"
    return None


def _tensor_problem(spec: Mapping[str, Any]) -> str | None:
    """Why one tensor description cannot be replayed as written; None if it can."""
    for key in ("data_name", "datapath"):
        if key in spec and (why := data_name_problem(spec[key])):
            return why
    for key in ("dtype", "shape"):
        if key not in spec:
            return f"tensor has no {key!r} key"
    if not isinstance(spec["shape"], list) or not all(
        n is None or (isinstance(n, int) and not isinstance(n, bool) and n >= 0) for n in spec["shape"]
    ):  # None: a nested tensor's ragged dimension (a SKIP with its reason, not a broken record)
        return f"tensor shape {spec['shape']!r} is not a list of sizes"
    if not isinstance(spec["dtype"], str):
        return f"tensor dtype {spec['dtype']!r} is not a string"
    return None


def read_dump_header(path: Path) -> Mapping[str, Any]:
    """The decoded dump.json of a PyTorch API dump; :class:`MsprobeError` naming the file when it is
    not one (not JSON, no ``data``, another framework, a ``debugger.save`` debug.json)."""
    doc = dump_json.read_dump_json(path)
    framework = doc.get("framework", "pytorch")
    if framework not in ("pytorch", "pt"):
        raise MsprobeError(f"{path}: framework {framework!r} is not replayed here (pytorch only)")
    if doc.get("level") == "debug":
        raise MsprobeError(f"{path}: a debugger.save file (level debug), not an API dump")
    return doc


@dataclass(frozen=True, eq=False)  # a pytest plugin object: hashed by identity
class CheckedDumps:
    """What the start-up check of a dump path found: each readable dump.json's API order (forward
    record name -> output position), by resolved path. ``msprobe run_ut`` hands its check to the replay
    it starts in the same process as a pytest plugin object, so the files are not decoded again."""

    root: Path  # resolved
    orders: Mapping[Path, Mapping[str, int]]


def check_dumps(root: Path, files: Sequence[Path], option: str) -> CheckedDumps:
    """Before a replay starts: the dump.json files of ``root`` (given with ``option``), each decoded
    once. One of them must hold a forward API record; otherwise one line naming the option, the path
    given and, for a folder, the file at fault (the first that is not a dump) or, when every file is a
    dump with nothing to replay, why. A file that is not a dump beside one that replays is left out of
    the orders: its collection reports it, and the others replay."""
    why_nothing = ""
    first_error: MsprobeError | None = None
    orders: dict[Path, Mapping[str, int]] = {}
    for path in files:
        try:
            doc = read_dump_header(path)
        except MsprobeError as exc:
            if first_error is None:
                reason = str(exc).removeprefix(f"{path}: ") if path == root else str(exc)
                first_error = MsprobeError(f"{where(option, root)}: {reason}", exc.exit_code)
            continue
        data = doc.get("data")
        calls = dump_json.api_calls(data if isinstance(data, Mapping) else {})
        orders[path.resolve()] = {name: index for index, name in enumerate(calls.forwards)}
        if not calls.forwards:
            why_nothing = why_nothing or _nothing_to_replay(doc, calls)
    if not any(orders.values()):
        if first_error is not None:
            raise first_error
        raise MsprobeError(f"{where(option, root)}: no API forward record to replay: {why_nothing}")
    return CheckedDumps(root.resolve(), orders)


def _nothing_to_replay(doc: Mapping[str, Any], calls: dump_json.ApiCalls) -> str:
    """Why a dump.json holds no forward API record, in the terms of the dump's configuration."""
    data = doc.get("data")
    if not data:
        return "its data is empty (did the dump's scope or list match nothing?)"
    if calls.backwards:
        return 'backward records only (dumped with data_mode ["backward"]?); dump with data_mode ["all"]'
    level = doc.get("level")
    if level == "L0":
        return "module records only (a level L0 dump); dump at level L1 or mix to replay APIs"
    return f"module records only (a level {level} dump whose scope or list kept no API forward record)"


def read_dump(path: Path) -> DumpFile:
    """Parse one dump.json; raise :class:`MsprobeError` naming the file when it is not a dump."""
    doc = read_dump_header(path)
    calls = dump_json.api_calls(doc["data"])
    forwards, backwards, broken = calls.forwards, calls.backwards, calls.broken
    records = []
    for index, (name, forward) in enumerate(forwards.items()):
        backward = backwards.get(name)
        problem = broken.get(name) or _record_problem(name, forward, backward)
        records.append(
            ApiRecord(
                name=name,
                index=index,
                forward=forward if isinstance(forward, Mapping) else {},
                backward=backward if isinstance(backward, Mapping) else None,
                problem=problem,
            )
        )
    return DumpFile(
        path=path,
        task=str(doc.get("task", "")),
        # beside the file itself: a dump.json that is a link (to a dump elsewhere) has its data there
        data_dir=path.resolve().parent / TENSOR_DIR,
        records=tuple(records),
    )


def find_dump_files(root: Path) -> list[Path]:
    """The dump.json files a ``--msprobe-dump`` path stands for, sorted.

    A file is itself; a folder holding ``dump.json`` is a rank folder; otherwise the folder is a dump
    root and ``step*/rank*/dump.json`` and ``step*/proc*/dump.json`` (or ``rank*``/``proc*`` directly
    under it) are taken.
    """
    if root.is_file():
        return [root]
    if (root / DUMP_JSON).is_file():
        return [root / DUMP_JSON]
    return _under(root, DUMP_JSON)


def _under(root: Path, name: str) -> list[Path]:
    """The files ``name`` in the rank folders under the dump root ``root``, in natural order."""
    patterns = tuple(f"{folders}/{name}" for folders in ("step*/rank*", "step*/proc*", "rank*", "proc*"))
    found = {p for pattern in patterns for p in root.glob(pattern) if p.is_file()}
    return sorted(found, key=lambda p: natural_order(str(p)))  # step2 before step10


def dump_files_of(root: Path, option: str) -> list[Path]:
    """``find_dump_files`` for a path the user gave with ``option``; one line naming both if none."""
    files = find_dump_files(root)
    if not files and root.is_dir() and ((root / DEBUG_JSON).is_file() or _under(root, DEBUG_JSON)):
        raise MsprobeError(
            f"{where(option, root)}: a dump of level debug (debugger.save's {DEBUG_JSON}), not an API dump: "
            "nothing to replay"
        )
    if not files:
        raise MsprobeError(
            f"{where(option, root)}: not a dump (no dump.json, step*/rank*/ or proc*/ folders)"
        )
    return files
