"""``--msprobe-config``: the white/black lists of upstream's ``config.json`` (``run_ut`` section).

Facts from upstream msprobe 8.1.1 (section name ``"run_ut"``; ``white_list``,
``black_list``, ``error_data_path``; an ``"acc_check"`` section is ignored by 8.1.1;
filter on the bare name; an implicit black list of uninitialised-memory
APIs; the black list wins). Imports no torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msprobe.dump.config import SECTION_KEYS, did_you_mean
from msprobe.errors import MsprobeError
from msprobe.formats.dump_json import json_problem

#: APIs never replayed: their outputs are uninitialised memory or a mere conversion.
IMPLICIT_BLACK_LIST = frozenset(
    {"to", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_with_format"}
)
FILTERED = "API {api} in black list or not in white list. SKIP."
SECTION = "run_ut"


@dataclass(frozen=True)
class RunConfig:
    white_list: frozenset[str] = frozenset()
    black_list: frozenset[str] = frozenset()
    error_data_path: Path | None = None

    def filter_reason(self, bare_name: str) -> str | None:
        """The SKIP message when the API is filtered out, else None."""
        if bare_name in self.black_list or bare_name in IMPLICIT_BLACK_LIST:
            return FILTERED.format(api=bare_name)
        if self.white_list and bare_name not in self.white_list:
            return FILTERED.format(api=bare_name)
        return None


def _names(path: Path, section: Mapping[str, Any], key: str) -> frozenset[str]:
    value = section.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MsprobeError(f"{path}: '{SECTION}.{key}' must be a list of API names (strings)")
    return frozenset(value)


def load_config(path: Path | None, warn: Callable[[str], None] = lambda message: None) -> RunConfig:
    """Read the ``run_ut`` section of a msprobe config.json; no path -> defaults. A key 8.1.1 does
    not know is ignored, with a ``warn`` line (a misspelt ``white_list`` would replay everything)."""
    if path is None:
        return RunConfig()
    try:
        with open(path, encoding="utf-8-sig") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise MsprobeError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise MsprobeError(f"{path}: a folder, expected a config.json file") from None
    except OSError as exc:
        raise MsprobeError(f"{path}: cannot read ({exc.strerror})") from None
    except (ValueError, RecursionError) as exc:
        raise MsprobeError(f"{path}: not a JSON config file ({json_problem(exc)})") from None
    if not isinstance(doc, Mapping):
        raise MsprobeError(f"{path}: a config file must hold a JSON object")
    section = doc.get(SECTION, {})
    if not isinstance(section, Mapping):
        raise MsprobeError(f"{path}: '{SECTION}' must be an object")
    known = SECTION_KEYS[SECTION]
    for key in section:
        if key not in known:
            warn(
                f"{path}: unknown key {key!r} in the {SECTION!r} section is ignored{did_you_mean(key, known)}"
            )
    error_path = section.get("error_data_path")
    if error_path is not None and not isinstance(error_path, str):
        raise MsprobeError(f"{path}: '{SECTION}.error_data_path' must be a string")
    if error_path is not None and not Path(error_path).is_dir():
        raise MsprobeError(f"{path}: '{SECTION}.error_data_path' {error_path!r} is not an existing folder")
    return RunConfig(
        white_list=_names(path, section, "white_list"),
        black_list=_names(path, section, "black_list"),
        error_data_path=Path(error_path) if error_path else None,
    )
