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

Crash safety: a record reaches the journal as soon as the worker ran its jobs (microseconds after
the call, not at the next drain); a SIGKILL can lose only the jobs still queued at that instant.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

Job = tuple[Callable[..., Any], tuple[Any, ...]]
Batch = list[Job]


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
    """A daemon thread draining a FIFO of ``(fn, args)`` jobs."""

    def __init__(self, on_error: Callable[[BaseException], None] | None = None) -> None:
        self._queue: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self._batch: Batch = []  # jobs not handed over yet (one queue item per record, not per job)
        self._on_error = on_error
        self.submitted = 0
        self.done = 0
        self._idle = threading.Condition(threading.Lock())
        # the job count a draining thread waits for (0: nobody waits); the worker wakes it once, when
        # that count is reached, not after every job (a wake-up per job makes both threads fight for
        # the GIL while the backlog is worked off)
        self._wait_for = 0
        self._targets: list[int] = []
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    @property
    def busy(self) -> bool:
        return self.submitted != self.done

    def in_worker(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue a job; it is handed to the thread at the next :meth:`kick` (or drain)."""
        self.submitted += 1
        self._batch.append((fn, args))

    def kick(self) -> None:
        """Hand the jobs submitted so far to the thread (a record is complete)."""
        if not self._batch:
            return
        if self._thread is None or self._pid != os.getpid():
            self._start()
        batch, self._batch = self._batch, []
        self._queue.put(batch)

    def drain(self, upto: int | None = None) -> None:
        """Return when every job submitted so far (or the first ``upto`` jobs) has run."""
        target = self.submitted if upto is None else upto
        if self.done >= target or self.in_worker():
            return
        self.kick()
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
        self.kick()
        thread = self._thread
        if thread is not None and thread.is_alive() and not self.in_worker():
            self._queue.put(None)
            thread.join(timeout=10)
        self._thread = None

    def _start(self) -> None:
        if self._pid != os.getpid():  # forked child: the parent's thread and queue do not exist here
            self._queue = queue.SimpleQueue()
            self.submitted, self.done = len(self._batch), 0  # the parent's handed-over jobs are not ours
            self._idle = threading.Condition(threading.Lock())
            self._wait_for = 0
            self._targets = []
            self._pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name="msprobe-dump-worker", daemon=True)
        self._thread.start()

    def _run(self, job: Job) -> None:
        fn, args = job
        try:
            fn(*args)
        except Exception as exc:
            if self._on_error is not None:
                try:
                    self._on_error(exc)
                except Exception:
                    pass
        finally:
            self.done += 1  # only the worker (or the draining thread after its death) counts
            wait_for = self._wait_for
            if wait_for and self.done >= wait_for:
                with self._idle:
                    self._idle.notify_all()

    def _loop(self) -> None:
        get = self._queue.get
        while True:
            batch = get()
            if batch is None:
                return
            for job in batch:
                self._run(job)

    def _run_left(self) -> None:
        while True:
            try:
                batch = self._queue.get_nowait()
            except queue.Empty:
                break
            for job in batch or ():
                self._run(job)
        batch, self._batch = self._batch, []
        for job in batch:
            self._run(job)
