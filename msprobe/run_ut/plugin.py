"""pytest entry point (``pytest11: msprobe``). Hook implementations only; imports no torch.

Without ``--msprobe-dump`` the plugin registers nothing beyond its options. With it, the dump path is
added as a collection root and a ``ReplaySession`` (``msprobe.run_ut.session``) is registered, which
collects the dump, replays each API as a test item and writes the two result CSVs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

DEVICES = ("cpu", "cuda", "npu")


def add_options(addoption: Callable[..., Any], prefix: str = "--msprobe-") -> None:
    """The replay options; ``msprobe run_ut`` maps its upstream flags onto these."""
    addoption(f"{prefix}dump", action="store", default=None, metavar="PATH",
              help="dump.json, rank folder, or dump root (step*/rank*/, proc*/) to replay")  # fmt: skip
    addoption(f"{prefix}out", action="store", default=None, metavar="DIR",
              help="folder for accuracy_checking_{result,details}_{ts}.csv (default: current folder)")  # fmt: skip
    addoption(f"{prefix}device", action="store", default=None, choices=DEVICES,
              help="device side: cpu, cuda or npu (default: the best available)")  # fmt: skip
    addoption(f"{prefix}config", action="store", default=None, metavar="CONFIG_JSON",
              help="msprobe config.json whose 'run_ut' section has white_list/black_list/error_data_path")  # fmt: skip
    addoption(f"{prefix}resume", action="store", default=None, metavar="RESULT_CSV_OR_DIR",
              help="resume: an earlier accuracy_checking_result_{ts}.csv, or an earlier --msprobe-out folder")  # fmt: skip
    addoption(f"{prefix}save-error-data", action="store_true", default=False,
              help="save inputs/outputs of APIs that did not pass under ut_error_data{ts}/")  # fmt: skip
    addoption(f"{prefix}filter-api", action="store_true", default=False,
              help="replay only the first of calls with identical arguments (upstream -f)")  # fmt: skip


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("msprobe", "msprobe API replay")
    add_options(group.addoption)


def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """``--msprobe-dump=PATH`` makes PATH a collection root (unless it is already one)."""
    path = getattr(early_config.known_args_namespace, "msprobe_dump", None)
    if not path:
        return
    wanted = Path(path).expanduser().resolve()
    roots = getattr(early_config.known_args_namespace, "file_or_dir", None) or []
    if not any(Path(str(a).split("::")[0]).expanduser().resolve() == wanted for a in roots):
        args.append(str(path))


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("msprobe_dump", None):
        from msprobe.run_ut.session import register

        register(config)
