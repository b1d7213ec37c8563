"""pytest entry point (``pytest11: msprobe``). Hook implementations only; imports no torch.

Without ``--msprobe-dump`` the plugin registers nothing beyond its options. With it, the dump path is
added as a collection root and a ``ReplaySession`` (``msprobe.run_ut.session``) is registered, which
collects the dump, replays each API as a test item and writes the two result CSVs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

DEVICES = ("cpu", "cuda", "npu")


#: (option suffix, argparse keywords): the replay options, also mapped by ``msprobe run_ut``.
OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "dump",
        {
            "metavar": "PATH",
            "help": "dump.json, rank folder (rank/, or rank{R}/ under torch.distributed) or dump root",
        },
    ),
    (
        "out",
        {"metavar": "DIR", "help": "folder for accuracy_checking_{result,details}_{ts}.csv (default: .)"},
    ),
    ("device", {"choices": DEVICES, "help": "device side: cpu, cuda or npu (default: the best available)"}),
    ("device-ids", {"metavar": "IDS", "help": "cards to use, e.g. 0,1: worker i takes ids[i %% len(ids)]"}),
    ("config", {"metavar": "CONFIG_JSON", "help": "msprobe config.json with a 'run_ut' white/black list"}),
    (
        "resume",
        {"metavar": "RESULT_CSV_OR_DIR", "help": "resume from an earlier result CSV or --msprobe-out"},
    ),
    ("jit-compile", {"action": "store_true", "help": "NPU only: jit_compile mode (as during the dump)"}),
    ("save-error-data", {"action": "store_true", "help": "save tensors of APIs that did not pass"}),
    (
        "filter-api",
        {"action": "store_true", "help": "replay only the first of identical calls (upstream -f)"},
    ),
    (
        "routing",
        {"choices": ("8.1.1", "26.x"), "help": "standard routing: 8.1.1 by API name (default), 26.x"},
    ),
    (
        "threads",
        {"metavar": "N", "type": int, "help": "torch intra-op threads per replay process (default 1)"},
    ),
)


def add_options(addoption: Callable[..., Any], prefix: str = "--msprobe-") -> None:
    """Register the replay options with ``addoption`` (a pytest group's or an argparse parser's)."""
    for name, kwargs in OPTIONS:
        default = False if kwargs.get("action") == "store_true" else None
        addoption(f"{prefix}{name}", default=default, **kwargs)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from msprobe.run_ut import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("msprobe", "msprobe API replay")
    add_options(group.addoption)


_STEP = re.compile(r"^step\d*$")
_RANK = re.compile(r"^(rank|proc)\d*$")
"""The folders a dump writes between its root and a dump.json: ``step*/rank*`` (or ``proc*``)."""


def _dump_ancestors(folder: Path) -> list[Path]:
    """The dump's own folders above ``folder`` (``step0/`` above ``rank/``, and the dump root above
    them); a folder further up is the user's own, and so is the folder of a rank folder that is not
    in a step folder (``./rank0`` in a project)."""
    above = []
    inner = folder
    if _RANK.match(inner.name) and _STEP.match(inner.parent.name):  # a rank folder only below a step
        inner = inner.parent
        above.append(inner)
    if _STEP.match(inner.name) and inner.parent != inner:
        above.append(inner.parent)
    return above


def dump_conftests(folder: Path) -> list[Path]:
    """The ``conftest.py`` files of a dump that pytest would import while collecting ``folder``: inside
    it (tensor folders pruned), and in the dump's own folders above it."""
    from msprobe.formats.dump_json import TENSOR_DIR

    found = []
    for dirpath, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != TENSOR_DIR)
        if "conftest.py" in files:
            found.append(Path(dirpath) / "conftest.py")
    return found + [d / "conftest.py" for d in _dump_ancestors(folder) if (d / "conftest.py").is_file()]


def _in_dump(path: Path, folder: Path) -> bool:
    return folder in path.parents or path.parent in _dump_ancestors(folder)


def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> None:
    """``--msprobe-dump=PATH`` makes PATH a collection root (unless PATH or a node inside it is given).
    A dump is data: a ``conftest.py`` in it, which pytest would import, or a pytest configuration file
    of its own (pytest reads one found above the paths it is given) refuses the run."""
    path = getattr(early_config.known_args_namespace, "msprobe_dump", None)
    if not path:
        return
    wanted = Path(path).expanduser().resolve()
    try:
        folder = wanted if wanted.is_dir() else wanted.parent
    except OSError:  # a name the system cannot look up (over 255 bytes): the session names it
        return
    found = dump_conftests(folder)
    if found:
        raise pytest.UsageError(
            f"--msprobe-dump={path}: {found[0]} is a conftest.py inside the dump; pytest would import and "
            "run it, so it is refused (a dump is data: move the file out of the dump folder)"
        )
    ini = early_config.inipath
    if ini is not None and _in_dump(Path(ini).resolve(), folder):
        raise pytest.UsageError(
            f"--msprobe-dump={path}: pytest took its configuration from {ini}, inside the dump, which "
            "can make it import code; refused (a dump is data: remove the file, or run from your own "
            "folder with --msprobe-dump alone, or use msprobe run_ut)"
        )
    roots = getattr(early_config.known_args_namespace, "file_or_dir", None) or []
    inside = (Path(str(a).split("::")[0]).expanduser().resolve() for a in roots)
    if not any(p == wanted or wanted in p.parents for p in inside):  # e.g. PATH/dump.json::Torch.exp.0
        args.append(os.path.expanduser(str(path)))  # as given, but pytest expands no ~


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("msprobe_dump", None):
        from msprobe.errors import MsprobeError
        from msprobe.extras import require

        try:
            require("replay")
        except MsprobeError as exc:
            raise pytest.UsageError(str(exc)) from None
        from msprobe.run_ut.session import register

        # a rank's dump.json that is not a dump is one collection error: the other ranks still replay
        config.option.continue_on_collection_errors = True
        register(config)
