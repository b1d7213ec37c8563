"""Acceptance: upstream 8.1.1's CNN tensor dump replayed on CPU gives upstream's rows.

Fixture: upstream 8.1.1's CNN run (in ``tests/data/run_ut``): the dump
``cnn_tensor_L1/step0/rank`` and upstream's own run_ut CPU result ``run_ut_cpu_tensor_L1``. Same API
list, same statuses, same filled columns; every forward metric cell equals upstream's (to 1e-7
relative: the fp64 bench is computed on this host) when this machine's fp32 kernel reproduces the
dumped output bit for bit (upstream's device output *is* that kernel's output). Where the kernel
differs (vectorised tanh, MKL sgemm, FMA or not in ``add_(alpha=)`` on another CPU or under
``ATEN_CPU_CAPABILITY=default``) the metrics legitimately differ in the last digits and only the
verdicts are compared.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from replay_dumps import DATA, copy_fixture, csv_pair, read_csv

import msprobe.run_ut.replay
import msprobe.run_ut.session  # noqa: F401
from msprobe.run_ut import execute, registry
from msprobe.run_ut.inputs import ArgBuilder
from msprobe.run_ut.records import read_dump

UPSTREAM = DATA / "upstream_run_ut_cpu_tensor_L1"

#: APIs whose fp32 output selects, copies or counts input values: bit-exact on any CPU.
EXACT_ANYWHERE = {
    "Tensor.add_.0",  # num_batches_tracked += 1 (int64)
    "Functional.relu.0",
    "Functional.max_pool2d.0",
    "Torch.flatten.0",
    "Torch.ones_like.0",
}


def _kernel_reproduces_dump(dump_dir: Path) -> dict[str, bool]:
    """API -> whether fp32 on this CPU gives exactly the dumped forward output."""
    dump = read_dump(dump_dir / "dump.json")
    same = {}
    for record in dump.records:
        info = registry.lookup(record.api_type, record.bare_name)
        func = registry.resolve(record.api_type, record.bare_name, info)
        args, kwargs = ArgBuilder(dump.data_dir, torch.Generator()).build(record.forward)
        side = execute.Side("cpu", {}, info.hf32)
        assert func is not None
        out = execute.plain(execute.run_forward(func, side, args, kwargs, seed=0, autocast=None))
        expected = torch.load(dump.data_dir / record.forward["output"][0]["data_name"], weights_only=True)
        same[record.name] = bool(torch.equal(out, expected))
    return same


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("cnn")
    dump = copy_fixture("cnn_tensor_L1", base)
    out = base / "out"
    rc = pytest.main(
        [
            "-q",
            "-p",
            "no:cacheprovider",
            "--msprobe-dump",
            str(dump),
            "--msprobe-out",
            str(out),
            "--rootdir",
            str(base),
            "-W",
            "ignore",
        ]
    )
    assert rc == 0
    return dump, out


def test_same_api_list_and_verdicts_as_upstream(replayed: tuple[Path, Path]) -> None:
    _, out = replayed
    ours = read_csv(csv_pair(out)[0])
    theirs = read_csv(csv_pair(UPSTREAM)[0])
    assert ours == theirs


def test_forward_metrics_equal_upstream(replayed: tuple[Path, Path]) -> None:
    dump, out = replayed
    same_kernel = _kernel_reproduces_dump(dump)
    ours = read_csv(csv_pair(out)[1])
    theirs = read_csv(csv_pair(UPSTREAM)[1])
    assert ours[0] == theirs[0]
    assert [r[0] for r in ours] == [r[0] for r in theirs]
    exact: set[str] = set()
    for mine, ref in zip(ours[1:], theirs[1:]):
        api = mine[0].split(".forward.")[0].split(".backward.")[0]
        assert mine[:4] == ref[:4], mine[0]
        assert mine[21:] == ref[21:], mine[0]  # status and message
        assert [c == " " for c in mine] == [c == " " for c in ref], mine[0]  # same filled columns
        if ".forward." in mine[0] and same_kernel[api]:
            assert all(_same(a, b) for a, b in zip(mine, ref, strict=True)), (mine, ref)
            exact.add(api)
    assert exact >= EXACT_ANYWHERE


def _same(ours: str, theirs: str) -> bool:
    """Two CSV cells: the same text, or numbers equal to 1e-7 relative."""
    if ours == theirs:
        return True
    try:
        return float(ours) == pytest.approx(float(theirs), rel=1e-7)
    except ValueError:
        return False


def test_upstream_26x_dump_with_26x_routing_matches_26x_rows(tmp_path: Path) -> None:
    """A 26.x dump root (``step0/proc{pid}/``) replayed with ``--msprobe-routing 26.x``: 26.x's rows."""
    root = copy_fixture("v26_cnn_tensor_L1", tmp_path)
    out = tmp_path / "out"
    args = ["-q", "-p", "no:cacheprovider", "-W", "ignore", "--rootdir", str(tmp_path)]
    assert (
        pytest.main(
            [*args, "--msprobe-dump", str(root), "--msprobe-out", str(out), "--msprobe-routing", "26.x"]
        )
        == 0
    )
    upstream = DATA / "upstream_v26_acc_check_cpu_tensor_L1"
    assert read_csv(csv_pair(out)[0]) == read_csv(csv_pair(upstream)[0])
    ours = read_csv(csv_pair(out)[1])
    theirs = read_csv(csv_pair(upstream)[1])
    assert [r[0] for r in ours] == [r[0] for r in theirs]
    for mine, ref in zip(ours[1:], theirs[1:]):
        assert mine[:4] == ref[:4] and mine[21] == ref[21], mine[0]
        assert [c == " " for c in mine] == [c == " " for c in ref], mine[0]
