"""Call stacks from a dump's ``stack.json``, keyed by API (``Functional.conv2d.0``).

Format (upstream 8.1.1's): ``{"0": [[record names...], [frames...]], ...}``; older files map a record
name straight to its frames (``"File PATH, line N, in FUNC, \\n CODE"``). ``dump_dir`` may be a rank
folder (holding ``stack.json``) or a dump root with ``step*/rank*/`` (or ``proc*``) folders; with
several files the first (sorted path) that names an API wins. Only files inside ``dump_dir`` are read.
:func:`user_frames` drops the frames of the framework's own packages (``torch``, ``torch_npu`` under
site-packages), so the report shows the user's code only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from msprobe.errors import MsprobeError

DIRECTIONS = (".forward", ".backward")
FRAMEWORK_PACKAGES = ("torch", "torch_npu")
"""Installed packages whose frames are the framework's, not the user's (``nn.Module.__call__``, ...)."""
_FRAME_PATH = re.compile(r"^File (.*?), line \d+")
_FRAMEWORK_PATH = re.compile(
    r"[\\/](?:site|dist)-packages[\\/](?:" + "|".join(FRAMEWORK_PACKAGES) + r")[\\/]"
)


def is_framework_frame(frame: str) -> bool:
    """A frame whose file lies in an installed framework package (``.../site-packages/torch/...``)."""
    found = _FRAME_PATH.match(frame)
    return found is not None and _FRAMEWORK_PATH.search(found.group(1)) is not None


def user_frames(frames: Sequence[str]) -> tuple[list[str], int]:
    """The frames that are not in a framework package (order kept), and how many were dropped."""
    kept = [f for f in frames if not is_framework_frame(f)]
    return kept, len(frames) - len(kept)


def _api_of(record: str) -> str:
    for suffix in DIRECTIONS:
        if record.endswith(suffix):
            return record[: -len(suffix)]
    return record


def _frames(value: object) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(f, str) for f in value):
        return list(value)
    return None


def parse_stack(data: object, path: Path) -> dict[str, list[str]]:
    """API name → frames, from the decoded JSON of one stack.json."""
    if not isinstance(data, Mapping):
        raise MsprobeError(f"{path}: not a stack.json (expected an object of call stacks)")
    out: dict[str, list[str]] = {}
    for key, value in data.items():
        if isinstance(value, list) and len(value) == 2 and isinstance(value[0], list):
            names, frames = value[0], _frames(value[1])
            if frames is None:
                raise MsprobeError(f"{path}: entry {key!r} has no list of frames")
            for name in names:
                out.setdefault(_api_of(str(name)), frames)
        elif (frames := _frames(value)) is not None:
            out.setdefault(_api_of(str(key)), frames)
        else:
            raise MsprobeError(f"{path}: entry {key!r} is not [[names], [frames]]")
    return out


def stack_files(dump_dir: Path) -> list[Path]:
    if not dump_dir.is_dir():
        raise MsprobeError(f"{dump_dir}: no such dump folder")
    root = dump_dir.resolve()
    found = sorted(
        p for p in dump_dir.rglob("stack.json") if p.is_file() and p.resolve().is_relative_to(root)
    )
    if not found:
        raise MsprobeError(f"{dump_dir}: no stack.json in this folder or its step*/rank*/ folders")
    return found


def load_stacks(dump_dir: Path) -> dict[str, list[str]]:
    """Every API's call stack found under ``dump_dir`` (first file wins)."""
    out: dict[str, list[str]] = {}
    for path in stack_files(dump_dir):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise MsprobeError(f"{path}: unreadable stack.json ({exc})") from None
        for api, frames in parse_stack(data, path).items():
            out.setdefault(api, frames)
    return out
