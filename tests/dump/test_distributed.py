"""torch.distributed with 2 gloo processes on CPU: rank folders, Distributed.* records, rank filter."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent(
    """
    import sys, torch, torch.distributed as dist
    from msprobe.pytorch import PrecisionDebugger
    rank = int(sys.argv[1])
    dbg = PrecisionDebugger(config_path=sys.argv[2])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    x = torch.full((3,), float(rank + 1))
    dbg.start()
    dist.all_reduce(x)
    dist.broadcast(x, src=0)
    out = [torch.zeros(3), torch.zeros(3)]
    dist.all_gather(out, x)
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    dist.barrier()
    torch.relu(x)
    if hasattr(dist, "all_gather_single"):  # FSDP2's collectives (torch >= 2.13)
        gathered, shard = torch.zeros(2), torch.zeros(1)
        dist.all_gather_single(gathered, torch.full((1,), float(rank + 1)))
        dist.reduce_scatter_single(shard, torch.ones(2))
    dbg.stop()
    dist.destroy_process_group()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(tmp_path: Path, worker: str, **config: object) -> Path:
    """``worker`` on two gloo ranks, dumping with ``config``; the step0 folder of the dump."""
    out = tmp_path / "dump"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(out), **config}))
    env = dict(os.environ, PYTHONPATH=str(REPO), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", worker, str(r), str(cfg)], env=env, stderr=subprocess.PIPE, text=True
        )
        for r in (0, 1)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    return out / "step0"


def run_pair(tmp_path: Path, ranks: list[int]) -> Path:
    return run_ranks(tmp_path, WORKER, rank=ranks, level="L1")


@pytest.mark.slow
def test_two_gloo_ranks(tmp_path: Path) -> None:
    step = run_pair(tmp_path, [])
    assert sorted(os.listdir(step)) == ["rank0", "rank1"]
    for rank in (0, 1):
        data = json.loads((step / f"rank{rank}" / "dump.json").read_text())["data"]
        assert list(data)[:5] == [
            "Distributed.all_reduce.0.forward",
            "Distributed.broadcast.0.forward",
            "Distributed.all_gather.0.forward",
            "Distributed.all_reduce.1.forward",
            "Distributed.barrier.0.forward",
        ]
        ar = data["Distributed.all_reduce.0.forward"]
        assert ar["input_args"][0]["Max"] == float(rank + 1)  # before the collective: the rank's own value
        assert ar["output"][0]["Max"] == 3.0  # after: 1 + 2, read from the in-place argument
        gather = data["Distributed.all_gather.0.forward"]["output"][0]
        assert [t["Max"] for t in gather] == [3.0, 3.0]
        assert data["Distributed.all_reduce.1.forward"]["input_kwargs"]["async_op"] == {
            "type": "bool",
            "value": True,
        }
        assert data["Distributed.all_reduce.1.forward"]["output"][0]["Max"] == 6.0
        assert "Torch.relu.0.forward" in data
        if hasattr(torch.distributed, "all_gather_single"):
            assert data["Distributed.all_gather_single.0.forward"]["output"][0]["Min"] == 1.0
            assert data["Distributed.reduce_scatter_single.0.forward"]["output"][0]["Max"] == 2.0


@pytest.mark.slow
def test_rank_filter(tmp_path: Path) -> None:
    step = run_pair(tmp_path, [1])
    assert sorted(os.listdir(step)) == ["rank1"]


DTENSOR_WORKER = textwrap.dedent(
    """
    import sys, torch, torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh
    from msprobe.pytorch import PrecisionDebugger
    rank = int(sys.argv[1])
    dbg = PrecisionDebugger(config_path=sys.argv[2])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    gen = torch.Generator().manual_seed(0)
    weight = torch.nn.Parameter(distribute_tensor(torch.randn(128, 64, generator=gen), mesh, [Shard(0)]))
    x = distribute_tensor(torch.randn(32, 64, generator=gen), mesh, [Replicate()])
    dbg.start()
    F.linear(x, weight).square().mean().backward()
    dbg.stop()
    dist.destroy_process_group()
    """
)


def test_dtensors_are_recorded_as_this_ranks_shard(tmp_path: Path) -> None:
    """FSDP2 / tensor parallel: a DTensor is summarised as the shard its rank holds (no collective),
    forward and backward, with nothing in the error log."""
    import torch

    step = run_ranks(tmp_path, DTENSOR_WORKER, level="L1")
    gen = torch.Generator().manual_seed(0)
    full = torch.randn(128, 64, generator=gen)
    for rank in (0, 1):
        rank_dir = step / f"rank{rank}"
        assert not (rank_dir / "dump_error_info.log").exists()
        data = json.loads((rank_dir / "dump.json").read_text())["data"]
        shard = full[64 * rank : 64 * (rank + 1)]
        weight = data["Functional.linear.0.forward"]["input_args"][1]
        assert weight["shape"] == [64, 64] and weight["requires_grad"] is True
        own = [shard.amax().item(), shard.amin().item(), shard.mean().item(), shard.norm().item()]
        assert [weight["Max"], weight["Min"], weight["Mean"], weight["Norm"]] == own
        assert data["Functional.linear.0.backward"]["input"][0]["Max"] is not None


FSDP2_WORKER = textwrap.dedent(
    """
    import sys, torch, torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from msprobe.pytorch import PrecisionDebugger
    from tests import zoo
    rank = int(sys.argv[1])
    dbg = PrecisionDebugger(config_path=sys.argv[2])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = zoo.build("llama")
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids, labels = zoo.batch()
    dbg.start(model=model)
    model(input_ids=ids, labels=labels).loss.backward()
    opt.step()
    dbg.stop()
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["L1", "mix"])
def test_fsdp2_llama_step_is_dumped_on_every_rank(tmp_path: Path, level: str) -> None:
    """A transformers Llama sharded with FSDP2 (DTensor parameters, AdamW on their shards): every
    rank dumps the whole step, optimizer included, with nothing in the error log."""
    step = run_ranks(tmp_path, FSDP2_WORKER, level=level)
    for rank in (0, 1):
        rank_dir = step / f"rank{rank}"
        assert not (rank_dir / "dump_error_info.log").exists()
        data = json.loads((rank_dir / "dump.json").read_text())["data"]
        assert any(name.startswith("Functional.embedding.0.forward") for name in data)
        updates = [v for name, v in data.items() if name.startswith("Tensor.lerp_.")]  # AdamW's
        assert updates and all(v["output"][0]["Max"] is not None for v in updates)


P2P_WORKER = textwrap.dedent(
    """
    import faulthandler, sys, torch, torch.distributed as dist
    from msprobe.pytorch import PrecisionDebugger
    faulthandler.dump_traceback_later(120, exit=True)  # a hang fails the test instead of blocking it
    rank = int(sys.argv[1])
    peer = 1 - rank
    dbg = PrecisionDebugger(config_path=sys.argv[2])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    dist.P2POp(dist.isend, torch.zeros(1), peer)  # Megatron's pipeline: P2POp checks the function
    mine = torch.full((2,), 10.0 * (rank + 1))
    dbg.start()
    # both ranks send first, then receive: waiting inside isend would deadlock
    send = dist.isend(mine, peer)
    got = torch.zeros(2)
    dist.recv(got, peer)
    send.wait()
    # both ranks receive first, then send: waiting inside irecv (as 8.1.1 does) would deadlock
    got2 = torch.zeros(2)
    reqs = [dist.irecv(got2, peer), dist.isend(mine, peer)]
    for r in reqs:
        r.wait()
    assert reqs[0].is_completed()  # the caller's own handle, waited for by the caller
    got3 = torch.zeros(2)
    ops = [dist.P2POp(dist.isend, mine, peer), dist.P2POp(dist.irecv, got3, peer)]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    summed = torch.ones(2)
    dist.all_reduce(summed, dist.ReduceOp.SUM, None, True).wait()  # async_op by position
    late = torch.zeros(2)
    unwaited = dist.irecv(late, peer)  # waited for only after stop(): the dump must not wait for it
    dist.send(mine, peer)
    dbg.stop()
    unwaited.wait()
    assert got.tolist() == got2.tolist() == got3.tolist() == late.tolist() == [10.0 * (peer + 1)] * 2
    assert summed.tolist() == [2.0, 2.0]
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_point_to_point_calls_run_as_without_the_dump_and_record_what_arrived(tmp_path: Path) -> None:
    step = run_ranks(tmp_path, P2P_WORKER, level="L1")
    for rank in (0, 1):
        data = json.loads((step / f"rank{rank}" / "dump.json").read_text())["data"]
        peer_value = 10.0 * (2 - rank)
        irecv = data["Distributed.irecv.0.forward"]["output"][0]
        batch = data["Distributed.batch_isend_irecv.0.forward"]["output"][0][1]["tensor"]
        reduced = data["Distributed.all_reduce.0.forward"]["output"][0]
        assert (irecv["Max"], irecv["Min"]) == (peer_value, peer_value)
        assert (batch["Max"], batch["Min"]) == (peer_value, peer_value)
        assert (reduced["Max"], reduced["Min"]) == (2.0, 2.0)
        late = data["Distributed.irecv.1.forward"]
        assert late["input_args"][0]["Max"] == 0.0 and "output" not in late  # not waited for by stop()
        assert "not waited for before stop()" in (step / f"rank{rank}" / "dump_error_info.log").read_text()


class _FakeWork:
    def __init__(self) -> None:
        self.waits = 0

    def wait(self, timeout: object = None) -> bool:
        self.waits += 1
        return True

    def is_completed(self) -> bool:
        return self.waits > 0


def test_a_batch_record_is_finished_once_when_every_handle_was_waited_for() -> None:
    from msprobe.dump.pytorch.collectives import pending_handles

    finished: list[bool] = []
    works = [_FakeWork(), _FakeWork()]
    handles, call = pending_handles(works, finished.append)
    handles[0].wait()
    handles[0].wait()  # a second wait of the same handle is not the other handle's
    assert finished == [] and not call.done
    handles[1].wait()
    assert finished == [True] and [w.waits for w in works] == [2, 1] and handles[1].is_completed()
    call.abandon()  # stop() after the waits changes nothing
    assert finished == [True]


def test_a_record_not_waited_for_by_stop_is_finished_without_its_output() -> None:
    from msprobe.dump.pytorch.collectives import pending_handles

    finished: list[bool] = []
    handle, call = pending_handles(_FakeWork(), finished.append)
    call.abandon()
    handle.wait()  # the caller's wait after stop() still waits, and records nothing
    assert finished == [False] and handle.is_completed()


COALESCING_WORKER = textwrap.dedent(
    """
    import sys, torch, torch.distributed as dist
    from torch.distributed import _coalescing_manager
    from msprobe.pytorch import PrecisionDebugger
    rank = int(sys.argv[1])
    dbg = PrecisionDebugger(config_path=sys.argv[2])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    a, b = torch.full((4,), float(rank + 1)), torch.full((3,), 10.0 * (rank + 1))
    c, d = torch.full((2,), float(rank + 1)), torch.full((2,), float(rank + 1))
    dbg.start()
    with _coalescing_manager():  # torch queues these and runs them as the manager exits
        dist.all_reduce(a)
        dist.all_reduce(b)
    torch.relu(a)
    with _coalescing_manager(async_ops=True) as cm:  # Megatron's distributed optimizer
        dist.all_reduce(c, async_op=True)
    c.mul_(1.0)  # before the wait: the record waits for cm.wait()
    cm.wait()
    other = dist.new_group([0, 1])
    e = torch.full((2,), float(rank + 1))
    with _coalescing_manager():
        dist.all_reduce(e, group=other)  # another group's: torch runs it at once
        e.add_(100.0)
    with _coalescing_manager(async_ops=True) as late:
        dist.all_reduce(d, async_op=True)
    dbg.stop()
    late.wait()
    assert a.tolist() == [3.0] * 4 and b.tolist() == [30.0] * 3 and c.tolist() == d.tolist() == [3.0] * 2
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_collectives_inside_a_coalescing_manager_record_what_the_manager_ran(tmp_path: Path) -> None:
    step = run_ranks(tmp_path, COALESCING_WORKER, level="L1")
    for rank in (0, 1):
        data = json.loads((step / f"rank{rank}" / "dump.json").read_text())["data"]
        outputs = [data[f"Distributed.all_reduce.{i}.forward"].get("output") for i in range(5)]
        # after the op, not before it; and the other group's as it ran, before the add_
        assert [o[0]["Max"] for o in outputs[:4]] == [3.0, 30.0, 3.0, 3.0]
        assert data["Distributed.all_reduce.4.forward"]["input_args"][0]["Max"] == rank + 1.0
        assert outputs[4] is None  # its manager's handle was waited for only after stop()
        assert "not waited for before stop()" in (step / f"rank{rank}" / "dump_error_info.log").read_text()
        # the records keep the order of the calls
        names = list(data)
        assert names.index("Distributed.all_reduce.1.forward") < names.index("Torch.relu.0.forward")


def test_a_coalesced_record_waits_for_its_manager_to_exit_and_for_the_managers_handle() -> None:
    from torch.distributed.distributed_c10d import _coalescing_manager

    from msprobe.dump.pytorch.collectives import Coalesced, PendingCall

    group = object()  # a manager with nothing queued needs no process group
    finished: list[str] = []
    coalesced = Coalesced()
    with _coalescing_manager(group):
        coalesced.add((group,), PendingCall(lambda ok: finished.append(f"plain {ok}"), 1))
        coalesced.settle()
        assert finished == [] and coalesced  # still queued: torch runs it as the manager exits
    coalesced.settle()
    assert finished == ["plain True"] and not coalesced
    with _coalescing_manager(group, async_ops=True):
        coalesced.add((group,), PendingCall(lambda ok: finished.append(f"async {ok}"), 1))
    work = _FakeWork()
    handle, call = coalesced.adopt(work)  # what the manager keeps for cm.wait()
    assert finished == ["plain True"] and call is not None and not coalesced
    handle.wait()
    assert finished == ["plain True", "async True"] and work.waits == 1
    with _coalescing_manager(group):
        coalesced.add((group,), PendingCall(lambda ok: finished.append(f"open {ok}"), 1))
        coalesced.abandon()  # stop() inside the manager
    assert finished[-1] == "open False" and coalesced.adopt(work) == (work, None)


COMM_HOOK_WORKER = textwrap.dedent(
    """
    import sys, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from msprobe.pytorch import PrecisionDebugger
    rank = int(sys.argv[1])
    dbg = PrecisionDebugger(config_path=sys.argv[2])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    x = torch.full((3,), float(rank + 1))
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(3, 1, bias=False))
    model.register_comm_hook(None, default_hooks.allreduce_hook)
    dbg.start()
    dist.all_reduce(x, async_op=True).get_future().wait()
    model(torch.full((1, 3), float(rank + 1))).sum().backward()
    dbg.stop()
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_a_collective_completed_through_its_future_records_its_output(tmp_path: Path) -> None:
    step = run_ranks(tmp_path, COMM_HOOK_WORKER, level="L1")
    for rank in (0, 1):
        data = json.loads((step / f"rank{rank}" / "dump.json").read_text())["data"]
        plain = data["Distributed.all_reduce.0.forward"]["output"][0]
        hooked = data["Distributed.all_reduce.1.forward"]["output"][0]  # the DDP comm hook's bucket
        assert (plain["Max"], plain["Min"]) == (3.0, 3.0)
        assert (hooked["Max"], hooked["Min"]) == (1.5, 1.5)  # (1 + 2) / 2: the averaged gradient
        assert not (step / f"rank{rank}" / "dump_error_info.log").exists()


CHAINED_WORKER = textwrap.dedent(
    """
    import sys, time, torch, torch.distributed as dist
    from msprobe.pytorch import PrecisionDebugger
    rank = int(sys.argv[1])
    dbg = PrecisionDebugger(config_path=sys.argv[2])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    x, y = torch.full((2,), float(rank + 1)), torch.full((2,), 10.0 * (rank + 1))
    dbg.start()
    if rank == 1:
        time.sleep(1.0)  # rank 0's future is still pending when it chains its callback
    def hook(g):  # PowerSGD chains its next all_reduce so, in a DDP communication hook (in backward)
        fut = dist.all_reduce(x, async_op=True).get_future()
        fut.then(lambda f: dist.all_reduce(y)).wait()
        return g
    w = torch.ones(1, requires_grad=True)
    w.register_hook(hook)
    (w * 2).sum().backward()
    dbg.stop()
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_a_collective_chained_on_a_future_is_recorded_on_every_rank(tmp_path: Path) -> None:
    step = run_ranks(tmp_path, CHAINED_WORKER, level="L1")
    for rank in (0, 1):
        data = json.loads((step / f"rank{rank}" / "dump.json").read_text())["data"]
        assert [k for k in data if k.startswith("Distributed.")] == [
            "Distributed.all_reduce.0.forward",
            "Distributed.all_reduce.1.forward",
        ]
        assert data["Distributed.all_reduce.1.forward"]["output"][0]["Max"] == 30.0


SEND_BEFORE_COLLECTIVE_WORKER = textwrap.dedent(
    """
    import sys, torch, torch.distributed as dist
    from msprobe.pytorch import PrecisionDebugger
    rank = int(sys.argv[1])
    dbg = PrecisionDebugger(config_path=sys.argv[2])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    x, t = torch.ones(2), torch.zeros(2)
    dbg.start()
    if rank == 0:  # rank 1 joins the all_reduce only after it received what rank 0 sends next
        fut = dist.all_reduce(x, async_op=True).get_future()
        dist.send(torch.ones(2), 1)
        fut.wait()
    else:
        dist.recv(t, 0)
        dist.all_reduce(x, async_op=True).get_future().wait()
    dbg.stop()
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_a_collectives_future_taken_before_its_peers_can_join_does_not_deadlock(tmp_path: Path) -> None:
    step = run_ranks(tmp_path, SEND_BEFORE_COLLECTIVE_WORKER, level="L1")  # hung: get_future() waited
    for rank in (0, 1):
        data = json.loads((step / f"rank{rank}" / "dump.json").read_text())["data"]
        assert data["Distributed.all_reduce.0.forward"]["output"][0]["Max"] == 2.0


OBJECT_LIST_WORKER = textwrap.dedent(
    """
    import sys, torch, torch.distributed as dist
    from msprobe.pytorch import PrecisionDebugger
    rank = int(sys.argv[1])
    dbg = PrecisionDebugger(config_path=sys.argv[2])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    dbg.start()
    objs = ["hello", rank]
    dist.broadcast_object_list(objs, src=0)
    dbg.stop()
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_a_collective_inside_another_c10d_function_records_its_own_arguments(tmp_path: Path) -> None:
    # every c10d function shares c10d_logger's wrapper code: the call site of broadcast_object_list
    # (called with src=) is not the one of the broadcast it makes
    step = run_ranks(tmp_path, OBJECT_LIST_WORKER, level="L1")
    for rank in (0, 1):
        data = json.loads((step / f"rank{rank}" / "dump.json").read_text())["data"]
        for name in ("Distributed.broadcast.0.forward", "Distributed.broadcast.1.forward"):
            record = data[name]
            assert record["input_args"][0]["type"] == "torch.Tensor", record["input_args"]
            assert "src" not in record["input_kwargs"]
            assert record["input_args"][0]["shape"] == record["output"][0]["shape"]


OUTPUT_ONLY_WORKER = textwrap.dedent(
    """
    import sys, torch, torch.distributed as dist
    import torch.utils.checkpoint as cp
    from msprobe.pytorch import PrecisionDebugger
    rank = int(sys.argv[1])
    dbg = PrecisionDebugger(config_path=sys.argv[2])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    x = torch.full((3,), float(rank + 1))

    def block(h):
        y = torch.tanh(h).clone()
        dist.all_reduce(y, async_op=True).wait()
        return y * 2

    dbg.start()
    dist.all_reduce(x, async_op=True).wait()
    cp.checkpoint(block, torch.ones(2, 3, requires_grad=True), use_reentrant=False).sum().backward()
    late = dist.all_reduce(x, async_op=True)
    dbg.stop()
    late.wait()
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_output_only_collective_records_say_is_recompute_waited_for_or_not(tmp_path: Path) -> None:
    """data_mode ["output"]: every forward record of an async collective says is_recompute (true in a
    checkpoint's recomputation), also the one whose handle was waited for only after stop() (it was
    an empty record, {})."""
    section = {"scope": [], "list": [], "data_mode": ["output"], "summary_mode": "statistics"}
    step = run_ranks(tmp_path, OUTPUT_ONLY_WORKER, level="L1", statistics=section)
    for rank in (0, 1):
        data = json.loads((step / f"rank{rank}" / "dump.json").read_text())["data"]
        reduces = {n: r for n, r in data.items() if n.startswith("Distributed.all_reduce.")}
        assert [r.get("is_recompute") for r in reduces.values()] == [False, False, True, False], reduces
        assert "output" not in reduces["Distributed.all_reduce.3.forward"]  # waited for after stop()
