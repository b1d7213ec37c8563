"""The install's shape, read from pyproject.toml: a light base, one extra per stage, none pulls torch
into a MindSpore install, and the missing-extra messages name the extras that really exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from msprobe.extras import NEEDS

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
SELF = re.compile(r"^msprobe\[(?P<extras>[^\]]+)\]$")


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}


def closure(extras: list[str]) -> set[str]:
    """The distributions an install of ``msprobe[extras]`` asks for (self-references followed)."""
    wanted = list(PROJECT["dependencies"])
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in PROJECT["optional-dependencies"][extra]:
            match = SELF.match(req)
            if match:
                todo += [e.strip() for e in match["extras"].split(",")]
            else:
                wanted.append(req)
    return names(wanted)


def test_base_install_is_light() -> None:
    assert closure([]) == {"numpy"}


def test_mindspore_install_has_no_torch() -> None:
    assert "torch" not in closure(["mindspore"])
    assert "torch" not in closure(["mindspore", "test"])  # the MindSpore suite's venv
    assert "mindspore" in closure(["mindspore"])


def test_each_stage_extra_brings_what_the_stage_imports() -> None:
    for stage, need in NEEDS.items():
        got = closure([need.extra])
        assert {dist for _, dist in need.modules} <= got, (stage, need.extra, got)


def test_dev_has_every_stage_and_the_tools() -> None:
    dev = closure(["dev"])
    for extra in ("pytorch", "replay", "compare", "all", "test"):
        assert closure([extra]) <= dev, extra
    assert {"hypothesis", "ruff", "mypy", "pandas-stubs", "transformers"} <= dev
    assert "mindspore" not in dev


def test_license_file_is_the_declared_license() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
