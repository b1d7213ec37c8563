"""The PyTorch dump service: turns captured calls into records of the :class:`DumpSession`.

One entry point, :meth:`TorchDumpService.on_api_call`, serves the function mode and every patch.
Forward records are built around the real call (inputs summarised *before* it, so in-place ops show
their inputs unmodified); the backward record comes from a hook on the ``grad_fn`` of the first
output tensor, which receives ``(grad_inputs, grad_outputs)`` of that autograd node: ``input`` =
grads w.r.t. the outputs, ``output`` = the node's input grads in ``next_functions`` order (upstream
8.1.1). A failure while recording goes to dump_error_info.log; the user's call always runs and returns.

The switch (start/stop/step) and the API record path, forward to backward, read best as one
sequence; the module path (:mod:`.modules`), the save path (:mod:`.debug_save`), the statistics batch
(:mod:`.stat_batch`) and token ranges (:mod:`.tokens`) are their own modules.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import torch

from msprobe.dump.api_families import FAMILIES, load_api_list
from msprobe.dump.config import DumpConfig
from msprobe.dump.pytorch import collectives
from msprobe.dump.pytorch.callsite import recover_call_args
from msprobe.dump.pytorch.capture import ApiKey, ApiTracer, Patcher, build_mode_table
from msprobe.dump.pytorch.debug_save import DebugSaver
from msprobe.dump.pytorch.encode import Encoder, quiet
from msprobe.dump.pytorch.module_backward import on_gradient
from msprobe.dump.pytorch.modules import ModuleDumper
from msprobe.dump.pytorch.mutation import call_mutates, written_tensors
from msprobe.dump.pytorch.nocompile import no_compile
from msprobe.dump.pytorch.recompute import FullRecomputation, in_graph_free_recomputation, in_recomputation
from msprobe.dump.pytorch.stat_batch import StatsBatch
from msprobe.dump.pytorch.stats import SummaryCache
from msprobe.dump.pytorch.tensor_io import TensorWriter
from msprobe.dump.pytorch.tokens import TokenRange
from msprobe.dump.pytorch.torch_compat import (
    coalescing_queues,
    holds_function_mode,
    pop_function_mode,
    push_function_mode,
    queued_since,
    running_backward,
    watch_version_counter_resets,
)
from msprobe.dump.pytorch.tree import first_tensor, tensors
from msprobe.dump.session import DumpSession, say_forked_child
from msprobe.dump.stack import capture_stack, clear_frames
from msprobe.dump.thread_flag import ThreadFlag
from msprobe.dump.writer import RankStore
from msprobe.formats.record_names import BACKWARD, FORWARD, api_record_name

log = logging.getLogger("msprobe")

_SKIP_FILES = (os.path.join("torch", "overrides.py"),)


def current_rank() -> int | None:
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return None


# In a forked child: whether torch.distributed was initialised when this process was forked (a rank's
# DataLoader or Pool worker shares its parent's rank, hence its parent's folder).
_distributed_at_fork = False


def _note_fork_in_child() -> None:
    global _distributed_at_fork
    try:
        _distributed_at_fork = current_rank() is not None
    except Exception:
        _distributed_at_fork = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_note_fork_in_child)


class TorchDumpService:
    """The dump of one process; also the :class:`~msprobe.dump.pytorch.recorder.Recorder` that the
    module and save paths record through."""

    # Our own capture code is running, per thread: a backward hook running in an autograd thread
    # must not silence the training thread's records (nor leave them silenced).
    _inside = ThreadFlag()

    def __init__(self, config: DumpConfig) -> None:
        self.config = config
        self.session = DumpSession(config, framework="pytorch")
        self.counter = self.session.counter
        self.filter = self.session.filter
        self.cache = SummaryCache()
        self.api_lists = load_api_list()
        handler = no_compile(self.on_api_call)
        self._node_hook = no_compile(self.on_backward)
        self._tensor_hook = no_compile(self._on_tensor_grad)
        self.tracer = ApiTracer(build_mode_table(self.api_lists), handler, self.on_untracked_write)
        # a patched binding gets the caller's own arguments: no call site to read them back from
        self.patcher = Patcher(no_compile(functools.partial(self.on_api_call, as_written=True)))
        self.patcher.patch_families(self.api_lists)
        self._operators = self.patcher.patches_while_on(self.api_lists)
        self._collective_prefixes = {f.prefix for f in FAMILIES if f.collective}
        self._mode_pushed = False
        self._mode_thread: int | None = None  # the thread whose function-mode stack holds ours
        self._mode_left_on: int | None = None  # ours is still there (stop() came from another thread)
        # One record at a time: backward hooks may run in autograd's threads while the training
        # thread records (a backward in a helper thread, an autograd device thread); never held
        # across the user's own call.
        self.lock = threading.RLock()
        self.writer: TensorWriter | None = None
        self.encoder: Encoder | None = None
        self.session.step_reset_hooks.append(self._reset_step)
        self._owner_thread = threading.get_ident()
        self._owner_pid = os.getpid()  # the process whose dump this is (a forked child's is not)
        self._child_said = False
        # which capture the level switches on; at mix, API records get a module parent
        self.modules_on, self.apis_on = config.records_modules, config.records_apis
        self.api_parents = self.modules_on and self.apis_on
        self.modules = ModuleDumper(self)
        self._full_recomputation = FullRecomputation()
        self._unwatch_version_resets: Callable[[], None] | None = None
        self.saver = DebugSaver(self)
        self.apis_suppressed = False  # between module_dump() and module_dump_end()
        self.module_dump_on = False
        self._tokens = TokenRange(self.session)
        self._recent_grads: Any = None
        self._backward_recorded: set[str] = set()  # backward records of this step (first pass kept)
        self._pending_calls: list[collectives.PendingCall] = []  # records waiting for their handles
        self._coalesced = collectives.Coalesced()  # records waiting for their coalescing managers

    # -- Recorder ---------------------------------------------------------------------------------
    @property
    def store(self) -> RankStore | None:
        return self.session.store

    @property
    def running(self) -> bool:
        return self.session.running

    def idle(self) -> bool:
        # a forked child (a Hogwild worker, os.fork) inherits our hooks: it must never record
        return not self.session.running or self._inside or os.getpid() != self._owner_pid

    def foreign_thread(self) -> bool:
        """Not the thread that called start(), and not running a backward pass (autograd's device
        threads run recomputations there): its forward calls (a logging or prefetch thread running
        the model) are not recorded, as its API calls are not."""
        if threading.get_ident() == self._owner_thread:
            return False
        return not running_backward()

    def _foreign_call(self, patched: bool) -> bool:
        """An API call in another thread than start()'s that is not ours to record. A call the function
        mode hands us runs in a thread carrying the mode (autograd's device threads inherit it). A
        patched operator (``Tensor.__mul__``) reaches us from any thread: in one running a backward it
        is ours only if the thread carries our mode too, not where a thread of the user's runs its own
        backward (a logging thread with a custom ``autograd.Function``), whose calls would take the
        training thread's record names."""
        if self.foreign_thread():
            return True
        return patched and not holds_function_mode(self.tracer)

    def enter(self) -> bool:
        self.lock.acquire()
        was, self._inside = self._inside, True
        return was

    def leave(self, was: bool) -> None:
        self._inside = was
        self.lock.release()

    def record_error(self, function: str, name: str, exc: BaseException) -> None:
        self.session.record_error(function, name, exc)

    # -- switch -----------------------------------------------------------------------------------
    def start(self, model: Any = None, token_range: tuple[int, int] | None = None) -> bool:
        # Forward calls are recorded in the thread and process that called start(): the function mode
        # is per thread anyway, and a forked DataLoader worker must not write into our files.
        if self._forked_child():
            return False
        self._owner_thread = threading.get_ident()
        if self.config.level == "debug":
            return False  # level debug records save() calls only
        on = self.session.start(current_rank)
        if self.session.finished:  # past the last step: the model is the user's alone again
            self.modules.remove()
        if on:
            self._forget_everything()  # written unseen since the last window, maybe without a version bump
            self._open_encoder()
            self._full_recomputation.enter()
            if self._unwatch_version_resets is None:
                self._unwatch_version_resets = watch_version_counter_resets(self._forget_written)
            if self.modules_on and model is not None:
                self.modules.register(model)
            self.modules.install()
            if token_range is not None:
                self._tokens.arm(model, token_range)
            if self.apis_on and not self._mode_pushed:
                self._pop_left_mode()
                for owner, attr, key in self._operators:
                    self.patcher.wrap(owner, attr, key)
                push_function_mode(self.tracer)
                collectives.watch_managers(self._adopt_coalesced)
                self._mode_pushed = True
                self._mode_thread = threading.get_ident()
        return on

    def open_for_save(self) -> bool:
        """debug level: make sure this step's folder and encoder exist (no start() needed)."""
        if self._forked_child():
            return False
        s = self.session
        if s.finished or not s.step_selected():
            return False
        s.resolve_rank(current_rank)
        if s.rank_excluded:
            return False
        if s.ensure_store() is None:
            return False
        # no dump window at level debug: the user's code ran since the last save() unseen (a fused
        # optimizer step writes parameters without a version bump), so nothing remembered is trusted
        self._forget_everything()
        self._open_encoder()
        return True

    def _forked_child(self) -> bool:
        """A forked child of the dumping process (a DataLoader worker running the user's collate, a
        Hogwild or Pool worker): its start() or save() would write into its parent's folder, beside
        its parent and its siblings (and lock their journal), so it records nothing, said once.
        A child that initialised torch.distributed itself after the fork (ranks started with the fork
        start method) has its own rank folder: the dump becomes its own. Any other child dumps nothing,
        even where its parent has not dumped yet: siblings (Hogwild or Pool workers) would share one
        folder, overwrite each other's files and wait on each other's journal lock."""
        pid = os.getpid()
        if pid == self._owner_pid:
            return False
        if not _distributed_at_fork and current_rank() is not None:
            self._owner_pid = pid
            s = self.session
            s.store, s.error_log, s.running = None, None, False  # the parent's, inert here
            s.rank_known = s.rank_excluded = False
            self.encoder = self.writer = None
            return False
        if not self._child_said:
            self._child_said = True
            say_forked_child(pid, self._owner_pid)
        return True

    def stop(self) -> None:
        if self._forked_child():
            return
        with self.lock:
            self._pop()
            self._recent_grads = None  # the window is closed: the last backward node's grads are the user's
            self.session.stop()

    def step(self) -> None:
        if self._forked_child():
            return
        with self.lock:
            self._pop()
            self.session.step()
            if self.session.finished:  # past the last step: the model is the user's alone again
                self.modules.remove()

    def close(self) -> None:
        """At exit: final json of the open step, journal removed."""
        if os.getpid() != self._owner_pid:
            return  # the atexit handler of a forked child: the files belong to the parent
        self._pop()
        self.session.running = False
        self.session.close_store()

    def _pop(self) -> None:
        self._coalesced.abandon()
        self._settle_futures()
        pending, self._pending_calls = self._pending_calls, []
        for call in pending:  # handles not waited for yet: waiting here could deadlock
            call.abandon()
        clear_frames()
        self._full_recomputation.leave()
        if self._unwatch_version_resets is not None:
            self._unwatch_version_resets()
            self._unwatch_version_resets = None
        self._tokens.disarm()
        self.modules.uninstall()
        self._pop_left_mode()
        if self._mode_pushed:
            collectives.unwatch_managers()
            if threading.get_ident() == self._mode_thread:
                pop_function_mode(self.tracer)
            else:  # a mode is per thread: only the thread that pushed it can take it off
                self._mode_left_on = self._mode_thread
                log.warning(
                    "msprobe: stop()/step() called from another thread than start(): API capture is "
                    "taken off that thread at its next start(), stop() or step()"
                )
            for owner, attr, _ in self._operators:
                self.patcher.restore(owner, attr)
            self._mode_pushed = False
        # The caches are emptied when the next window opens anyway; emptied now, they hold no weak
        # reference to the user's tensors between windows (torch.utils.swap_tensors, which
        # Module.to() uses under set_swap_module_params_on_conversion, refuses weakly referenced ones).
        self._forget_everything()

    def _pop_left_mode(self) -> None:
        if self._mode_left_on is not None and threading.get_ident() == self._mode_left_on:
            pop_function_mode(self.tracer)
            self._mode_left_on = None

    def _open_encoder(self) -> None:
        store = self.session.store
        if store is None:
            return
        tensor_dir = self.session.tensor_dir()
        if self.config.saves_tensors and (self.writer is None or self.writer.directory != tensor_dir):
            self.writer = TensorWriter(tensor_dir)
        enc = self.encoder
        if enc is None or enc.batch is not store.pending_values or enc.writer is not self.writer:
            batch = StatsBatch()
            store.pending_values = batch  # a store's batch: resolved before its records are encoded
            self.encoder = Encoder(self.cache, self.config.md5, self.writer, batch, self._save_filter())

    def _save_filter(self) -> Callable[[str], bool] | None:
        """statistics with a ``tensor_list``: the records whose tensors are saved too."""
        names = self.config.tensor_list
        if self.config.task != "statistics" or not names:
            return None
        return lambda record: any(s in record for s in names)

    def _reset_step(self) -> None:
        self._recent_grads = None
        self._backward_recorded.clear()
        self.saver.reset_step()
        self.modules.reset_step()
        self.writer = None  # the cache is emptied when the next window opens
        self.encoder = None

    # -- forward ----------------------------------------------------------------------------------
    def on_api_call(
        self,
        key: ApiKey,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        as_written: bool = False,
    ) -> Any:
        s = self.session
        if (
            self._inside
            or not s.running
            or self.encoder is None
            or self.apis_suppressed
            or (threading.get_ident() != self._owner_thread and self._foreign_call(as_written))
            or os.getpid() != self._owner_pid
        ):
            return func(*args, **kwargs)
        if not self.apis_on:
            # L0 records modules only (8.1.1 wraps APIs at L1 and mix): a patched family's call
            # (Distributed.*, NPU.*, a custom API) runs unrecorded; what it wrote is forgotten
            out = func(*args, **kwargs)
            self.on_untracked_write(args, kwargs)
            return out
        self._inside = True  # our own tensor code and the API's internals record nothing
        try:
            return self._record_call(key, func, args, kwargs, as_written)
        finally:
            self._inside = False

    def _record_call(
        self,
        key: ApiKey,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        as_written: bool = False,
    ) -> Any:
        with self.lock:
            name, index, record = self._record_inputs(key, func, args, kwargs, as_written)
        queues = coalescing_queues() if key[0] in self._collective_prefixes else None
        try:
            out = func(*args, **kwargs)
        except BaseException:
            # 8.1.1 collects an API's inputs when the call starts: a call that raises keeps an
            # inputs-only record (which names the input files the tensor task wrote), as in the
            # MindSpore dump
            with self.lock:
                self._record_failed_call(name, func, record)
            raise
        with self.lock:
            return self._record_outputs(name, index, key, func, args, kwargs, record, out, queues)

    def _record_failed_call(self, name: str, func: Callable[..., Any], record: dict[str, Any] | None) -> None:
        store = self.session.store
        if store is None:
            return
        try:
            self._store_call(store, name, func, record, sys._getframe(1))
        except Exception as exc:
            self.session.record_error("forward_input_data_collect", name, exc)

    def _store_call(
        self, store: Any, name: str, func: Callable[..., Any], record: dict[str, Any] | None, frame: Any
    ) -> None:
        """A forward call's construct entry (every call, recorded or not: 8.1.1 updates construct.json
        before its scope/list check) and, before the record (a batch written at its put then holds the
        whole record), the stack seen from ``frame``."""
        if self.api_parents:
            store.put_construct(name, self.modules.api_parent(FORWARD))
        if record is not None:
            code = getattr(func, "__code__", None)
            store.put_stack(name, capture_stack(frame, _SKIP_FILES, code))
            store.put(name, record)

    def _record_inputs(
        self,
        key: ApiKey,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        as_written: bool = False,
    ) -> tuple[str, int, dict[str, Any] | None]:
        s = self.session
        if self._coalesced:  # a coalescing manager may have run its collectives since
            self._coalesced.settle()
        if self._pending_calls:  # a future handed out (a DDP comm hook) may have completed since
            self._settle_futures()
        prefix, api = key
        index = s.counter.next(f"{prefix}.{api}")
        name = api_record_name(prefix, api, index, FORWARD)
        mode = self.config.data_mode
        fwd = mode.direction(FORWARD)
        record: dict[str, Any] | None = None
        in_ok = s.filter.check(name)  # always: a scope's range opens and closes on the names it sees
        if fwd and in_ok and mode.side("input"):
            if type(func) is types.FunctionType and not as_written:
                rec_args, rec_kwargs = recover_call_args(func, args, kwargs, bound=prefix == "Tensor")
            else:
                rec_args, rec_kwargs = args, kwargs
            record = self._inputs(name, rec_args, rec_kwargs)
        return name, index, record

    def _record_outputs(
        self,
        name: str,
        index: int,
        key: ApiKey,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        record: dict[str, Any] | None,
        out: Any,
        queues: dict[Any, int] | None = None,
    ) -> Any:
        s = self.session
        prefix, api = key
        mode = self.config.data_mode
        fwd = mode.direction(FORWARD)
        mutated = call_mutates(prefix, api, args, kwargs)
        if mutated:
            # what it wrote, or (batch_norm's running statistics & co., which bump no version counter)
            # every argument: forgotten with what else lives on that memory (a ``.data`` alias)
            written = written_tensors(prefix, api, args, kwargs)
            self._forget_tensors([*args, *kwargs.values()] if written is None else written)
        shown = out
        if prefix in self._collective_prefixes:
            shown = (*args, *kwargs.values())  # written in place: the record shows them after the op
            self._forget_collective(shown)
            coalescing = queued_since(queues)  # the groups that queued it: the rest ran at once
            if coalescing or collectives.written_later(api, func, out, args, kwargs):
                receives = api in collectives.WRITTEN_LATER_APIS
                return self._defer(
                    name, func, out, record, fwd and s.filter.check(name), shown, coalescing, receives
                )
        out_ok = fwd and s.filter.check(name) and mode.side("output")
        self._after(
            name, index, key, func, out, record, out_ok, shown, unwritten_args=() if mutated else args
        )
        return out

    def _forget_collective(self, shown: tuple[Any, ...]) -> None:
        self._forget_tensors(shown)
        self._forget_tensors(collectives.p2p_tensors(shown))

    def _defer(
        self,
        name: str,
        func: Any,
        out: Any,
        record: dict[str, Any] | None,
        fwd_ok: bool,
        shown: tuple[Any, ...],
        coalescing: tuple[Any, ...] = (),
        receives: bool = False,
    ) -> Any:
        """The record of a call whose tensors the op writes after it returned: its output is taken
        when the caller has waited on its handles, or left out at ``stop()`` if the caller had not.
        Inside a coalescing manager (``coalescing``: its process groups) the call returned no real
        handle: the record waits for the manager instead. A handle's ``get_future()`` waits for it
        first (as 8.1.1 waits inside the call), except for a point-to-point receive (``receives``:
        both ranks may receive first), whose future is watched instead."""
        store, encoder = self.session.store, self.encoder
        if store is None or encoder is None:
            return out
        if self.api_parents:
            store.put_construct(name, self.modules.api_parent(FORWARD))
        out_ok = fwd_ok and self.config.data_mode.side("output")
        if record is None and not out_ok:
            return out
        frames = capture_stack(sys._getframe(1), _SKIP_FILES, getattr(func, "__code__", None))
        kept = {} if record is None else record
        recomputed = in_recomputation() if record is None else False

        def finish(arrived: bool) -> None:
            was = self.enter()
            try:
                if arrived and out_ok:
                    self._forget_collective(shown)  # written since the call
                    with quiet():
                        kept["output"] = encoder.output(shown, name)
                elif out_ok:
                    not_waited = collectives.NotWaitedError()
                    self.session.record_error("forward_output_data_collect", name, not_waited)
                if record is None:  # data_mode without inputs: waited for or not, it says is_recompute
                    kept["is_recompute"] = recomputed
                store.put_stack(name, frames)
                store.put(name, kept)
            except Exception as exc:
                self.session.record_error("forward_output_data_collect", name, exc)
            finally:
                self.leave(was)

        if coalescing:
            self._coalesced.add(coalescing, collectives.PendingCall(finish, 1))
            return out
        handles, call = collectives.pending_handles(out, finish, wait_for_future=not receives)
        if not call.done:
            self._pending_calls.append(call)
        return handles

    def _settle_futures(self) -> None:
        for call in self._pending_calls:
            call.settle()
        self._pending_calls = [c for c in self._pending_calls if not c.done]

    def _adopt_coalesced(self, work: Any) -> Any:
        """The handle an ``async_ops=True`` coalescing manager keeps: its wait completes the records."""
        handle, call = self._coalesced.adopt(work)
        if call is not None:
            self._pending_calls.append(call)
        return handle

    def _forget_tensors(self, value: Any) -> None:
        for t in tensors(value):
            self.cache.forget(t)
            if self.writer is not None:
                self.writer.forget(t)

    def _forget_written(self, value: Any) -> None:
        """Tensors written behind their version counters' back (set back by torch's
        ``_unsafe_preserve_version_counter``): whatever we remember of them is stale."""
        was = self.enter()
        try:
            self._forget_tensors(value)
        finally:
            self.leave(was)

    def _forget_everything(self) -> None:
        self.cache.clear()
        if self.writer is not None:
            self.writer.forget_all()

    def outermost_call_begins(self) -> None:
        """At level L0 no API call is seen, so no write between two module calls is: what ran since
        the last outermost one (an optimizer step, fused ones bumping no version counter; a
        ``p.data.clamp_()``) may have written what is remembered. Forgotten there, it is summarised
        and written again; within the call, a module's output stays the next one's input."""
        if not self.apis_on:
            self._forget_everything()

    def on_untracked_write(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A call that writes its arguments without bumping their version counters (a fused
        optimizer step, GradScaler's unscale): whatever we remember of them is stale."""
        self._forget_tensors([*args, *kwargs.values()])

    def _inputs(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        assert self.encoder is not None
        try:
            with quiet():
                return {
                    "input_args": self.encoder.args(args, name),
                    "input_kwargs": self.encoder.kwargs(kwargs, name),
                    "is_recompute": in_recomputation(),
                }
        except Exception as exc:
            self.session.record_error("forward_input_data_collect", name, exc)
            return None

    def _after(
        self,
        name: str,
        index: int,
        key: ApiKey,
        func: Any,
        out: Any,
        record: dict[str, Any] | None,
        out_ok: bool,
        shown: Any = None,
        unwritten_args: tuple[Any, ...] = (),
    ) -> None:
        s = self.session
        store = s.store
        if store is None or self.encoder is None:
            return
        if out_ok:
            try:
                with quiet():
                    encoded = self.encoder.output(out if shown is None else shown, name)
                if record is None:  # data_mode without inputs: the record still says is_recompute
                    record = {"output": encoded, "is_recompute": in_recomputation()}
                else:
                    record["output"] = encoded
            except Exception as exc:
                s.record_error("forward_output_data_collect", name, exc)
        self._store_call(store, name, func, record, sys._getframe(1))
        if self.config.data_mode.direction(BACKWARD):
            try:
                self._attach_backward(out, api_record_name(*key, index, BACKWARD), unwritten_args)
            except Exception as exc:
                s.record_error("backward_hook_register", name, exc)

    # -- backward ---------------------------------------------------------------------------------
    def _attach_backward(self, out: Any, name: str, unwritten_args: tuple[Any, ...] = ()) -> None:
        """A hook on the node that made the first output tensor; for a call that returned one of
        the positional arguments it did not write (dropout with p=0, a no-op ``to``), a node made
        before the call, a hook on that tensor instead: its gradient is the call's, in and out."""
        t = first_tensor(out)
        if t is None or not t.requires_grad or not torch.is_grad_enabled():
            return
        node = t.grad_fn
        if node is None:  # a leaf: its hooks outlive the step (a parameter's ``float()``)
            return
        for a in unwritten_args:
            if a is t:
                if in_graph_free_recomputation():
                    # the tensor is the original forward's, whose own call hooked it already: a second
                    # hook would give the same gradient a second backward record
                    return
                on_gradient(t, functools.partial(self._tensor_hook, name, self.session.loop))
                return
        # one compile-disabled entry point for every node (a disable wrapper per call is costly)
        node.register_hook(functools.partial(self._node_hook, name, self.session.loop))

    def _on_tensor_grad(self, name: str, loop: int, grad: torch.Tensor | None) -> None:
        if grad is None:  # the tensor's node ran without a gradient for it: no backward through the call
            return
        self.on_backward(name, loop, (grad,), (grad,))

    def on_backward(self, name: str, loop: int, grad_inputs: Any, grad_outputs: Any) -> None:
        if os.getpid() != self._owner_pid:
            return  # a forked child running backward: not our process's dump
        if loop != self.session.loop:
            # the graph of an earlier step's forward, backpropagated in a later step's window: its
            # record is named from that step's counters and would take the name of this step's call
            return
        was = self.enter()
        try:
            self._record_backward(name, grad_inputs, grad_outputs)
        finally:
            self.leave(was)

    def _record_backward(self, name: str, grad_inputs: Any, grad_outputs: Any) -> None:
        s = self.session
        store = s.store
        if store is None or self.encoder is None:
            return
        if not s.filter.check(name):
            if self.api_parents:
                store.put_construct(name, self.modules.api_parent(BACKWARD))
            return
        if name in self._backward_recorded:
            # A second backward through the same call (double backward: ``autograd.grad(...,
            # create_graph=True)``, then ``backward()``): the record keeps the first pass, as the
            # module records do, and the files other records may name are not rewritten.
            return
        self._backward_recorded.add(name)
        mode = self.config.data_mode
        # Keep this node's grads alive until the next backward record: the next node's grad_outputs
        # are usually these very tensors, and a live object lets the summary cache recognise them.
        self._recent_grads = (grad_inputs, grad_outputs)
        try:
            with quiet():
                record: dict[str, Any] = {}
                if mode.side("input"):
                    record["input"] = self.encoder.grads(grad_outputs, name, "input")
                if mode.side("output"):
                    record["output"] = self.encoder.grads(grad_inputs, name, "output")
            if self.api_parents:
                store.put_construct(name, self.modules.api_parent(BACKWARD))
            store.put(name, record)
        except Exception as exc:
            s.record_error("backward_data_collect", name, exc)
