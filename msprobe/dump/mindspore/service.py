"""The MindSpore dump service: turns wrapped API calls, Primitive calls and Cell hooks into records.

All dump state lives in the core :class:`~msprobe.dump.session.DumpSession` (steps, switch, rank,
counters, scope/list filter, the rank folder and its json writers); this class only knows how to
observe MindSpore. A failure while recording goes to dump_error_info.log; the user's call always runs.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import mindspore as ms

from msprobe.dump.config import DumpConfig
from msprobe.dump.mindspore.backward import cell_backward_hook, hook_outputs, tensor_leaves
from msprobe.dump.mindspore.deferred import IN_PLACE_PREFIXES, Batch, is_inplace, mutator_names
from msprobe.dump.mindspore.encode import Encoder, TensorSaver
from msprobe.dump.mindspore.families import BY_PREFIX, ApiKey, Patcher, finish_collective, load_api_list
from msprobe.dump.mindspore.ms_compat import grad_recording
from msprobe.dump.session import RECORD_AT_ONCE, DumpSession, say_forked_child
from msprobe.dump.stack import capture_stack, clear_frames
from msprobe.dump.thread_flag import ThreadFlag
from msprobe.formats.record_names import BACKWARD, FORWARD, api_record_name, module_backward_name

log = logging.getLogger("msprobe")


def current_rank() -> int | None:
    """``get_rank()`` when MindSpore communication is initialised, else None (folder ``rank``)."""
    try:
        from mindspore.communication import GlobalComm, get_rank

        if GlobalComm.INITED:
            return int(get_rank())
    except Exception:  # no communication support in this build
        return None
    return None


class MsDumpService:
    # True while the tool itself (or a wrapped API) runs: nested calls pass through. Per thread: a
    # logging thread's call must not silence the training thread's records (nor leave them silenced).
    inside = ThreadFlag()

    def __init__(self, config: DumpConfig) -> None:
        self.config = config
        self.session = DumpSession(config, framework="mindspore")
        # records are stored once their statistics batch (:mod:`.deferred`) is done: journaled at once
        self.session.store_batching = RECORD_AT_ONCE
        self.patcher = Patcher(self.on_api_call)
        self.encoder: Encoder | None = None
        self._owner_thread: int | None = None  # the thread that called start(): the one recorded
        # One record at a time: stop()/step() may come from another thread than the one recording.
        self.lock = threading.RLock()
        self.cell_stack: list[str] = []  # open Cell forward records (construct.json parents at mix)
        self.session.step_reset_hooks.append(self._reset_step)
        self.step_reset: list[Callable[[], None]] = []
        self.window_opened: list[Callable[[], None]] = []  # start() opened a dump window
        self.window_closed: list[Callable[[], None]] = []  # stop() or step() closed it
        self.batch = Batch(self._store_put, self._batch_error)
        self._pid = os.getpid()  # the process whose dump this is (a forked child's is not: _forked_child)
        self._child_said = False
        if config.records_apis:
            self.api_count = self.patcher.patch_families(load_api_list())
        else:
            self.api_count = 0
        if config.records_calls:
            self._guard_mutators()

    # -- switch -----------------------------------------------------------------------------------
    def foreign_thread(self) -> bool:
        """Not the thread that called start(): its calls (a logging thread running the net, a helper
        thread's value_and_grad, whose backward hooks run in that thread) are neither recorded nor
        counted, and leave the training thread's stacks alone."""
        return self._owner_thread is not None and threading.get_ident() != self._owner_thread

    def foreign_process(self) -> bool:
        """Not the process whose dump this is (a forked child that did not take the dump over)."""
        return os.getpid() != self._pid

    @property
    def running(self) -> bool:
        return (
            self.session.running
            and self.encoder is not None
            and os.getpid() == self._pid
            and not self.foreign_thread()
        )

    def _forked_child(self) -> bool:
        """A forked child of the dumping process calling the debugger itself (a Hogwild-style worker's
        start()/stop()/step(), a worker's save()): it would write into its parent's folders (new
        step folders, tensor files) and read its parent's queued tensors, which hangs in a forked
        child. It records nothing, said once, also where its parent has not dumped yet: sibling workers
        would share one folder."""
        pid = os.getpid()
        if pid == self._pid:
            return False
        if not self._child_said:
            self._child_said = True
            say_forked_child(pid, self._pid)
        return True

    def start(self) -> bool:
        if self._forked_child():
            return False
        with self.lock:
            on = self.session.start(current_rank)
            if on:
                self._owner_thread = threading.get_ident()
                self._open_encoder()
                for hook in self.window_opened:
                    hook()
            return on

    # A flush raises the program's own error that surfaced at one of our reads (deferred.Batch.flush),
    # after writing the batch: the switch below still happens.
    def stop(self) -> None:
        if self._forked_child():
            return
        with self.lock:
            try:
                self.batch.flush()
            finally:
                clear_frames()
                # Cells a Ctrl-C left open (MindSpore runs no hook for a KeyboardInterrupt): the next
                # window's calls must not take them as parents
                self.cell_stack.clear()
                self.session.stop()
                self._window_closed()

    def step(self) -> None:
        if self._forked_child():
            return
        with self.lock:
            try:
                self.batch.flush()
            finally:
                clear_frames()
                self.session.step()
                self._window_closed()

    def _window_closed(self) -> None:
        for hook in self.window_closed:
            hook()

    def close(self) -> None:
        if os.getpid() != self._pid:
            return  # the exit of a forked child: the files are the parent's
        with self.lock:
            try:
                self.batch.flush()
            finally:
                self.session.running = False
                self.session.close_store()

    def _open_encoder(self) -> None:
        if self.encoder is not None:
            return
        saver = TensorSaver(self.session.tensor_dir()) if self.config.saves_tensors else None
        save_filter = None
        if self.config.task == "statistics" and self.config.tensor_list:
            names = self.config.tensor_list
            save_filter = lambda record: any(s in record for s in names)  # noqa: E731
        defer = self.config.records_calls and self.config.task != "tensor"
        self.encoder = Encoder(self.config.md5, saver, save_filter, defer=defer)

    def _reset_step(self) -> None:
        self.encoder = None
        self.cell_stack.clear()
        for hook in self.step_reset:
            hook()

    def _guard_mutators(self) -> None:
        """In-place Tensor methods that are not recorded still write the pending batch first."""

        def flush_then_call(
            key: ApiKey, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Any:
            if self.batch.queue:
                with self.lock:
                    self.batch.flush()
            return func(*args, **kwargs)

        for owner in (ms.Tensor, ms.Parameter):
            for name in mutator_names(owner):
                if not self.patcher.is_wrapped(owner, name):
                    self.patcher.wrap(owner, name, ("", name), flush_then_call)

    def check(self, name: str) -> bool:
        """scope/list filter (inside a Cell named by a ``list`` entry at mix everything passes)."""
        return self.session.filter.check(name)

    # -- shared record helpers ----------------------------------------------------------------------
    def put(self, name: str, record: Any) -> None:
        """Queue a record (its statistics are computed with its batch, in collection order)."""
        with self.lock:
            if self.encoder is not None and self.encoder.defer:
                self.batch.add(name, record)
            else:
                self._store_put(name, record)

    def _store_put(self, name: str, record: Any) -> None:
        store = self.session.store
        if store is not None:
            store.put(name, record)

    def _batch_error(self, name: str, exc: BaseException) -> None:
        self.session.record_error("statistics_data_collect", name, exc)

    @property
    def structure_only(self) -> bool:
        return self.config.task == "structure"

    @property
    def records_structure(self) -> bool:
        return self.config.records_modules

    def parent(self) -> str | None:
        return self.cell_stack[-1] if self.cell_stack else None

    def put_construct(self, name: str, parent: str | None) -> None:
        with self.lock:
            store = self.session.store
            if store is not None and self.records_structure:
                store.put_construct(name, parent)

    def encode_inputs(
        self, name: str, args: Any, kwargs: dict[str, Any], eager: bool = False
    ) -> dict[str, Any] | None:
        """``eager``: summarise now, not with the batch (an in-place call is about to change them)."""
        assert self.encoder is not None
        self.inside = True
        defer = self.encoder.defer
        if eager:
            self.encoder.defer = False
        try:
            return {
                "input_args": self.encoder.args(args, name),
                "input_kwargs": self.encoder.kwargs(kwargs, name),
            }
        except Exception as exc:
            self.session.record_error("forward_input_data_collect", name, exc)
            return None
        finally:
            self.encoder.defer = defer
            self.inside = False

    def finish_forward(
        self,
        name: str,
        record: dict[str, Any] | None,
        out: Any,
        out_ok: bool,
        extra: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        store = self.session.store
        if store is None or self.encoder is None:
            return
        self.inside = True
        try:
            if out_ok:
                try:
                    record = {} if record is None else record
                    record["output"] = self.encoder.output(out, name)
                except Exception as exc:
                    self.session.record_error("forward_output_data_collect", name, exc)
            if extra is not None and record is not None:
                try:  # a Cell's ``parameters``: in every forward record, as 8.1.1's analyze_forward
                    extra(record)
                except Exception as exc:
                    self.session.record_error("forward_output_data_collect", name, exc)
            # the stack first: where each record is journaled as it is stored, the record's write
            # takes its stack along (stored after, it waited for the next record, and a kill lost it)
            if record is not None or (self.structure_only and self.check(name)):
                frames = capture_stack(sys._getframe(1))
                with self.lock:
                    if self.session.store is store:  # not closed meanwhile by step() from another thread
                        store.put_stack(name, frames)
            if record is not None:
                self.put(name, record)
        finally:
            self.inside = False

    def put_backward(self, name: str, grad_inputs: Any, grad_outputs: Any) -> bool:
        """``input`` = grads w.r.t. the outputs, ``output`` = grads w.r.t. the inputs; True if recorded."""
        s = self.session
        store = s.store
        if store is None or self.encoder is None or not self.check(name):
            return False
        if self.structure_only:
            return True  # task structure: construct.json only (8.1.1 updates it before analysing)
        mode = self.config.data_mode
        self.inside = True
        try:
            record: dict[str, Any] = {}
            if mode.side("input"):
                record["input"] = self.encoder.args(list(grad_outputs), name, "input")
            if mode.side("output"):
                record["output"] = self.encoder.args(list(grad_inputs), name, "output")
            self.put(name, record)
            return True
        except Exception as exc:
            s.record_error("backward_data_collect", name, exc)
            return False
        finally:
            self.inside = False

    # -- wrapped APIs -------------------------------------------------------------------------------
    def on_api_call(
        self, key: ApiKey, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        s = self.session
        if self.inside or not self.running:
            return func(*args, **kwargs)
        prefix, api = key
        inplace = is_inplace(api)
        if inplace:
            with self.lock:  # queued records may hold the tensor this call is about to change
                self.batch.flush()
        index = s.counter.next(f"{prefix}.{api}")
        name = api_record_name(prefix, api, index, FORWARD)
        mode = self.config.data_mode
        fwd = mode.direction(FORWARD)
        record = None
        if fwd and not self.structure_only and self.check(name) and mode.side("input"):
            record = self.encode_inputs(name, args, kwargs, eager=inplace)
        parent = self.parent()
        hook = None
        bname = api_record_name(prefix, api, index, BACKWARD)
        # no backward hook on MindSpore's writing ops (assign*, scatter_*, inplace_*): the hook hands
        # the op views of its inputs, which it refuses ("Not support view input for inplace op Assign")
        writes = api.startswith(IN_PLACE_PREFIXES)
        if mode.direction(BACKWARD) and not writes and grad_recording() and tensor_leaves(args):
            try:
                hook = cell_backward_hook(bname, lambda gi, go: self.api_backward(bname, parent, gi, go))
            except Exception as exc:
                s.record_error("backward_hook_register", name, exc)
        self.inside = True
        try:
            if hook is not None:
                out = func(*hook(args), **kwargs)
                out = hook_outputs(hook, out)
            else:
                out = func(*args, **kwargs)
        except BaseException:
            self.inside = False
            if record is not None:  # 8.1.1 keeps the inputs collected before the call raised
                self.put_construct(name, parent)
                self.finish_forward(name, record, None, False)
            raise
        finally:
            self.inside = False
        family = BY_PREFIX.get(prefix)
        recorded = out
        if family is not None and family.collective:
            out, recorded = finish_collective(family, api, out, args, kwargs)
        if record is not None or fwd:  # before the record, whose write takes it along (see finish_forward)
            self.put_construct(name, parent)
        self.finish_forward(
            name,
            record,
            recorded,
            fwd and not self.structure_only and self.check(name) and mode.side("output"),
        )
        return out

    def api_backward(self, name: str, fwd_parent: str | None, gi: Any, go: Any) -> None:
        self.put_backward(name, gi, go)
        # construct.json keeps the calls a filter leaves out (8.1.1 updates it before the scope check)
        self.put_construct(name, module_backward_name(fwd_parent))
