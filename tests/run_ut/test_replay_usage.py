"""Usage-level behaviour of the replay plugin: ``pytest --help``, absent devices, torch_npu probing."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from replay_dumps import copy_fixture

# Imported here so pytester's in-process runs find them loaded (torch cannot be imported twice).
import msprobe.run_ut.replay
import msprobe.run_ut.session  # noqa: F401
from msprobe.cli import main as msprobe_main
from msprobe.run_ut import device


def test_pytest_help_lists_the_msprobe_options(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for option in ("--msprobe-dump", "--msprobe-out", "--msprobe-device", "--msprobe-device-ids"):
        assert option in done.stdout
    assert "ids[i % len(ids)]" in done.stdout


# --------------------------------------------------------------------------- absent devices
def _no_csv(folder: Path) -> bool:
    return not folder.exists() or not list(folder.rglob("*.csv"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="only meaningful without CUDA")
def test_absent_cuda_is_one_usage_error_before_anything_runs(pytester: pytest.Pytester) -> None:
    out = pytester.path / "out"
    dump = copy_fixture("cnn_statistics", pytester.path / "d")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", f"--msprobe-dump={dump}", f"--msprobe-out={out}", "--msprobe-device=cuda"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    lines = [line for line in result.errlines + result.outlines if line.strip()]
    assert lines == [
        "ERROR: --msprobe-device=cuda: no CUDA device is available on this host "
        "(torch.cuda.is_available() is False)"
    ]
    assert _no_csv(out)


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None, reason="torch_npu is installed")
def test_run_ut_absent_npu_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = copy_fixture("cnn_statistics", tmp_path / "d")
    out = tmp_path / "out"
    code = msprobe_main(["run_ut", "-api_info", str(dump), "-o", str(out), "-device_type", "npu", "-q"])
    assert code == pytest.ExitCode.USAGE_ERROR
    captured = capsys.readouterr()
    lines = [line for line in (captured.err + captured.out).splitlines() if line.strip()]
    assert lines == ["msprobe: error: -device_type npu: torch_npu is not installed on this host"]  # as typed
    assert _no_csv(out)


# --------------------------------------------------------------------------- torch_npu probing
BROKEN_NPU = 'raise RuntimeError("libascendcl.so: cannot open shared object file")\n'


def _stub_npu(folder: Path, body: str) -> Path:
    (folder / "torch_npu").mkdir(parents=True)
    (folder / "torch_npu" / "__init__.py").write_text(body, encoding="utf-8")
    return folder


def test_broken_torch_npu_default_replay_falls_back_to_cpu_with_one_warning(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = _stub_npu(pytester.path / "stub", BROKEN_NPU)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(stub), os.environ.get("PYTHONPATH", "")]))
    dump = copy_fixture("cnn_statistics", pytester.path / "d")
    out = pytester.path / "out"
    base = ("-p", "no:cacheprovider", f"--msprobe-dump={dump}", f"--msprobe-out={out}")
    result = pytester.runpytest_subprocess(*base, "-q")
    warning = [line for line in result.outlines if line.startswith("msprobe: warning")]
    assert warning == [
        "msprobe: warning: torch_npu is installed but failed to import "
        "(RuntimeError: libascendcl.so: cannot open shared object file); not replaying on npu"
    ]
    assert result.ret == pytest.ExitCode.OK, result.outlines[-20:]
    result.stdout.fnmatch_lines(["*APIs on cpu*"])
    assert not _no_csv(out)

    asked = pytester.runpytest_subprocess(*base, "--msprobe-device=npu")
    assert asked.ret == pytest.ExitCode.USAGE_ERROR
    lines = [line for line in asked.errlines + asked.outlines if line.strip()]
    assert lines == [
        "ERROR: --msprobe-device=npu: torch_npu is installed but failed to import "
        "(RuntimeError: libascendcl.so: cannot open shared object file)"
    ]


def test_torch_npu_is_imported_only_where_it_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    imported: list[str] = []
    real_import = importlib.import_module

    def recording_import(name: str, package: str | None = None) -> ModuleType:
        imported.append(name)
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", recording_import)
    if importlib.util.find_spec("torch_npu") is None:
        assert device.resolve(None) in ("cpu", "cuda")
        with pytest.raises(device.DeviceError, match="torch_npu is not installed"):
            device.resolve("npu")
        assert "torch_npu" not in imported

    marker = tmp_path / "imported"
    stub = _stub_npu(tmp_path / "stub", f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(stub))
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    try:
        assert device.resolve(None) in ("cpu", "cuda")  # the stub sets no torch.npu: no card
        assert marker.exists() and "torch_npu" in imported
        with pytest.raises(device.DeviceError, match=r"torch\.npu\.is_available\(\) is False"):
            device.resolve("npu")
    finally:
        sys.modules.pop("torch_npu", None)


def test_a_card_number_the_machine_lacks_is_refused_not_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from msprobe.run_ut.device import DeviceError, check_ids

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_ids("cuda", (1, 0))
    check_ids("cpu", (7,))  # the CPU takes no card number
    with pytest.raises(DeviceError, match=r"no cuda card 5 here \(2 visible: 0-1\)"):
        check_ids("cuda", (0, 5))
