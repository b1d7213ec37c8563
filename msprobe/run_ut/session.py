"""``ReplaySession``: the state and hooks of one ``pytest --msprobe-dump`` run (registered only then).

Roles: the single process or the xdist controller owns the ``ResultWriter`` of each
dump.json and is the only writer; a worker replays, puts each API's rows on its report (makereport
wrapper) and writes nothing shared. The controller sends down, in ``pytest_configure_node``, what
workers must agree on: the APIs a resumed run has finished (so every worker deselects the same ones),
the run's timestamp (one error-data folder), the device kind and the config's white/black lists.
Workers may run on other hosts (``--tx ssh=...``) or in another folder (``--tx popen//chdir=...``), so
nothing sent down or sent back names a path of the controller's host: a dump.json is named by its
path relative to the ``--msprobe-dump`` root (the same on every host that holds a copy of the dump).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from collections.abc import Generator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from msprobe import timestamps
from msprobe.errors import MsprobeError, first_line
from msprobe.formats.accuracy_csv import run_ut_result_name
from msprobe.paths import dump_input, exists, output_dir
from msprobe.run_ut.collect import RESULT_KEY, SESSION_KEY, ApiItem, DumpDirectory, DumpFile
from msprobe.run_ut.config import RunConfig, load_config
from msprobe.run_ut.records import CheckedDumps, check_dumps, dump_files_of
from msprobe.run_ut.results import (
    CRASHED_MESSAGE,
    ResultWriter,
    check_resume_file,
    claim_timestamp,
    find_resume_file,
    summary_label,
)
from msprobe.run_ut.run_settings import RunSettings, check_same_settings, dump_fingerprint, write_settings

WARNING_CATEGORY = "accuracy-warning"

MAX_THREADS = 1024  # torch.set_num_threads refuses < 1 and crashes the process at exit far above this


class ReplaySession:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        opt = config.getoption
        given = opt("msprobe_dump")
        try:
            root = dump_input(given, "--msprobe-dump=")
        except MsprobeError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.root = root.resolve()
        try:
            files = dump_files_of(root, "--msprobe-dump=")
            if getattr(config, "workerinput", None) is None:  # workers: the controller checked them
                self._checked = _checked_by_caller(config, self.root) or check_dumps(
                    root, files, "--msprobe-dump="
                )
        except MsprobeError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.dump_files = {p.resolve() for p in files}
        # where each was found under the root as given: a rank folder linked elsewhere keeps its place
        self._found = {p.resolve(): Path(os.path.abspath(p)) for p in files}
        self._given_root = Path(os.path.abspath(root))
        self.startup_warnings: list[str] = []  # said once, as the session starts
        shared_config = (getattr(config, "workerinput", None) or {}).get("msprobe", {}).get("config")
        if shared_config is not None:  # a worker: the lists come from the controller, not a file
            self.run_config = RunConfig(
                white_list=frozenset(shared_config["white_list"]),
                black_list=frozenset(shared_config["black_list"]),
                error_data_path=Path(shared_config["error_data_path"])
                if shared_config["error_data_path"]
                else None,
            )
        else:
            try:
                self.run_config = load_config(
                    Path(opt("msprobe_config")).expanduser() if opt("msprobe_config") else None,
                    self.startup_warnings.append,
                )
            except MsprobeError as exc:
                raise pytest.UsageError(f"--msprobe-config: {exc}") from None
        self.filter_api = bool(opt("msprobe_filter_api"))
        self.save_error_data = bool(opt("msprobe_save_error_data"))
        self.routing = opt("msprobe_routing") or "8.1.1"
        self.requested_device = opt("msprobe_device")
        self.jit_compile = bool(opt("msprobe_jit_compile"))
        threads = opt("msprobe_threads")
        if threads is not None and not 0 <= threads <= MAX_THREADS:  # 0: the default, 1
            raise pytest.UsageError(
                f"--msprobe-threads={threads}: must be between 0 (the default: 1) and {MAX_THREADS}"
            )
        try:
            ids = tuple(int(i) for i in str(opt("msprobe_device_ids") or "").replace(",", " ").split())
        except ValueError:
            raise pytest.UsageError(
                f"--msprobe-device-ids={opt('msprobe_device_ids')}: not card numbers"
            ) from None
        if len(set(ids)) != len(ids) or any(i < 0 for i in ids):
            raise pytest.UsageError(
                f"--msprobe-device-ids={opt('msprobe_device_ids')}: ids must be unique, >= 0"
            )
        self.device_ids = ids
        if getattr(config, "workerinput", None) is None:
            # Checked here, before any item runs or any CSV is written: an absent device is one
            # usage error, not a failure of every item. Workers take the kind the controller chose.
            from msprobe.run_ut.device import DeviceError, check_ids, resolve

            try:
                self.device_kind = resolve(self.requested_device, self.startup_warnings.append)
                check_ids(self.device_kind, ids)
            except DeviceError as exc:
                raise pytest.UsageError(str(exc)) from None
        else:
            shared_device = getattr(config, "workerinput", {}).get("msprobe", {}).get("device")
            self.device_kind = shared_device or self.requested_device
        self.out_dir = Path(opt("msprobe_out") or ".").expanduser().resolve()
        resume = opt("msprobe_resume")
        self._resume_path = Path(resume).expanduser().resolve() if resume else None
        resumed = self._resume_path
        # where the CSVs are: a resumed run appends to the earlier run's, wherever --msprobe-out says
        self._csv_root = self.out_dir if resumed is None else resumed.parent if resumed.is_file() else resumed
        self.worker_input: dict[str, Any] | None = getattr(config, "workerinput", None)
        self._device: str | None = None
        self.writers: dict[Path, ResultWriter] = {}
        self._writer_keys: dict[str, ResultWriter] = {}
        self._threads_before: int | None = None
        self.replayed = 0  # APIs this process replayed
        self.write_failed = False  # a CSV could not be written during the run (reported once)
        self.worker_facts: dict[str, dict[str, Any]] = {}  # controller: what each worker reported
        if self.worker_input is None and config.option.collectonly:
            self.ts, self.done = timestamps.now(), {}  # --collect-only writes no CSV
        elif self.worker_input is None:
            try:
                output_dir(opt("msprobe_out") or ".", "--msprobe-out=")
            except MsprobeError as exc:
                raise pytest.UsageError(str(exc)) from None
            self._setup_writers(opt("msprobe_resume"))
            self.done = {self.dump_key(p): sorted(w.done) for p, w in self.writers.items()}
        else:
            shared = self.worker_input.get("msprobe", {})
            self.ts = shared.get("ts", timestamps.now())
            self.done = shared.get("done", {})
        if self.worker_input is not None or not getattr(config.option, "numprocesses", None):
            # This process replays: pay torch's import now, not inside the first item's timing, and
            # fix the intra-op thread count so results never depend on the host's core count.
            # (autograd imports torch.fx's symbolic shapes at the first backward.)
            import torch
            import torch.fx.experimental.symbolic_shapes

            import msprobe.run_ut.replay  # noqa: F401

            self._threads_before = torch.get_num_threads()
            torch.set_num_threads(int(opt("msprobe_threads") or 1))

    # ------------------------------------------------------------------ setup (controller / single)
    def dump_key(self, dump: Path) -> str:
        """A dump.json's name on every host: its path relative to the ``--msprobe-dump`` root."""
        base = self.root if self.root.is_dir() else self.root.parent
        try:
            return dump.resolve().relative_to(base).as_posix()
        except ValueError:
            return dump.resolve().as_posix()

    def _sub_folder(self, dump: Path) -> Path:
        """Where a dump file's outputs go below an output folder: nothing with a single dump file,
        else its place under the root as given (a rank folder that is a link to elsewhere keeps it)."""
        if len(self.dump_files) == 1:
            return Path()
        return self._found[dump.resolve()].parent.relative_to(self._given_root)

    def _out_dir_for(self, dump: Path) -> Path:
        return self.out_dir / self._sub_folder(dump)

    def _setup_writers(self, resume: str | None) -> None:
        resume_path = self._resume_path  # ``resume`` as given, for the messages
        if resume_path is not None and not exists(resume_path):
            raise pytest.UsageError(f"--msprobe-resume={resume}: no such result file or folder")
        if resume_path is not None and resume_path.is_file() and len(self.dump_files) > 1:
            raise pytest.UsageError(
                f"--msprobe-resume={resume}: a result file resumes one dump.json, but "
                f"{len(self.dump_files)} were found; pass the earlier --msprobe-out folder instead"
            )
        # a file without an order is not a dump: its DumpFile reports the one-line collection error
        orders = dict(sorted(self._checked.orders.items()))
        settings = RunSettings(
            device=str(self.device_kind),
            routing=self.routing,
            white_list=tuple(sorted(self.run_config.white_list)),
            black_list=tuple(sorted(self.run_config.black_list)),
            filter_api=self.filter_api,
            jit_compile=self.jit_compile,
        )
        claimed: list[Path] = []
        try:
            if resume_path is None:
                self.ts = claim_timestamp([self._out_dir_for(d) for d in orders], timestamps.now())
                claimed = [self._out_dir_for(d) / run_ut_result_name(self.ts) for d in orders]
            else:
                self.ts = timestamps.now()
                while any((self._out_dir_for(d) / run_ut_result_name(self.ts)).exists() for d in orders):
                    self.ts = timestamps.next_second(self.ts)
            for dump, order in orders.items():
                previous = None
                if resume_path is not None:
                    previous = (
                        resume_path
                        if resume_path.is_file()
                        else find_resume_file(resume_path / self._out_dir_for(dump).relative_to(self.out_dir))
                    )
                try:
                    of_dump = dataclasses.replace(settings, dump=dump_fingerprint(dump))
                except OSError:  # the collection names what is wrong with the file
                    of_dump = settings
                if previous is not None:
                    self.ts = check_resume_file(previous)
                    # the options first; the dump once the file is known to list only APIs of this
                    # one (a file of another model's dump is refused naming those APIs)
                    if not check_same_settings(previous, dataclasses.replace(of_dump, dump="")):
                        self.startup_warnings.append(
                            f"{previous}: no settings file beside it, so the options of its run are not "
                            "checked against this one's"
                        )
                    same_dump = functools.partial(check_same_settings, previous, of_dump)
                    self.writers[dump] = ResultWriter.resume(dump, previous, order, same_dump)
                else:
                    self.writers[dump] = ResultWriter.create(dump, self._out_dir_for(dump), self.ts, order)
                write_settings(self.writers[dump].result_path, of_dump)
        except MsprobeError as exc:
            # the other folders' claims, still empty: a later resume of the folder would pick them and
            # refuse them (no details file)
            made = {writer.result_path for writer in self.writers.values()}
            for path in claimed:
                if path not in made:
                    with suppress(OSError):
                        if path.stat().st_size == 0:
                            path.unlink()
            raise pytest.UsageError(str(exc)) from None

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        cfg = self.run_config
        node.workerinput["msprobe"] = {
            "ts": self.ts,
            "done": self.done,
            "device": self.device_kind,
            "config": {
                "white_list": sorted(cfg.white_list),
                "black_list": sorted(cfg.black_list),
                "error_data_path": str(cfg.error_data_path) if cfg.error_data_path else None,
            },
        }

    # ------------------------------------------------------------------ per process
    def device(self) -> str:
        if self._device is None:
            from msprobe.run_ut.device import DeviceError, choose

            index = int(str(self.worker_input.get("workerid", "gw0"))[2:] or 0) if self.worker_input else 0
            try:
                self._device = choose(self.device_kind, index, self.device_ids, self.jit_compile)
            except DeviceError as exc:
                raise pytest.UsageError(str(exc)) from None
        return self._device

    def error_dir(self, dump: Path) -> Path:
        """``ut_error_data{ts}`` of one dump file: beside its CSVs (in the dump's sub-folder when
        there are several, whose API names repeat from step to step and rank to rank; a resumed run's
        beside the earlier run's CSVs it appends to)."""
        base = self.run_config.error_data_path or self._csv_root
        return Path(base) / self._sub_folder(dump) / f"ut_error_data{self.ts}"

    def save_error(self, result: Any, dump: Path) -> None:
        from msprobe.run_ut import error_data

        if result.saved and error_data.needs_saving(result.result):
            try:
                error_data.save(self.error_dir(dump), result.name, result.saved)
            except error_data.ErrorDataNotSaved as exc:  # the verdict stands; its inputs are not saved
                warnings.warn(UserWarning(f"msprobe: -save_error_data: {exc}"), stacklevel=1)
        result.saved = {}

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        unloaded = _unloaded_conftest(session.config)
        if unloaded is not None and self.worker_input is None:
            self.startup_warnings.append(
                f"{unloaded} was not loaded (pytest looks for conftest.py files up from the paths "
                "given, here a dump outside the current folder): its pytest_msprobe_* hooks are not "
                "asked; select APIs with -k instead of a node id"
            )
        for message in self.startup_warnings:
            if reporter is not None:
                reporter.write_line(f"msprobe: warning: {message}")

    # ------------------------------------------------------------------ collection
    def _in_dump(self, path: Path) -> bool:
        here = (Path(os.path.abspath(path)), path.resolve())
        return any(p == self.root or self.root in p.parents for p in here)

    def _leads_to_dumps(self, path: Path) -> bool:
        """``path`` is a dump.json or a folder above one (a link elsewhere is not), as resolved or as
        found under the root (a rank folder whose dump.json is a link to a file elsewhere)."""
        real, given = path.resolve(), Path(os.path.abspath(path))
        return any(real == p or real in p.parents for p in self.dump_files) or any(
            given == p or given in p.parents for p in self._found.values()
        )

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """Inside the dump only its dump.json files and the folders down to them are collected: a dump
        is data (a ``test_*.py``, a linked folder's ``conftest.py`` there would be imported)."""
        if self._in_dump(collection_path) and not self._leads_to_dumps(collection_path):
            return True
        return None

    def pytest_collect_directory(self, path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if any(p.parent == path.resolve() for p in self.dump_files):
            return DumpDirectory.from_parent(parent, path=path)
        if self._in_dump(path):  # a plain folder, never a Package (whose __init__.py pytest imports)
            return pytest.Dir.from_parent(parent, path=path)
        return None

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if file_path.resolve() in self.dump_files and not isinstance(parent, DumpDirectory):
            return DumpFile.from_parent(parent, path=file_path)
        return None

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        done = {dump: set(names) for dump, names in self.done.items()}
        if not any(done.values()):
            return
        keep: list[pytest.Item] = []
        deselected: list[pytest.Item] = []
        for item in items:
            # a broken record's SKIP row is no verdict (pytest failed it): it fails again, as it would
            # in an uninterrupted run, so the resumed run exits and counts as that run
            finished = (
                isinstance(item, ApiItem)
                and item.record.problem is None
                and item.record.name in done.get(self.dump_key(item.dump.path), ())
            )
            (deselected if finished else keep).append(item)
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = keep

    # ------------------------------------------------------------------ reports
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, Any]:
        report = yield
        if not isinstance(item, ApiItem):
            return report
        if call.when == "call" and call.excinfo is not None and RESULT_KEY not in item.stash:
            from msprobe.run_ut.replay import skipped

            item.stash[RESULT_KEY] = skipped(item.record.name, first_line(call.excinfo.value))
        first_skip = call.when == "setup" and report.skipped and item.msprobe_skip is not None
        if call.when == "call" or first_skip:
            rows = item.rows()
            if rows is not None:
                rows["dump"] = self.dump_key(item.dump.path)  # host-independent (see the module doc)
                rows["summary"] = summary_label(
                    report.failed, item.record.problem is not None, rows["result"]
                )
                report.msprobe_rows = rows
                self.replayed += 1
                report.msprobe_warning = (
                    item.stash[RESULT_KEY].outcome == "warning" if RESULT_KEY in item.stash else False
                )
        return report

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        if report.when == "call" and report.passed and getattr(report, "msprobe_warning", False):
            return WARNING_CATEGORY, "W", "ACCURACY-WARNING"
        return None

    def _writer_for(self, report: pytest.TestReport, api: str) -> ResultWriter | None:
        path_part = report.nodeid.split("::")[0].replace("\\", "/").lstrip("./")
        candidates = [w for w in self.writers.values() if api in w.order]
        if len(candidates) > 1:
            candidates = [w for w in candidates if str(w.dump).replace(os.sep, "/").endswith(path_part)]
        return candidates[0] if len(candidates) == 1 else None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.worker_input is not None:
            return
        rows = getattr(report, "msprobe_rows", None)
        if rows is None and report.when == "???" and "::" in report.nodeid:
            rows = self._crash_rows(report)
        if rows is None:
            return
        writer = self._by_key().get(rows["dump"]) or self._writer_for(report, rows["api"])
        report.msprobe_rows = None  # type: ignore[attr-defined]  # the writer has them; pytest keeps reports
        if writer is not None:
            try:
                writer.add(rows)
            except MsprobeError as exc:  # the CSVs cannot be written (a full disk): stop, resumable
                self.write_failed = True
                raise pytest.UsageError(str(exc)) from None

    def _by_key(self) -> dict[str, ResultWriter]:
        if len(self._writer_keys) != len(self.writers):
            self._writer_keys = {self.dump_key(d): w for d, w in self.writers.items()}
        return self._writer_keys

    def _crash_rows(self, report: pytest.TestReport) -> dict | None:
        from msprobe.run_ut import results
        from msprobe.run_ut.replay import skipped
        from msprobe.run_ut.results import payload

        api = report.nodeid.split("::")[-1]
        writer = self._writer_for(report, api)
        if writer is None:
            return None
        result = skipped(api, CRASHED_MESSAGE)
        return payload(
            self.dump_key(writer.dump),
            api,
            writer.order[api],
            result.result,
            [r.cells() for r in result.details],
            summary=results.CRASHED,
        )

    def _facts(self) -> dict[str, Any]:
        import torch

        return {"device": self._device or "-", "torch": str(torch.__version__), "apis": self.replayed}

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.worker_input is None:
            if self._all_resumed(session):
                session.exitstatus = pytest.ExitCode.OK  # a finished run resumed: its results stand
            kept_error = any(w.kept_counts().get("error") for w in self.writers.values())
            if session.exitstatus == pytest.ExitCode.OK and kept_error:
                # the exit status of a resumed run is that of the whole file, as an uninterrupted run's
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            failure = None
            for writer in self.writers.values():
                try:
                    writer.finish()
                except MsprobeError as exc:  # the appended files stay as they are: they resume
                    failure = failure or exc
            if failure is not None and not self.write_failed:  # else that error is being reported
                raise pytest.UsageError(str(failure))
        elif self.replayed:
            session.config.workeroutput["msprobe"] = self._facts()  # type: ignore[attr-defined]

    def _all_resumed(self, session: pytest.Session) -> bool:
        """Nothing ran because every API of every dump already had its result row."""
        return (
            session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED
            and any(w.order for w in self.writers.values())
            # a dump file without API forward records (a rank whose scope matched nothing) has
            # nothing to resume and does not make the run "no tests ran"
            and all(set(w.order) <= set(w.done) for w in self.writers.values())
        )

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._threads_before is not None:  # leave the process as we found it (in-process runs)
            import torch

            torch.set_num_threads(self._threads_before)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        facts = getattr(node, "workeroutput", {}).get("msprobe")
        if facts:
            self.worker_facts[str(node.workerinput.get("workerid", "?"))] = facts

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.worker_input is not None:
            return
        for writer in self.writers.values():
            counts = ", ".join(
                f"{n} {status.strip() or 'blank'}" for status, n in sorted(writer.counts().items())
            )
            kept = ", ".join(f"{n} {status}" for status, n in sorted(writer.kept_counts().items()))
            if kept:
                counts = f"{counts or 'no APIs run'}; kept from the resumed run: {kept}"
            terminalreporter.write_line(f"msprobe: {writer.result_path} ({counts or 'no APIs run'})")
            terminalreporter.write_line(f"msprobe: {writer.details_path}")
        facts = dict(sorted(self.worker_facts.items())) or (
            {"this process": self._facts()} if self.replayed else {}
        )
        for who, fact in facts.items():
            terminalreporter.write_line(
                f"msprobe: {who}: {fact['apis']} APIs on {fact['device']} (torch {fact['torch']})"
            )


def _unloaded_conftest(config: pytest.Config) -> Path | None:
    """The current folder's conftest.py when pytest did not load it (a node id into a dump elsewhere
    anchors its conftest search there); None when there is none or it is loaded."""
    here = Path(config.invocation_params.dir, "conftest.py")
    if not here.is_file():
        return None
    files = (getattr(plugin, "__file__", None) for plugin in config.pluginmanager.get_plugins())
    return None if here.resolve() in {Path(f).resolve() for f in files if f} else here


def _checked_by_caller(config: pytest.Config, root: Path) -> CheckedDumps | None:
    """The check ``msprobe run_ut`` made of this very dump path before it started pytest, if it did."""
    for plugin in config.pluginmanager.get_plugins():
        if isinstance(plugin, CheckedDumps) and plugin.root == root:
            return plugin
    return None


def register(config: pytest.Config) -> ReplaySession:
    session = ReplaySession(config)
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "msprobe-replay-session")
    return session
