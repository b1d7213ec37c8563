"""What a replay was run with, beside its result file: ``accuracy_checking_settings_{ts}.json``.

A resume appends to the rows of an earlier run, so it must score the rest the same way: the device
side, the standard routing, the white and black lists, ``--msprobe-filter-api`` and jit_compile decide
the rows. A resume whose options differ is refused, naming each difference; a result file without its
settings file (made before they were written, or copied without it) resumes unchecked, with a warning.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from msprobe.errors import MsprobeError, cannot_write
from msprobe.formats.accuracy_csv import RUN_UT_RESULT_NAME, temporary_path

_NAME = "accuracy_checking_settings_{ts}.json"


@dataclass(frozen=True)
class RunSettings:
    device: str  # the device side the rows were replayed on: cpu, cuda or npu
    routing: str  # 8.1.1 or 26.x
    white_list: tuple[str, ...]
    black_list: tuple[str, ...]
    filter_api: bool
    jit_compile: bool
    #: the replayed dump.json (:func:`dump_fingerprint`); "" in a settings file written without it. Two
    #: dumps of one model (another step, rank, or the tensor dump of the statistics one) hold the same
    #: API names, so only their contents tell that a result file was written for the other.
    dump: str = ""

    def differences(self, now: RunSettings) -> list[str]:
        """``routing (--msprobe-routing) 8.1.1 (now 26.x)`` for each setting that differs, in field order."""
        earlier, current = asdict(self), asdict(now)
        return [
            f"{_LABELS[key]} {_shown(earlier[key])} (now {_shown(current[key])})"
            for key in earlier
            if earlier[key] != current[key] and not (key == "dump" and "" in (earlier[key], current[key]))
        ]


def dump_fingerprint(dump: Path) -> str:
    """What tells one dump.json from another wherever it lies: its size and the CRC-32 of its bytes."""
    crc, size = 0, 0
    with open(dump, "rb") as fh:
        while chunk := fh.read(1 << 20):
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    return f"dump.json of {size} bytes, crc32 {crc:08x}"


_LABELS = {
    "device": "device side (--msprobe-device, -device_type)",
    "routing": "routing (--msprobe-routing)",
    "white_list": "white list (--msprobe-config, -config)",
    "black_list": "black list (--msprobe-config, -config)",
    "filter_api": "--msprobe-filter-api (-f)",
    "jit_compile": "--msprobe-jit-compile (-j)",
    "dump": "dump (--msprobe-dump, -api_info)",
}
"""Each setting as the options that give it (pytest's, then ``msprobe run_ut``'s)."""


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(value) + "]" if value else "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def settings_path_for(result_path: Path) -> Path:
    """The settings file beside ``accuracy_checking_result_{ts}.csv``."""
    match = RUN_UT_RESULT_NAME.match(result_path.name)
    ts = match.group(1) if match else result_path.stem
    return result_path.with_name(_NAME.format(ts=ts))


def write_settings(result_path: Path, settings: RunSettings) -> None:
    path = settings_path_for(result_path)
    temporary = temporary_path(path)  # the process's own: two resumes of one folder write it at once
    try:  # whole or absent: a kill while writing leaves no empty file to refuse at the next resume
        temporary.write_text(json.dumps(asdict(settings), indent=1) + "\n", encoding="utf-8")
        os.replace(temporary, path)
    except OSError as exc:
        with suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise cannot_write(path, exc) from None


def read_settings(result_path: Path) -> RunSettings | None:
    """The settings the run of ``result_path`` wrote; None when it has no settings file."""
    path = settings_path_for(result_path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise MsprobeError(f"{path}: cannot be read ({exc}); delete it to resume without the check") from None
    if not isinstance(doc, Mapping):
        raise MsprobeError(f"{path}: not a settings file; delete it to resume without the check")
    try:
        return RunSettings(
            device=str(doc["device"]),
            routing=str(doc["routing"]),
            white_list=tuple(map(str, doc["white_list"])),
            black_list=tuple(map(str, doc["black_list"])),
            filter_api=_flag(doc["filter_api"]),
            jit_compile=_flag(doc["jit_compile"]),
            dump=str(doc.get("dump", "")),
        )
    except (KeyError, TypeError) as exc:
        raise MsprobeError(
            f"{path}: not a settings file (missing or malformed {exc}); delete it to resume without the check"
        ) from None


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{value!r} for a switch")
    return value


def check_same_settings(result_path: Path, now: RunSettings) -> bool:
    """Raise naming each setting the run of ``result_path`` had otherwise; False when it wrote none."""
    earlier = read_settings(result_path)
    if earlier is None:
        return False
    differences = earlier.differences(now)
    if differences:
        raise MsprobeError(
            f"{result_path} was replayed with {'; '.join(differences)}: resume it with the same "
            "options, or start a new run without resuming"
        )
    return True
