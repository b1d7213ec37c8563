"""Collection: a dump folder becomes a ``DumpDirectory``, each dump.json a ``DumpFile``, each API call
an ``ApiItem`` named by its record (``Functional.linear.0``), so ``-k``, ``-n``, ``--lf`` just work.

``DumpFile.collect`` is the only place that parses a dump; it yields items in record order. Known
exceptions are marks set here (filtered or unsupported APIs -> skip with the 8.1.1 message); a broken
record becomes an item that fails with one line naming the file and the record.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from msprobe.errors import MsprobeError
from msprobe.formats.accuracy_csv import CONTROL_CHARACTER, unsafe_name
from msprobe.formats.record_names import drop_call_index
from msprobe.run_ut import registry
from msprobe.run_ut.records import ApiRecord, read_dump
from msprobe.run_ut.records import DumpFile as ParsedDump


class AccuracyError(Exception):
    """An API's verdict is ``error``: the one-line reason (which output, metric, value vs threshold)."""


class BrokenRecord(Exception):
    """A dump record that cannot be replayed as written."""


class AccuracyWarning(UserWarning):
    """An API's verdict is ``Warning`` (it passes, but the relative error is above the warning band)."""


def _one_line(where: str, index: int, text: str) -> Any:
    """``--tb=line``'s failure: the crash line alone (a plain string would also print its 50-char cut)."""
    from _pytest._code.code import ExceptionChainRepr, ReprFileLocation, ReprTraceback

    return ExceptionChainRepr([(ReprTraceback([], None, "line"), ReprFileLocation(where, index, text), None)])


def dedupe_key(record: ApiRecord) -> tuple[str, str]:
    """``-f`` de-duplication key: name without index plus args without Max/Min."""
    args = [
        {k: v for k, v in a.items() if k not in ("Max", "Min")}
        for a in record.forward.get("input_args", []) or []
        if isinstance(a, dict)
    ]
    blob = json.dumps([args, record.forward.get("input_kwargs", {})], sort_keys=True, default=str)
    return drop_call_index(record.name), blob


class DumpDirectory(pytest.Directory):
    """A rank folder holding dump.json: collect only the dump, never the tensor folder."""

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        session = self.config.stash[SESSION_KEY]
        for path in sorted(session.dump_files):
            if path.parent == self.path.resolve():
                # under the folder's own path, not the resolved one: pytest matches the path it was
                # given (dump.json reached through a symlinked folder) against this one
                yield DumpFile.from_parent(self, path=self.path / path.name)


class DumpFile(pytest.File):
    """One dump.json: validated once, yields one ``ApiItem`` per forward record in file order."""

    def collect(self) -> Iterable[pytest.Item]:
        session = self.config.stash[SESSION_KEY]
        try:
            dump = read_dump(self.path)
        except MsprobeError as exc:
            raise self.CollectError(str(exc)) from None
        seen: set[tuple[str, str]] = set()
        for record in dump.records:
            if session.filter_api and record.problem is None:
                key = dedupe_key(record)
                if key in seen:
                    continue
                seen.add(key)
            # a control character in a (broken) record's name is shown escaped in pytest's lines
            shown = record.name
            if CONTROL_CHARACTER.search(shown):
                shown = shown.encode("unicode_escape").decode("ascii")
            item = ApiItem.from_parent(self, name=shown, record=record, dump=dump)
            reason = self._skip_reason(record, session)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
                item.msprobe_skip = reason
            yield item

    @staticmethod
    def _skip_reason(record: ApiRecord, session: Any) -> str | None:
        if record.problem is not None:
            return None
        unsupported = registry.unsupported_reason(record.name, record.api_type, record.grammar_ok)
        return unsupported or session.run_config.filter_reason(record.bare_name)


class ApiItem(pytest.Item):
    """One API call of a dump: forward and backward replayed and scored inside ``runtest``."""

    def __init__(self, *, record: ApiRecord, dump: ParsedDump, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.record = record
        self.dump = dump
        self.msprobe_skip: str | None = None

    def runtest(self) -> None:
        from msprobe.run_ut.replay import replay, skipped

        session = self.config.stash[SESSION_KEY]
        if self.record.problem is not None:
            self.stash[RESULT_KEY] = skipped(self.record.name, self.record.problem)
            raise BrokenRecord(f"{self.dump.path}: record {self.record.name!r}: {self.record.problem}")
        result = replay(
            self.record,
            self.dump.data_dir,
            session.device(),
            keep_tensors=session.save_error_data,
            routing=session.routing,
            info=self.config.hook.pytest_msprobe_api_info(
                api_type=self.record.api_type, bare_name=self.record.bare_name
            ),
            device_function=self._device_function,
        )
        self.stash[RESULT_KEY] = result
        if session.save_error_data:
            session.save_error(result, self.dump.path)
        if result.outcome == "skipped":
            pytest.skip(result.reason)
        if result.outcome == "failed":
            raise AccuracyError(result.reason)
        if result.outcome == "warning":
            warnings.warn(AccuracyWarning(self._named(result.reason)), stacklevel=1)

    def _device_function(self, function: Any) -> Any:
        """The device side's callable: the ``pytest_msprobe_device_function`` answer, else ``function``.
        Asked of every loaded conftest and plugin (``config.hook``), not only those above the dump's path
        (``ihook``): a dump is data outside the project, and a conftest inside it is refused anyway."""
        chosen = self.config.hook.pytest_msprobe_device_function(
            api_type=self.record.api_type, bare_name=self.record.bare_name, function=function
        )
        return function if chosen is None else chosen

    def _named(self, text: str) -> str:
        """One line that starts with the API's name (the scorer's reasons usually already do); the
        item's name, which shows a control character escaped."""
        return text if text.startswith(self.record.name) else f"{self.name}: {text}"

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        # an AccuracyWarning is raised only under -W error (or filterwarnings = error): one line too,
        # not pytest's traceback through its own hook machinery (hundreds of lines per API)
        if isinstance(excinfo.value, (AccuracyError, BrokenRecord, AccuracyWarning)):
            text = self._named(str(excinfo.value))
            if (style or self.config.getoption("tbstyle", "auto")) == "line":
                return _one_line(self.nodeid.split("::")[0], self.record.index, text)
            return text
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.record.index, f"api: {self.name}"

    def rows(self) -> dict | None:
        """This API's CSV rows as plain data (``result`` None when none may be written), or None."""
        from msprobe.run_ut.replay import skipped
        from msprobe.run_ut.results import payload

        dump = str(self.dump.path.resolve())
        if unsafe_name(self.record.name):  # counted in the summary, never written
            return payload(dump, self.record.name, self.record.index, None, [])
        result = self.stash.get(RESULT_KEY, None)
        if result is None and self.msprobe_skip is not None:
            result = skipped(self.record.name, self.msprobe_skip)
        if result is None:
            return None
        details = [row.cells() for row in result.details if getattr(row, "written", True)]
        return payload(dump, self.record.name, self.record.index, result.result, details)


# Keys live here (imported by plugin.py and session.py) so the item module needs no plugin import.
SESSION_KEY: pytest.StashKey[Any] = pytest.StashKey()
RESULT_KEY: pytest.StashKey[Any] = pytest.StashKey()
