"""The two replay CSVs of one dump.json: appended as rows arrive, rewritten sorted at the end.

Only the process that owns the terminal (the xdist controller, or the single process) ever writes.
Each API's rows arrive as a plain-data payload on its pytest report (see :func:`payload`); the writer
appends them at once (so an interrupted run keeps every finished API and can resume from the file),
and at session end rewrites both files atomically sorted by the API's record index in the dump, so
``-n 0`` and ``-n 2`` give identical bytes. Resume: rows of an earlier result/details pair are read
back, their APIs are not run again, and they are kept in the rewrite; a row a kill tore is dropped and
its API runs again (:func:`finished_rows`). Imports no torch.

Formats: ``msprobe.formats.accuracy_csv`` (headers, ``format_cell``, BOM, blanks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprobe import timestamps
from msprobe.errors import MsprobeError, cannot_write
from msprobe.formats.accuracy_csv import (
    RUN_UT_DETAILS_HEADER,
    RUN_UT_RESULT_HEADER,
    RUN_UT_RESULT_NAME,
    append_rows,
    format_cell,
    read_appended_rows,
    run_ut_files,
    run_ut_result_name,
    write_rows,
)
from msprobe.formats.record_names import output_row_api
from msprobe.paths import exists


def claim_timestamp(out_dirs: Sequence[Path], ts: str) -> str:
    """The first timestamp from ``ts`` on that no folder of ``out_dirs`` has a result file of, claimed:
    each folder's result file is created now, exclusively, so two replays started together into one
    folder never share a pair of files (``ResultWriter.create`` then writes its header)."""
    path = Path()
    try:
        for folder in out_dirs:
            path = folder
            # before the claims: a file where a folder goes raises FileExistsError too, which must not
            # read as a timestamp taken (every later second would be tried, forever)
            folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(path, exc) from None
    return timestamps.claim(lambda ts: [folder / run_ut_result_name(ts) for folder in out_dirs], ts)


#: What the summary counts for an API pytest fails although its CSV verdict is not ``error``.
BROKEN = "broken record"
CRASHED = "crashed"
#: The Message of the SKIP row written for an API whose xdist worker died: not a verdict, so a resumed
#: run replays such an API again.
CRASHED_MESSAGE = "worker crashed while replaying this API"
FAILED = "failed"


def payload(
    dump: str,
    api: str,
    index: int,
    result: Sequence[Any] | None,
    details: Sequence[Sequence[Any]],
    summary: str | None = None,
) -> dict:
    """The rows of one API as plain strings (they cross from an xdist worker inside its report).

    ``result`` None: the API is counted in the summary but never written (a name that looks like a
    formula); ``summary``: what the summary counts instead of the verdict (see :data:`BROKEN`).
    """
    return {
        "dump": dump,
        "api": api,
        "index": index,
        "result": None if result is None else [format_cell(c) for c in result],
        "details": [[format_cell(c) for c in row] for row in details],
        "summary": summary,
    }


def summary_label(failed: bool, broken: bool, result: Sequence[str] | None) -> str | None:
    """The summary's label of an API whose pytest outcome is not its verdict's: pytest fails a broken
    record (its row says ``SKIP``) and any other API that failed without an ``error`` verdict."""
    if broken:
        return BROKEN
    if failed and (result is None or api_verdict(result) != "error"):
        return FAILED
    return None


def details_path_for(result_path: Path) -> Path:
    return result_path.with_name(result_path.name.replace("result", "details", 1))


def check_resume_file(path: Path) -> str:
    """Validate an earlier result CSV for resume (``-csv_path``); its timestamp."""
    match = RUN_UT_RESULT_NAME.match(path.name)
    if match is None:
        raise MsprobeError(f"{path}: a resume file must be named accuracy_checking_result_<14 digits>.csv")
    if not exists(path) or not path.is_file():  # exists: False for a name the system cannot look up
        raise MsprobeError(f"{path}: no such result file to resume from")
    if not details_path_for(path).is_file():
        raise MsprobeError(f"{path}: its details file {details_path_for(path).name} is missing")
    return match.group(1)


def _strip_trailing_blank(row: list[str]) -> list[str]:
    """Result rows are 3 or 4 cells; ``read_rows`` pads to 4 with ``""``."""
    return row[:3] if len(row) == 4 and row[3] == "" else row


def finished_rows(
    result: list[list[str]], details: list[list[str]], torn_details: list[str] | None
) -> tuple[list[list[str]], list[list[str]]]:
    """The rows of the APIs an interrupted run finished, from its whole rows (torn last rows left out).

    An API is finished when its result row is whole: ``ResultWriter.add`` writes an API's details rows
    before its result row, so a kill leaves a torn result row, or details rows (the last one maybe
    torn) of an API without a result row; those details are dropped and the API runs again. A torn
    details row whose name cell is whole (a file written the other way round, or cut by hand) makes
    its API run again too, with every API after it that has a result row but no details row (a
    details file cut by hand lost theirs). A crashed worker's SKIP row is no verdict: its API runs
    again. A row appended twice is kept once.
    """
    again = {output_row_api(torn_details[0])} if torn_details is not None and len(torn_details) > 1 else set()
    if torn_details is not None:
        # Both files list APIs in one order (arrival, or dump order after the final rewrite), so a
        # details file cut mid-row (head -c, a truncated copy) lost the rows of every API after the cut:
        # those of them that have a result row but no details row run again too.
        names = [row[0] for row in result]
        with_details = {output_row_api(row[0]) for row in details}
        torn = next(iter(again), None)
        cut = (
            names.index(torn)
            if torn in names
            else max((i for i, n in enumerate(names) if n in with_details), default=-1)
        )
        again |= {n for n in names[cut + 1 :] if n not in with_details}
    rows = _first_of_each(
        [_strip_trailing_blank(row) for row in result if row[0] not in again and row[3] != CRASHED_MESSAGE]
    )
    done = {row[0] for row in rows}
    return rows, _first_of_each([row for row in details if output_row_api(row[0]) in done])


def _first_of_each(rows: list[list[str]]) -> list[list[str]]:
    """The first row of each name: two runs resumed from one folder at once append an API twice."""
    seen: set[str] = set()
    out = []
    for row in rows:
        if row[0] not in seen:
            seen.add(row[0])
            out.append(row)
    return out


def check_same_dump(path: Path, dump: Path, names: Sequence[str], order: Mapping[str, int]) -> None:
    """Refuse a resume file that lists APIs ``dump`` does not hold: it was written for another dump.

    (A run restricted with ``-k``, ``-f`` or a white list lists fewer APIs, never others.)
    """
    others = list(dict.fromkeys(name for name in names if name not in order))
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise MsprobeError(
            f"{path}: lists APIs that {dump} does not hold ({shown}); it was written for another "
            "dump, resume only from a result file of this one"
        )


@dataclass
class ResultWriter:
    """Both CSVs of one dump.json, and the rows they hold so far."""

    dump: Path
    result_path: Path
    order: Mapping[str, int]
    old_result: list[list[str]] = field(default_factory=list)
    old_details: list[list[str]] = field(default_factory=list)
    rows: dict[str, dict] = field(default_factory=dict)

    @property
    def details_path(self) -> Path:
        return details_path_for(self.result_path)

    @property
    def done(self) -> set[str]:
        """APIs already present in the resumed result file."""
        return {row[0] for row in self.old_result}

    @classmethod
    def create(cls, dump: Path, out_dir: Path, ts: str, order: Mapping[str, int]) -> ResultWriter:
        writer = cls(dump, out_dir / run_ut_result_name(ts), order)
        path = out_dir
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            for path, header in (
                (writer.result_path, RUN_UT_RESULT_HEADER),
                (writer.details_path, RUN_UT_DETAILS_HEADER),
            ):
                write_rows(path, header, [])
        except OSError as exc:
            # neither file, claimed or written: a result file without its details would be picked by a
            # later resume (``-csv_path`` of this folder) and refused there
            for made in (writer.result_path, writer.details_path):
                with suppress(OSError):  # a folder in a file's place (the failure itself) stays
                    made.unlink(missing_ok=True)
            raise cannot_write(path, exc) from None
        return writer

    @classmethod
    def resume(
        cls,
        dump: Path,
        result_path: Path,
        order: Mapping[str, int],
        check: Callable[[], object] | None = None,
    ) -> ResultWriter:
        """The writer of an interrupted run's files: its finished APIs' rows (see :func:`finished_rows`).

        ``check`` (it raises to refuse the file) runs once the file is known to list APIs of ``dump``
        only, before anything is written."""
        check_resume_file(result_path)
        result, _ = read_appended_rows(result_path, RUN_UT_RESULT_HEADER)
        details, torn_details = read_appended_rows(details_path_for(result_path), RUN_UT_DETAILS_HEADER)
        check_same_dump(result_path, dump, [row[0] for row in result], order)
        if check is not None:
            check()
        old_result, old_details = finished_rows(result, details, torn_details)
        writer = cls(dump, result_path, order, old_result, old_details)
        # Rows are appended after these: a torn last row (or the details of an unfinished API) left in
        # the file would be glued to the first appended row, and a second interruption would then
        # leave a file the next resume refuses, or silently loses a details row from. Keep the
        # finished rows only, before anything is appended.
        writer._rewrite(old_details, old_result)
        return writer

    def add(self, item: Mapping[str, Any]) -> None:
        """Record one API's rows and append them to both files now (crash-safe): its details rows
        first, its result row last, so a whole result row means a finished API."""
        self.rows[item["api"]] = dict(item)
        if item["result"] is None:
            return
        for path, rows in ((self.details_path, item["details"]), (self.result_path, [item["result"]])):
            try:
                append_rows(path, rows)
            except OSError as exc:
                raise cannot_write(path, exc) from None

    def _key(self, api: str, arrival: int) -> tuple[int, int]:
        return (self.order.get(api, len(self.order)), arrival)

    def finish(self) -> None:
        """Rewrite both files sorted by record index (old resumed rows included), atomically."""
        results: dict[str, list[str]] = {}
        details: dict[str, list[list[str]]] = {}
        for row in self.old_result:
            results[row[0]] = row
        for row in self.old_details:
            details.setdefault(output_row_api(row[0]), []).append(row)
        for api, item in self.rows.items():
            if item["result"] is None:
                continue
            results[api] = item["result"]
            details[api] = item["details"]
        arrival = {api: i for i, api in enumerate(results)}
        ordered = sorted(results, key=lambda api: self._key(api, arrival[api]))
        ordered_details = sorted(details, key=lambda api: self._key(api, arrival.get(api, len(arrival))))
        self._rewrite(
            [row for api in ordered_details for row in details[api]], [results[api] for api in ordered]
        )

    def _rewrite(self, details: Sequence[Sequence[str]], results: Sequence[Sequence[str]]) -> None:
        """Both files rewritten atomically, details first: a failure between the two leaves the
        appended result file, which resumes."""
        for path, header, rows in (
            (self.details_path, RUN_UT_DETAILS_HEADER, details),
            (self.result_path, RUN_UT_RESULT_HEADER, results),
        ):
            try:
                write_rows(path, header, rows)
            except OSError as exc:
                raise cannot_write(path, exc) from None

    def counts(self) -> dict[str, int]:
        """One verdict per API of this run (for the terminal summary), as pytest counts it: its
        ``error`` plus the labels of :func:`summary_label` are pytest's failures."""
        out: dict[str, int] = {}
        for item in self.rows.values():
            status = item.get("summary") or api_verdict(item["result"])
            out[status] = out.get(status, 0) + 1
        return out

    def kept_counts(self) -> dict[str, int]:
        """One verdict per API whose row a resume kept from the earlier run (not replayed again)."""
        out: dict[str, int] = {}
        for row in self.old_result:
            if row[0] not in self.rows:
                status = api_verdict(row)
                out[status] = out.get(status, 0) + 1
        return out


def api_verdict(result: Sequence[str]) -> str:
    """An API's verdict over both directions, the rule pytest's outcome follows: error in either
    direction > Warning in either > a skipped forward (``SKIP``) > pass (a skipped backward alone
    passes, as 8.1.1's backward messages do)."""
    statuses = [str(cell).strip() for cell in result[1:3]]
    if "error" in statuses:
        return "error"
    if "Warning" in statuses:
        return "Warning"
    return "SKIP" if statuses[:1] == ["SKIP"] else "pass"


def find_resume_file(folder: Path) -> Path | None:
    """The newest ``accuracy_checking_result_*.csv`` in a folder (resume from an earlier -o)."""
    candidates = [
        path
        for path in run_ut_files(folder, RUN_UT_RESULT_NAME)
        # an empty result file without its details is a run killed between claiming its timestamp
        # and writing the headers: it finished nothing, and resuming from it would be refused
        if not (path.stat().st_size == 0 and not exists(details_path_for(path)))
    ]
    return candidates[-1] if candidates else None
