"""Every shim of torch_compat works on the pinned torch, and no other msprobe module touches a private
torch API: a torch upgrade that removes or changes one fails here."""

from __future__ import annotations

import ast
import io
import warnings
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

import msprobe
from msprobe.dump.pytorch import torch_compat as tc

COMPAT = Path(tc.__file__).resolve()


class _Seen(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[object] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.calls.append(func)
        return func(*args, **(kwargs or {}))


def test_disable_torch_function_hides_calls_from_modes() -> None:
    seen = _Seen()
    with seen:
        torch.ones(2).sum()
        n = len(seen.calls)
        with tc.DisableTorchFunction():
            torch.ones(2).sum()
        assert len(seen.calls) == n > 0


def test_set_grad_enabled_raw() -> None:
    assert torch.is_grad_enabled()
    tc.set_grad_enabled_raw(False)
    try:
        assert not torch.is_grad_enabled()
    finally:
        tc.set_grad_enabled_raw(True)
    assert torch.is_grad_enabled()


def test_function_mode_stack_push_and_pop_from_below() -> None:
    ours, users = _Seen(), _Seen()
    before = tc.function_modes()
    tc.push_function_mode(ours)
    tc.push_function_mode(users)
    assert tc.function_modes() == [*before, ours, users]
    assert tc.holds_function_mode(ours) and tc.holds_function_mode(users)
    assert tc.function_modes() == [*before, ours, users]  # read in place: the stack is unchanged
    torch.ones(1).neg()
    assert users.calls and ours.calls  # both on the stack and dispatched to
    tc.pop_function_mode(ours)  # from below the user's mode, which stays
    assert tc.function_modes() == [*before, users]
    assert not tc.holds_function_mode(ours)
    tc.pop_function_mode(ours)  # not there: nothing happens
    tc.pop_function_mode(users)
    assert tc.function_modes() == before


def test_current_graph_task_id_says_whether_backward_runs() -> None:
    assert tc.current_graph_task_id is not None
    assert tc.current_graph_task_id() < 0
    assert tc.running_backward() is False
    inside: list[tuple[int, bool | None]] = []
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: inside.append((tc.current_graph_task_id(), tc.running_backward())))  # type: ignore[arg-type, func-returns-value]
    y.sum().backward()
    assert inside and inside[0][0] >= 0 and inside[0][1] is True


def test_will_run_says_which_nodes_the_running_backward_executes() -> None:
    a, b = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    ya, yb = a * 2, b * 3
    assert tc.will_run(ya.grad_fn)  # outside a backward pass
    seen: list[tuple[bool, bool]] = []
    ya.register_hook(lambda g: seen.append((tc.will_run(ya.grad_fn), tc.will_run(yb.grad_fn))))  # type: ignore[arg-type, func-returns-value]
    ya.sum().backward()
    assert seen == [(True, False)]


def test_sequence_nr_grows_with_creation() -> None:
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    z = y + 1
    assert tc.sequence_nr(y.grad_fn) < tc.sequence_nr(z.grad_fn)


def test_direct_parameters_equal_named_parameters_non_recursive() -> None:
    m = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    m.register_parameter("extra", torch.nn.Parameter(torch.ones(1)))
    m[0].register_parameter("bias", None)
    for mod in (m, m[0], m[1]):
        assert tc.direct_parameters(mod) == list(mod.named_parameters(recurse=False))

    class Custom(torch.nn.Linear):
        def named_parameters(self, *args, **kwargs):  # type: ignore[no-untyped-def, override]
            return iter([("only", self.weight)])

    assert tc.direct_parameters(Custom(2, 2))[0][0] == "only"


def test_local_shard() -> None:
    """Plain tensors and parameters are their own shard; DTensor keeps its shard in the slot read
    (a run on two ranks is in test_distributed)."""
    from torch.distributed.tensor import DTensor

    t, p = torch.ones(2), torch.nn.Parameter(torch.ones(2))
    assert tc.local_shard(t) is t and tc.local_shard(p) is p
    assert "_local_tensor" in DTensor.__slots__


def test_transform_shims_unwrap_and_set_transforms_aside() -> None:
    """Under vmap(grad(...)): the plain values under the wrappers, the first example, and plain
    results of our own operations while the transforms are set aside (and wrapped ones after)."""
    x = torch.arange(6.0).view(2, 3)
    seen: dict[str, object] = {}

    def f(t: torch.Tensor) -> torch.Tensor:
        seen["wrapped"] = torch._C._functorch.is_functorch_wrapped_tensor(t)
        saved = tc.set_transforms_aside()
        try:
            values, example = tc.transform_values(t)
            seen["values"], seen["example"] = values.clone(), example.clone()
            seen["plain_op"] = torch._C._functorch.is_functorch_wrapped_tensor(values * 2)
        finally:
            tc.restore_transforms(saved)
        seen["op_after"] = torch._C._functorch.is_functorch_wrapped_tensor(values * 2)
        return t.sum()

    torch.func.vmap(torch.func.grad(f))(x)
    assert seen["wrapped"] is True and seen["plain_op"] is False and seen["op_after"] is True
    assert torch.equal(seen["values"], x) and torch.equal(seen["example"], x[0])  # type: ignore[arg-type]
    assert tc.set_transforms_aside() is None  # no transform: nothing set aside
    plain = torch.ones(2)
    assert tc.transform_values(plain) == (plain, plain)


def test_eval_frame_hooks() -> None:
    get_callback, skip_code = tc.eval_frame_hooks()
    assert get_callback is not None and skip_code is not None
    assert get_callback() is None  # eager: no compiled frame runs

    def f() -> None:
        pass

    skip_code(f.__code__)


def test_lean_pt_writer_shims(tmp_path: Path) -> None:
    assert tc.PyTorchFileWriter is not None
    assert isinstance(tc.storage_alignment(), int) and tc.storage_alignment() > 0
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated, yet what torch.save pickles
        pid = tc.storage_persistent_id(t.storage())
    assert isinstance(pid, tuple) and pid[0] == "storage" and pid[2:] == ("0", "cpu", 6)
    assert tc.storage_persistent_id(object()) is None
    from msprobe.dump.pytorch.tensor_io import _LeanSaver

    buf = io.BytesIO()
    _LeanSaver().save(t, buf)  # type: ignore[arg-type]
    buf.seek(0)
    assert torch.equal(torch.load(buf, weights_only=True), t)


def test_dataloader_iter_class() -> None:
    cls = tc.dataloader_iter_class()
    loader = torch.utils.data.DataLoader([1, 2])
    assert isinstance(iter(loader), cls) and "__next__" in cls.__dict__


def test_coalescing_shims() -> None:
    from torch.distributed import distributed_c10d

    group = object()  # a manager with no collectives inside needs no initialised process group
    assert group not in tc.coalescing_groups()
    with distributed_c10d._coalescing_manager(group, async_ops=True) as cm:
        assert group in tc.coalescing_groups()
        assert isinstance(cm, tc.coalescing_manager_class())
        before = tc.coalescing_queues()
        assert before == {group: 0} and tc.queued_since(before) == ()
        distributed_c10d._world.pg_coalesce_state[group].append(object())  # what a queued call adds
        assert tc.queued_since(before) == (group,)
        distributed_c10d._world.pg_coalesce_state[group].clear()  # the manager runs nothing at exit
    assert group not in tc.coalescing_groups() and tc.queued_since(None) == ()


def test_tensor_version_counter() -> None:
    t = torch.zeros(2)
    v = t._version
    t.add_(1)
    assert t._version == v + 1


def test_share_version_counter_reads_view_bases() -> None:
    base = torch.zeros(4)
    view, other_view = base[:2], base.view(2, 2)
    assert tc.share_version_counter(view, base) and tc.share_version_counter(base, view)
    assert tc.share_version_counter(view, other_view)
    assert not tc.share_version_counter(base.data, base)  # ``.data``: a counter of its own
    assert not tc.share_version_counter(torch.zeros(2), torch.zeros(2))


def test_private_in_place_functions_lists_torchs_private_writers() -> None:
    found = tc.private_in_place_functions()
    assert torch._foreach_mul_ in found and torch.Tensor.add_ not in found
    assert all(callable(f) for f in found)


def test_wrap_engine_backward_sees_every_python_backward_and_undoes() -> None:
    seen: list[str] = []

    def wrap(run):  # type: ignore[no-untyped-def]
        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            seen.append("run")
            return run(*args, **kwargs)

        return counted

    undo = tc.wrap_engine_backward(wrap)
    assert undo is not None
    try:
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()
        torch.autograd.backward((x * 3).sum())
        torch.autograd.grad((x * 4).sum(), x)
    finally:
        undo()
    assert seen == ["run", "run", "run"]
    (x * 5).sum().backward()
    assert len(seen) == 3


def test_watch_version_counter_resets_reports_what_torch_sets_back() -> None:
    seen: list[object] = []
    buf = torch.zeros(3)
    undo = tc.watch_version_counter_resets(seen.append)
    assert undo is not None
    try:
        with torch.autograd._unsafe_preserve_version_counter(buf):
            torch.ops.aten.fill_.Scalar(buf, 1.0)
    finally:
        undo()
    assert len(seen) == 1 and any(t is buf for t in seen[0])  # type: ignore[attr-defined]
    with torch.autograd._unsafe_preserve_version_counter(buf):
        pass
    assert len(seen) == 1


def _private_torch_uses(path: Path) -> list[str]:
    """``torch._x`` attribute chains and ``from torch._x import``/``from torch.y import _z``."""
    found = []
    lines: set[int] = set()  # one report per line for nested attribute chains
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.lineno not in lines:
            chain = [node.attr]
            v: ast.expr = node.value
            while isinstance(v, ast.Attribute):
                chain.append(v.attr)
                v = v.value
            if isinstance(v, ast.Name) and v.id == "torch":
                parts = chain[::-1]
                if any(p.startswith("_") and not p.startswith("__") for p in parts):
                    lines.add(node.lineno)
                    found.append(f"{path.name}:{node.lineno}: torch.{'.'.join(parts)}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
            private_module = any(p.startswith("_") for p in node.module.split("."))
            private_name = any(a.name.startswith("_") for a in node.names)
            if private_module or private_name:
                found.append(f"{path.name}:{node.lineno}: from {node.module} import ...")
    return found


def test_the_scan_finds_private_uses(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("import torch\nfrom torch._C import x\nfrom torch.overrides import _g\ntorch._C._f()\n")
    assert len(_private_torch_uses(p)) == 3


def test_no_private_torch_api_outside_the_compat_module() -> None:
    root = Path(msprobe.__file__).resolve().parent
    found = [u for p in sorted(root.rglob("*.py")) if p != COMPAT for u in _private_torch_uses(p)]
    assert found == []
