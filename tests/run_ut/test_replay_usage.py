"""Usage-level behaviour of the replay plugin: ``pytest --help``, absent devices, torch_npu probing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_pytest_help_lists_the_msprobe_options(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for option in ("--msprobe-dump", "--msprobe-out", "--msprobe-device", "--msprobe-device-ids"):
        assert option in done.stdout
    assert "ids[i % len(ids)]" in done.stdout
