"""Our dump of the upstream fixture net equals msprobe 8.1.1's real dumps (names, order, shapes,
dtypes, statistics, md5, construct.json, tensor files), both steps, without the CPU workaround."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from fixture_compare import compare_rank
from nets import FIXTURES, run_fixture_net, write_config

from msprobe.mindspore import PrecisionDebugger, seed_all

CASES = [
    ("statistics", "L1", "ms_statistics_L1", ""),
    ("tensor", "L1", "ms_tensor_L1", ""),
    ("tensor", "L0", "ms_tensor_L0", ""),
    ("statistics", "mix", "ms_statistics_mix", ""),
    ("statistics", "debug", "ms_statistics_debug", ""),
    ("tensor", "debug", "ms_tensor_debug", ""),
    ("statistics", "L1", "ms_md5_L1", "md5"),
    ("statistics", "L1", "ms_statistics_L1_nomodel", "nomodel"),
    ("statistics", "L0", "ms_statistics_L0", ""),
]


def _assert_same(out_dir: str, name: str) -> None:
    for step in ("step0", "step1"):
        ours = os.path.join(out_dir, step, "rank")
        assert os.path.isdir(ours), f"no {step}/rank folder in {out_dir}"
        diffs = compare_rank(ours, os.path.join(FIXTURES, name, step, "rank"))
        assert diffs == [], "\n".join(diffs)


@pytest.mark.parametrize(("task", "level", "name", "extra"), CASES[:1] + CASES[2:4] + CASES[6:7])
def test_in_process_matches_upstream(tmp_path, task, level, name, extra):
    out = str(tmp_path / name)
    kwargs = {"summary_mode": "md5"} if extra == "md5" else {}
    cfg = write_config(str(tmp_path / "cfg.json"), task, level, out, **kwargs)
    run_fixture_net(PrecisionDebugger, seed_all, cfg, level=level)
    _assert_same(out, name)


def test_tensor_files_hold_the_dumped_values(tmp_path):
    out = str(tmp_path / "t")
    cfg = write_config(str(tmp_path / "cfg.json"), "tensor", "L1", out)
    run_fixture_net(PrecisionDebugger, seed_all, cfg, steps=1)
    ours = os.path.join(out, "step0", "rank", "dump_tensor_data")
    theirs = os.path.join(FIXTURES, "ms_tensor_L1", "step0", "rank", "dump_tensor_data")
    files = sorted(os.listdir(theirs))
    assert sorted(os.listdir(ours)) == files
    for f in files:
        a = np.load(os.path.join(ours, f), allow_pickle=False)
        b = np.load(os.path.join(theirs, f), allow_pickle=False)
        assert a.dtype == b.dtype and a.shape == b.shape, f
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=f)


@pytest.mark.slow
@pytest.mark.parametrize(("task", "level", "name", "extra"), CASES)
def test_upstream_script_matches_upstream(tmp_path, task, level, name, extra):
    """``make_fixtures.py`` itself, run with our package and ``mint.norm`` left in place."""
    script = os.path.join(FIXTURES, "make_fixtures_upstream.py.txt")  # verbatim copy; .txt keeps lint off it
    env = dict(os.environ, MSPROBE_FIXTURE_NO_NORM_SHIM="1", GLOG_v="3")
    args = [sys.executable, script, task, level, f"out/{name}"] + ([extra] if extra else [])
    proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _assert_same(str(tmp_path / "out" / name), name)
