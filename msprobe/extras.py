"""What each stage needs beyond the base install (numpy), and the one line naming what is missing.

The table mirrors ``[project.optional-dependencies]`` of pyproject.toml. Modules are looked up, not
imported, so a check costs nothing and leaves the import to the stage itself.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from msprobe.errors import MsprobeError


@dataclass(frozen=True)
class Need:
    who: str  # what needs the modules, as the message says it
    extra: str  # the pip extra that installs them
    modules: tuple[tuple[str, str], ...]  # (import name, distribution name)


NEEDS: dict[str, Need] = {
    "pytorch": Need("the PyTorch dump", "pytorch", (("torch", "torch"),)),
    "replay": Need("the replay stage", "replay", (("torch", "torch"), ("pytest", "pytest"))),
    "workers": Need("replay with -n (worker processes)", "replay", (("xdist", "pytest-xdist"),)),
    "compare": Need("the compare stage", "compare", (("pandas", "pandas"),)),
    "demo": Need(
        "msprobe demo (dump, replay and compare)",
        "all",
        (("torch", "torch"), ("pytest", "pytest"), ("pandas", "pandas")),
    ),
}


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (a ``None`` entry in ``sys.modules`` counts as missing)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing; a module without a spec
        return False


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def require(stage: str) -> None:
    """Raise the one-line :class:`MsprobeError` naming the extra when a module ``stage`` needs is missing."""
    need = NEEDS[stage]
    missing = [dist for module, dist in need.modules if not installed(module)]
    if missing:
        every = [dist for _, dist in need.modules]
        absent = "" if missing == every else f" ({_and(missing)} missing)"
        # the packages themselves, not ``msprobe[extra]``: PyPI's ``msprobe`` is another project
        raise MsprobeError(
            f"{need.who} needs {_and(every)}{absent}: pip install {' '.join(missing)} "
            f"(msprobe's '{need.extra}' extra)"
        )
