"""Call stacks from a dump's ``stack.json``, keyed by API (``Functional.conv2d.0``).

Format: :mod:`msprobe.formats.dump_json` (upstream 8.1.1's, both layouts; a frame is
``"File PATH, line N, in FUNC, \\n CODE"``). ``dump_dir`` may be a rank folder (holding ``stack.json``)
or a dump root with ``step*/rank*/`` (or ``proc*``) folders; with several files the first that names an
API wins: the one in the step and rank folder of the replay's output (run_ut writes ``OUT/<step>/<rank>/``
for a dump root), then the others in path order. Only files inside ``dump_dir`` are read.
:func:`user_frames` drops the frames of the framework's own packages (``torch``, ``torch_npu`` under
site-packages), so the report shows the user's code only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from msprobe.errors import MsprobeError
from msprobe.formats.dump_json import STACK_JSON, StackEntry, read_stack
from msprobe.formats.dump_json import parse_stack as parse_stack_entries
from msprobe.formats.record_names import strip_direction

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


def _by_api(entries: list[StackEntry]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for names, frames in entries:
        for name in names:
            out.setdefault(strip_direction(name), frames)
    return out


def parse_stack(data: object, path: Path) -> dict[str, list[str]]:
    """API name → frames, from the decoded JSON of one stack.json."""
    return _by_api(parse_stack_entries(data, path))


def stack_files(dump_dir: Path) -> list[Path]:
    if not dump_dir.is_dir():
        raise MsprobeError(f"{dump_dir}: {'not a folder' if dump_dir.exists() else 'no such dump folder'}")
    root = dump_dir.resolve()
    found = sorted(p for p in dump_dir.rglob(STACK_JSON) if p.is_file() and p.resolve().is_relative_to(root))
    if not found:
        raise MsprobeError(f"{dump_dir}: no stack.json in this folder or its step*/rank*/ folders")
    return found


def load_stacks(dump_dir: Path, replay_dir: Path | None = None) -> dict[str, list[str]]:
    """Every API's call stack found under ``dump_dir`` (first file wins; first the one in the step and
    rank folder whose names end ``replay_dir``, the folder of the details CSV compared)."""
    files = stack_files(dump_dir)
    if replay_dir is not None and len(files) > 1:
        tail = replay_dir.parts[-2:]
        files.sort(key=lambda p: p.parent.parts[-2:] != tail)  # stable: the rest keep path order
    out: dict[str, list[str]] = {}
    for path in files:
        for api, frames in _by_api(read_stack(path)).items():
            out.setdefault(api, frames)
    return out
