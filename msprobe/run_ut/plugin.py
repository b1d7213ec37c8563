"""pytest entry point (``pytest11: msprobe``). Hook implementations only; imports no torch.

Filled in by the replay work (issue 4). Without ``--msprobe-dump`` the plugin registers nothing.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("msprobe", "msprobe API replay")
    group.addoption(
        "--msprobe-dump",
        action="store",
        default=None,
        metavar="PATH",
        help="dump.json, rank folder or dump root to replay",
    )
