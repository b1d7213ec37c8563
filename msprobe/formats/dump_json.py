"""The json files of one rank folder: dump.json, construct.json, stack.json (upstream 8.1.1's layout).

=================  ==========================================================================
dump.json          ``{"task", "level", "framework", "dump_data_dir", "data": {record: value}}``
                   (``debug.json`` for ``level: debug``, same layout)
construct.json     ``{record: parent record or null}``
stack.json         ``{"0": [[record, ...], [frame, ...]], ...}``; older files map a record straight
                   to its frames
tensors            ``{rank folder}/dump_tensor_data/{tensor file}`` (:mod:`.record_names`)
=================  ==========================================================================

Writing: text byte-identical to ``json.dumps(obj, indent=1)`` (non-finite floats as ``NaN``/``Infinity``
literals, as upstream's ``json.dump``; encoder :mod:`.jsonfmt`), written to a temporary name and renamed
so a crash never leaves half a file. The dump encodes each record once, when it is collected
(:data:`RECORD_INDENT`), and a flush joins the texts (:func:`dump_json_text`).

Reading: a file that is not what it should be is one :class:`MsprobeError` line naming it; the pairing of
forward and backward records for replay follows upstream's rules (:func:`api_calls`).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprobe.errors import MsprobeError, first_line
from msprobe.formats import jsonfmt
from msprobe.formats.record_names import FORWARD, is_module_key, split_direction

DUMP_JSON = "dump.json"
STACK_JSON = "stack.json"
CONSTRUCT_JSON = "construct.json"
DEBUG_JSON = "debug.json"
TENSOR_DIR = "dump_tensor_data"
FILE_MODE = 0o640
RECORD_INDENT = 2  # a record's value sits two levels deep: {"data": {name: value}}


def data_file_of(level: object) -> str:
    """The rank folder's data file: debug.json for level debug (``debugger.save``), else dump.json."""
    return DEBUG_JSON if level == "debug" else DUMP_JSON


StackEntry = tuple[list[str], list[str]]  # (record names, frames)


# -- writing ---------------------------------------------------------------------------------------------
class NotARegularFile(OSError):
    """A name that must be a regular file is a link, a named pipe, a device or a folder (what an earlier
    run or another user may have left there): never followed out of the dump folder, never waited on,
    never read without end."""


def open_regular(path: str, flags: int, mode: int = FILE_MODE) -> tuple[int, os.stat_result]:
    """A descriptor of ``path`` opened with ``flags`` (and its stat), where the name is a regular file
    itself, else :class:`NotARegularFile` naming it. O_NOFOLLOW refuses a link; O_NONBLOCK opens a named
    pipe at once (or fails with ENXIO when nothing reads it), to be refused, not waited on; the
    descriptor blocks again when handed back."""
    doing = "write" if flags & (os.O_WRONLY | os.O_RDWR) else "read"
    not_regular = f"{path}: not a regular file (a pipe, a device or a folder); refusing to {doing} it"
    try:
        fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(path):
            raise NotARegularFile(f"{path}: a symbolic link; refusing to {doing} it") from None
        raise  # a pipe nothing reads (ENXIO), a folder opened to write (EISDIR): the OS's own error
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(not_regular)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def create_file(path: str, mode: int = FILE_MODE) -> int:
    """A descriptor of ``path`` opened for writing, created with ``mode`` or emptied; what is no regular
    file at the name is refused (:func:`open_regular`)."""
    fd, st = open_regular(path, os.O_WRONLY | os.O_CREAT, mode)
    if st.st_size:  # after the check: a device is never truncated. A new file is not: on ext4, a
        # truncation to zero makes the close flush the file's data
        try:
            os.ftruncate(fd, 0)
        except BaseException:
            os.close(fd)
            raise
    return fd


def write_text(path: str, text: str | Iterable[str]) -> None:
    """Write ``text`` (or its pieces, in order) to ``path`` through a temporary file and a rename."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = create_file(tmp)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            if isinstance(text, str):
                fh.write(text)
            else:
                fh.writelines(text)
        os.replace(tmp, path)
    except BaseException:  # a full disk: no half-written temporary left beside the files
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path: str, obj: Any) -> None:
    write_text(path, jsonfmt.dumps(obj))


def encode_record(value: Any) -> str:
    """A record's value as it sits in dump.json (what :func:`dump_json_text` joins)."""
    return jsonfmt.dumps(value, RECORD_INDENT)


def dump_json_text(header: Mapping[str, Any], records: Iterable[tuple[str, str]]) -> str:
    """dump.json text from the header and ``(name, encode_record(value))`` pairs, in file order."""
    return "".join(dump_json_pieces(header, records))


def dump_json_pieces(header: Mapping[str, Any], records: Iterable[tuple[str, str]]) -> Iterator[str]:
    """:func:`dump_json_text` in pieces, one a record: a flush writes the file without holding its whole
    text (a copy of every record's text, their join, the file's bytes) beside the records."""
    head = jsonfmt.dumps(dict(header))
    yield '{\n "data": ' if head == "{}" else head[:-2] + ',\n "data": '
    yield from jsonfmt.object_pieces(records, 1)
    yield "\n}"


def stack_json(entries: Iterable[tuple[Iterable[str], Iterable[str]]]) -> dict[str, Any]:
    """The stack.json object of ``(record names, frames)`` entries, numbered in order."""
    return {str(i): [list(names), list(frames)] for i, (names, frames) in enumerate(entries)}


def write_rank_files(
    rank_dir: str,
    header: Mapping[str, Any],
    records: Iterable[tuple[str, str]],
    stack: Mapping[str, Any] | None,
    construct: Mapping[str, Any] | None,
    data_file: str = DUMP_JSON,
) -> None:
    """dump.json (or ``data_file``), then stack.json and construct.json when given, beside dump.json only
    (level debug writes its debug.json alone)."""
    write_text(os.path.join(rank_dir, data_file), dump_json_pieces(header, records))
    if data_file != DUMP_JSON:
        return
    if stack is not None:
        write_json(os.path.join(rank_dir, STACK_JSON), stack)
    if construct is not None:
        write_json(os.path.join(rank_dir, CONSTRUCT_JSON), construct)


# -- reading ---------------------------------------------------------------------------------------------
def json_problem(exc: BaseException) -> str:
    """One line for a failure to decode a JSON file: a ``ValueError`` (invalid JSON, an integer of too
    many digits, bytes that are no UTF-8) or a ``RecursionError`` (whose text says nothing of the file)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return first_line(exc)


def read_dump_json(path: Path) -> Mapping[str, Any]:
    """The decoded dump.json; :class:`MsprobeError` naming the file when it is not a dump."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise MsprobeError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise MsprobeError(f"{path}: is a folder, expected a dump.json file") from None
    except (ValueError, RecursionError) as exc:  # see json_problem
        raise MsprobeError(f"{path}: not a dump (invalid JSON: {json_problem(exc)})") from None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("data"), Mapping):
        raise MsprobeError(f"{path}: not a dump (no 'data' object)")
    return doc


_HEADER_ONLY_LIMIT = 1 << 16  # bytes: a dump.json without records is its header alone, far smaller


def holds_records(path: Path) -> bool:
    """Whether a dump.json's ``data`` holds records; True too when it cannot be read as a dump (that
    is for its reader to say)."""
    try:
        if path.stat().st_size > _HEADER_ONLY_LIMIT:
            return True
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, RecursionError):
        return True
    return not isinstance(doc, Mapping) or not isinstance(doc.get("data"), Mapping) or bool(doc["data"])


@dataclass
class ApiCalls:
    """The API records of a dump.json's ``data``, paired by API name (file order of the forwards)."""

    forwards: dict[str, Any] = field(default_factory=dict)  # a malformed key maps to None
    backwards: dict[str, Any] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)  # key -> why it cannot be replayed


def api_calls(data: Mapping[str, Any]) -> ApiCalls:
    """Upstream 8.1.1's reading: keys containing ``Module`` are ignored, the rest split by
    :func:`~msprobe.formats.record_names.split_direction`; a malformed key is kept as a broken call."""
    calls = ApiCalls()
    for key, value in data.items():
        if is_module_key(key):
            continue
        split = split_direction(key)
        if split is None:
            calls.broken.setdefault(key, f"record key {key!r} does not end in '.forward' or '.backward'")
            calls.forwards.setdefault(key, None)
            continue
        name, direction = split
        (calls.forwards if direction == FORWARD else calls.backwards)[name] = value
    return calls


def _frames(value: object) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(f, str) for f in value):
        return list(value)
    return None


def parse_stack(data: object, path: Path) -> list[StackEntry]:
    """The ``(record names, frames)`` entries of one decoded stack.json, either layout."""
    if not isinstance(data, Mapping):
        raise MsprobeError(f"{path}: not a stack.json (expected an object of call stacks)")
    out: list[StackEntry] = []
    for key, value in data.items():
        if isinstance(value, list) and len(value) == 2 and isinstance(value[0], list):
            frames = _frames(value[1])
            if frames is None:
                raise MsprobeError(f"{path}: entry {key!r} has no list of frames")
            out.append(([str(name) for name in value[0]], frames))
        elif (frames := _frames(value)) is not None:
            out.append(([str(key)], frames))
        else:
            raise MsprobeError(f"{path}: entry {key!r} is not [[names], [frames]]")
    return out


def read_stack(path: Path) -> list[StackEntry]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise MsprobeError(f"{path}: unreadable stack.json ({json_problem(exc)})") from None
    return parse_stack(data, path)


def parse_construct(data: object, path: Path) -> dict[str, str | None]:
    """record -> parent record (or None) from one decoded construct.json."""
    if not isinstance(data, Mapping):
        raise MsprobeError(f"{path}: not a construct.json (expected an object of parents)")
    out: dict[str, str | None] = {}
    for key, parent in data.items():
        if parent is not None and not isinstance(parent, str):
            raise MsprobeError(f"{path}: entry {key!r} has parent {parent!r}, not a record name or null")
        out[str(key)] = parent
    return out


def read_construct(path: Path) -> dict[str, str | None]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise MsprobeError(f"{path}: unreadable construct.json ({json_problem(exc)})") from None
    return parse_construct(data, path)
