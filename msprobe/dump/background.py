"""One background worker thread that runs jobs in submission order (deferred statistics, record writes).

Why: the training thread runs one intra-op thread, so on a multi-core host a second core is idle, and
both torch kernels and numpy reductions release the GIL. Summaries of a tensor (four memory passes)
and the record write that needs them can therefore run beside the training's next kernels.

Correctness rests on the caller: a queued tensor must not change before its job runs. The caller
calls :meth:`Worker.drain` (wait until every submitted job has run) before anything that may write
into a tensor it queued (an in-place API, a recorded API whose internals are invisible, a backward
pass, stop/step/exit). Jobs run strictly FIFO, so a record write queued after its statistics jobs
sees their values, and the journal order equals the submission order. A job that raises goes to
``on_error`` and the worker goes on.

Hand-over: waking the thread for every captured call costs more than the work it is woken for (a
futex wake, a context switch and a GIL hand-off on both sides, for every call of a step). Jobs are
therefore handed over in batches: at once when :data:`HANDOVER_JOBS` are waiting, otherwise within
:data:`HANDOVER_SECONDS`, and always at a drain.

Crash safety: a record reaches the journal within ``HANDOVER_SECONDS`` plus the worker's backlog
after the call; a SIGKILL can lose the records of that last window (``MSPROBE_STAT_THREAD=0``
writes every record before the call returns).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

# (fn, args, hint): ``hint`` is what the job will read, for ``before_group`` (None: nothing to say)
Job = tuple[Callable[..., Any], tuple[Any, ...], Any]
Batch = list[Job]

HANDOVER_JOBS = 32
# jobs per ``before_group`` call: work done ahead for a group delays its first job, which a drain may
# be waiting for
HINTED_JOBS = 16
HANDOVER_SECONDS = 0.002
_TICK: Batch = []  # queue item: "take what is waiting after HANDOVER_SECONDS" (compared by identity)


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def enabled_by_env() -> bool:
    """``MSPROBE_STAT_THREAD=0`` turns the worker off (every summary computed in the calling thread),
    ``=1`` forces it on; by default it is on where the process may use more than one CPU."""
    raw = os.environ.get("MSPROBE_STAT_THREAD", "").strip().lower()
    if raw in ("0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    return _usable_cpus() > 1


class Worker:
    """A daemon thread draining a FIFO of ``(fn, args, hint)`` jobs."""

    def __init__(
        self,
        on_error: Callable[[BaseException], None] | None = None,
        before_group: Callable[[list[Any]], None] | None = None,
        after_group: Callable[[], None] | None = None,
    ) -> None:
        """``before_group(hints)`` runs on the thread before each group of up to
        :data:`HINTED_JOBS` jobs, with the hints given to :meth:`submit` (work the jobs share can be
        done there at once); ``after_group()`` after them."""
        self._on_error = on_error
        self._before_group = before_group
        self._after_group = after_group
        self.submitted = 0
        self.done = 0
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._fresh_state()

    def _fresh_state(self) -> None:
        self._queue: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self._batch: Batch = []  # jobs not handed over yet
        self._batch_lock = threading.Lock()  # the thread takes the batch itself after a tick
        self._handed = 0.0  # time of the last hand-over
        self._tick_armed = False
        self._hurry = threading.Event()  # a drain wants the waiting jobs now
        self._idle = threading.Condition(threading.Lock())
        # the job count a draining thread waits for (0: nobody waits); the worker wakes it once, when
        # that count is reached, not after every job (a wake-up per job makes both threads fight for
        # the GIL while the backlog is worked off)
        self._wait_for = 0
        self._targets: list[int] = []

    @property
    def busy(self) -> bool:
        return self.submitted != self.done

    def in_worker(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, fn: Callable[..., Any], *args: Any, hint: Any = None) -> None:
        """Queue a job; it is handed to the thread by :meth:`kick` (soon) or a drain (now)."""
        self.submitted += 1
        with self._batch_lock:
            self._batch.append((fn, args, hint))

    def kick(self) -> None:
        """A record is complete: hand the waiting jobs over if enough wait or enough time passed,
        else make sure the thread takes them within ``HANDOVER_SECONDS``."""
        if not self._batch:
            return
        if self._thread is None or self._pid != os.getpid():
            self._start()
        if len(self._batch) >= HANDOVER_JOBS or time.perf_counter() - self._handed >= HANDOVER_SECONDS:
            self._handover()
        elif not self._tick_armed:
            self._tick_armed = True
            self._queue.put(_TICK)

    def _handover(self) -> None:
        with self._batch_lock:  # swap and enqueue as one step: two hand-overs keep their order
            batch, self._batch = self._batch, []
            if batch:
                self._queue.put(batch)
        self._handed = time.perf_counter()

    def drain(self, upto: int | None = None) -> None:
        """Return when every job submitted so far (or the first ``upto`` jobs) has run."""
        target = self.submitted if upto is None else upto
        if self.done >= target or self.in_worker():
            return
        if self._thread is None or self._pid != os.getpid():
            self._start()
        self._handover()
        self._hurry.set()
        with self._idle:
            self._targets.append(target)
            try:
                while True:
                    # published before done is read: the worker bumps done before it reads this, so
                    # either we see the count reached or it sees us waiting (a stale, lower value
                    # only wakes us early)
                    self._wait_for = min(self._targets)
                    if self.done >= target:
                        break
                    self._idle.wait(1.0)
                    if self.done < target and (self._thread is None or not self._thread.is_alive()):
                        self._run_left()  # the thread died (interpreter shutdown): finish here
                        return
            finally:
                self._targets.remove(target)
                self._wait_for = min(self._targets) if self._targets else 0

    def close(self) -> None:
        """Drain and stop the thread (a later submit starts a new one)."""
        self.drain()
        thread = self._thread
        if thread is not None and thread.is_alive() and not self.in_worker():
            self._queue.put(None)
            thread.join(timeout=10)
        self._thread = None

    def _start(self) -> None:
        if self._pid != os.getpid():  # forked child: the parent's thread and queue do not exist here
            batch = self._batch
            self._fresh_state()
            self._batch = batch
            self.submitted, self.done = len(batch), 0  # the parent's handed-over jobs are not ours
            self._pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name="msprobe-dump-worker", daemon=True)
        self._thread.start()

    def _run(self, job: Job) -> None:
        fn, args, _ = job
        try:
            self._call(fn, *args)
        finally:
            self.done += 1  # only the worker (or the draining thread after its death) counts
            wait_for = self._wait_for
            if wait_for and self.done >= wait_for:
                with self._idle:
                    self._idle.notify_all()

    def _call(self, fn: Callable[..., Any] | None, *args: Any) -> None:
        """``fn(*args)``; an exception goes to ``on_error`` (and one from there is dropped)."""
        if fn is None:
            return
        try:
            fn(*args)
        except Exception as exc:
            if self._on_error is not None:
                try:
                    self._on_error(exc)
                except Exception:
                    pass

    def _after_tick(self) -> None:
        """A tick: let the jobs of this window gather (a drain cuts the wait short), then queue them
        behind whatever was handed over meanwhile (FIFO)."""
        self._hurry.wait(HANDOVER_SECONDS)
        self._hurry.clear()
        self._tick_armed = False
        self._handover()

    def _loop(self) -> None:
        get = self._queue.get
        while True:
            batch = get()
            if batch is None:
                return
            if batch is _TICK:
                self._after_tick()
                continue
            for start in range(0, len(batch), HINTED_JOBS):
                group = batch[start : start + HINTED_JOBS] if len(batch) > HINTED_JOBS else batch
                if self._before_group is not None:
                    self._call(self._before_group, [job[2] for job in group if job[2] is not None])
                for job in group:
                    self._run(job)
                self._call(self._after_group)

    def _run_left(self) -> None:
        while True:
            try:
                batch = self._queue.get_nowait()
            except queue.Empty:
                break
            if batch is not _TICK:
                for job in batch or ():
                    self._run(job)
        with self._batch_lock:
            batch, self._batch = self._batch, []
        for job in batch:
            self._run(job)
