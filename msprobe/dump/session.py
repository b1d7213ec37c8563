"""``DumpSession``: all per-process dump state (steps, switch, rank, counters, the open rank folder).

Framework code asks the session *whether* and *where* to record and hands it finished, encoded
records; it never keeps dump state of its own. The front door (``PrecisionDebugger``) owns exactly
one session per process (upstream's singleton rule).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from msprobe.dump import encoder_process
from msprobe.dump.config import DumpConfig
from msprobe.dump.error_log import ErrorLog
from msprobe.dump.exceptions import FileCheckException
from msprobe.dump.filters import RecordFilter
from msprobe.dump.naming import CallCounter
from msprobe.dump.writer import BATCH_RECORDS, BATCH_SECONDS, RankStore
from msprobe.errors import first_line
from msprobe.formats.dump_json import TENSOR_DIR, data_file_of

STEP_BATCH_RECORDS = 1 << 16  # async_dump: a batch per step, up to this many records

log = logging.getLogger("msprobe")

BANNER = "*" * 60 + "\n" + "msprobe ends successfully.".center(60) + "\n" + "*" * 60


RECORD_AT_ONCE: dict[str, Any] = {"batch_records": 1, "batch_seconds": 0.0}


def say_forked_child(pid: int, dump_pid: int) -> None:
    """The one warning of a forked child that reached the debugger: it dumps nothing."""
    log.warning(
        "msprobe: process %d is a forked child of the dumping process %d: it dumps nothing "
        "(its records would go to its parent's folder); create the debugger in the process "
        "that trains to dump it",
        pid,
        dump_pid,
    )


def batching(config: DumpConfig) -> dict[str, Any]:
    """How records reach the journal: in batches of at most ``BATCH_RECORDS`` records or
    ``BATCH_SECONDS``; with ``async_dump``, one batch per step (one transfer of device statistics a
    step; a crash before the step's end loses the step's records)."""
    if config.async_dump:
        return {"batch_records": STEP_BATCH_RECORDS, "batch_seconds": float("inf")}
    return {"batch_records": BATCH_RECORDS, "batch_seconds": BATCH_SECONDS}


class DumpSession:
    def __init__(self, config: DumpConfig, framework: str = "pytorch") -> None:
        self.config = config
        self.framework = framework
        self.loop = 0
        self.init_step = 0
        self.running = False
        self.finished = False
        self.rank: int | None = None
        self.rank_known = False
        self.rank_excluded = False
        self.counter = CallCounter()
        self.filter = RecordFilter(config.scope, config.list, whole_modules=config.level == "mix")
        self.store: RankStore | None = None
        self.store_batching = batching(config)  # a front whose records arrive batched sets its own
        self.error_log: ErrorLog | None = None
        # failures by kind since the last stop(): the first is said, the others counted and said at
        # stop() or the step's end (a full disk fails every tensor file: thousands of lines a step)
        self._failures: dict[tuple[str, str], int] = {}
        self.step_reset_hooks: list[Callable[[], None]] = []
        self._opened_once = False  # a rank folder was written: a later one the OS refuses is a warning
        self._refused_step: int | None = None  # the step whose refused folder was said (once a step)

    # -- steps -------------------------------------------------------------------------------------
    @property
    def current_step(self) -> int:
        return self.loop + self.init_step

    def set_init_step(self, step: int) -> None:
        self.init_step = step
        self.loop = 0

    def step_selected(self) -> bool:
        return not self.config.step or self.current_step in self.config.step

    def _past_last_step(self) -> bool:
        return bool(self.config.step) and self.current_step > max(self.config.step)

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self.running = False
            print(BANNER, flush=True)

    # -- rank folder -------------------------------------------------------------------------------
    @property
    def rank_dir_name(self) -> str:
        return "rank" if self.rank is None else f"rank{self.rank}"

    def rank_dir(self) -> str:
        return os.path.join(self.config.dump_path, f"step{self.current_step}", self.rank_dir_name)

    def tensor_dir(self) -> str:
        return os.path.join(self.rank_dir(), TENSOR_DIR)

    def header(self) -> dict[str, Any]:
        return {
            "task": self.config.task,
            "level": self.config.level,
            "framework": self.framework,
            "dump_data_dir": self.tensor_dir() if self.config.saves_tensors else None,
        }

    def ensure_store(self) -> RankStore | None:
        """The open rank folder's store. A folder the OS refuses (read-only, full) is an error at the
        first one, the user's setup; at a later step, the disk that failed during the training, it is
        one warning line and None: that step is not dumped and the training goes on."""
        if self.store is None:
            store = RankStore(
                self.rank_dir(),
                self.header(),
                data_file_of(self.config.level),
                keep_data=self.config.task != "structure",
                encoder=encoder_process.shared(),
                **self.store_batching,
            )
            store.on_error = self.record_error
            try:
                store.open(self.config.saves_tensors)  # kept only once its folder exists: nothing to close
            except FileCheckException as exc:
                if not self._opened_once:
                    raise
                if self._refused_step != self.current_step:  # once a step, not once a window or save()
                    self._refused_step = self.current_step
                    log.warning("msprobe: %s; step %d is not dumped", exc.detail, self.current_step)
                return None
            self._opened_once = True
            self.store = store
            self.error_log = ErrorLog(self.rank_dir())
        return self.store

    def resolve_rank(self, provider: Callable[[], int | None]) -> None:
        if not self.rank_known:
            self.rank = provider()
            self.rank_known = True
            # a non-empty rank list never matches a process without torch.distributed (8.1.1)
            if self.config.rank and (self.rank is None or self.rank not in self.config.rank):
                self.rank_excluded = True
                # once: resolved at the first selected start() of the process's one session
                log.warning(
                    "msprobe: %s: this process's rank %s is not in the rank list %s, so it dumps nothing%s",
                    self.config.config_path,
                    "(none: no distributed communication is initialised)" if self.rank is None else self.rank,
                    list(self.config.rank),
                    "" if self.rank is not None else '; use "rank": [] in a single-process run',
                )

    # -- switch ------------------------------------------------------------------------------------
    def start(self, rank_provider: Callable[[], int | None]) -> bool:
        """Turn dumping on if this step and rank are selected; returns whether it is on."""
        if self.finished:
            return False
        if self._past_last_step():
            self.finish()
            return False
        if not self.step_selected():
            return False
        self.resolve_rank(rank_provider)
        if self.rank_excluded:
            return False
        if self.ensure_store() is None:
            return False
        self.running = True
        log.info("msprobe: dump switch is on at step %d, data goes to %s", self.current_step, self.rank_dir())
        return True

    def stop(self) -> None:
        self.running = False
        if self.store is not None:
            self.store.flush()
            log.info("msprobe: dump.json is at %s", self.rank_dir())
        self._count_failures()

    def step(self) -> None:
        if self.finished:
            return
        self.running = False
        self.close_store()
        self.loop += 1
        self.counter.reset()
        self.filter.reset()
        for hook in self.step_reset_hooks:
            hook()
        if self._past_last_step():
            self.finish()

    def close_store(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
            self.error_log = None
        self._count_failures()

    def _count_failures(self) -> None:
        """At stop() and the step's end: how many failures were not said, by kind."""
        for (function, kind), count in self._failures.items():
            if count > 1:
                log.warning(
                    "msprobe: %s failed %d more times with %s (see dump_error_info.log)",
                    function,
                    count - 1,
                    kind,
                )
        self._failures.clear()

    # -- records -----------------------------------------------------------------------------------
    def record_error(self, function: str, name: str, exc: BaseException, extra: str = "") -> None:
        if self.error_log is None and self.store is not None:
            self.error_log = ErrorLog(self.store.rank_dir)
        if self.error_log is not None:
            self.error_log.record(function, name, exc, extra)
        errno = getattr(exc, "errno", None)
        kind = (function, type(exc).__name__ + (f" [Errno {errno}]" if errno else ""))
        self._failures[kind] = self._failures.get(kind, 0) + 1
        if self._failures[kind] == 1:
            log.warning(
                "msprobe: %s failed for %s: %s (see dump_error_info.log)", function, name, first_line(exc)
            )
