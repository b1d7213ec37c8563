"""The paths a user hands a command: an output folder, a dump. Imports no torch.

Every check answers a mistake in one :class:`MsprobeError` line that names the option and the path
as the user typed it (``-o out.txt: ...``, ``--msprobe-out=out.txt: ...``), and suggests what exists:
the rank folders of a step when the one given is missing, ``msprobe rebuild`` when a dump crashed
(its journal is newer than its dump.json, or holds records its dump.json lacks: a dump removes the
journal once its json files are complete).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from msprobe.dump.journal import JOURNAL_NAME, header_of
from msprobe.dump.journal import holds_records as journal_holds_records
from msprobe.errors import MsprobeError
from msprobe.formats.dump_json import DEBUG_JSON, DUMP_JSON, data_file_of
from msprobe.formats.dump_json import holds_records as dump_holds_records

#: A missing folder named like these: the siblings of the same kind are suggested. 26.x dumps name
#: their rank folders ``proc{pid}``, so either kind suggests both.
KINDS: tuple[tuple[re.Pattern[str], str, re.Pattern[str]], ...] = (
    (re.compile(r"step\d*"), "step", re.compile(r"step\d+")),
    (re.compile(r"(rank|proc)\d*"), "rank", re.compile(r"(rank|proc)\d*")),
)


def exists(path: Path) -> bool:
    """``path.exists()``, False for a name the system cannot even look up (a component over 255 bytes:
    ENAMETOOLONG), which ``Path.exists`` raises; the caller's own error then names the path."""
    try:
        return path.exists()
    except OSError:
        return False


def where(option: str, path: str | os.PathLike[str]) -> str:
    """How an error names the user's input: ``-o PATH``, ``--msprobe-out=PATH`` (an option given
    with its ``=``, as pytest options are written) or a bare ``PATH``."""
    if not option or option.endswith("="):
        return f"{option}{path}"
    return f"{option} {path}"


def output_dir(path: str | os.PathLike[str], option: str, keep: bool = True) -> Path:
    """The folder a command writes into, created if missing; one line if it cannot be.

    ``keep=False`` only proves that it can be created: the folders made are removed again (for a
    command that checks its inputs before it creates anything).
    """
    folder = Path(path).expanduser()
    if exists(folder) and not folder.is_dir():
        raise MsprobeError(f"{where(option, path)}: an existing file, not a folder")
    made = [p for p in (folder, *folder.parents) if not exists(p)]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MsprobeError(f"{where(option, path)}: cannot create the folder ({exc.strerror})") from None
    writable = os.access(folder, os.W_OK | os.X_OK)
    if not keep:
        for created in made:  # deepest first
            created.rmdir()
    if not writable:
        raise MsprobeError(f"{where(option, path)}: the folder is not writable")
    return folder


def missing(path: str | os.PathLike[str], option: str) -> MsprobeError:
    """The error for a path that does not exist, naming the folders that do where it can."""
    given = Path(path).expanduser()
    parts = given.parts
    for i in range(1, len(parts) + 1):
        head = Path(*parts[:i])
        if exists(head):
            continue
        parent, name = head.parent, parts[i - 1]
        if not parent.is_dir():
            break
        for name_re, kind, sibling_re in KINDS:
            if name_re.fullmatch(name):
                found = sorted(
                    (p.name for p in parent.iterdir() if p.is_dir() and sibling_re.fullmatch(p.name)),
                    key=natural_order,
                )
                listed = f"; found: {', '.join(found)}" if found else f"; {parent} holds none"
                return MsprobeError(f"{where(option, path)}: no such {kind} folder{listed}")
        break
    return MsprobeError(f"{where(option, path)}: no such file or folder")


def dump_input(path: str | os.PathLike[str], option: str) -> Path:
    """A dump the user names (dump.json, rank folder or dump root): it exists and did not crash."""
    given = Path(path).expanduser()
    if not exists(given):
        raise missing(path, option)
    crashed = unfinished(given)
    if crashed:
        folder = given.parent if given.is_file() else path
        others = f" and {len(crashed) - 1} more" if len(crashed) > 1 else ""
        raise MsprobeError(
            f"{where(option, path)}: the dump did not finish (the journal of a crashed run is in "
            f"{crashed[0]}{others}): run `msprobe rebuild {folder}` first"
        )
    return given


def unfinished(dump: Path) -> list[str]:
    """Rank folders of a dump whose journal is newer than their dump.json: the dumping process crashed
    or was killed after its last complete write (``msprobe rebuild`` rewrites dump.json and keeps the
    journal, so a rebuilt folder is not reported)."""
    root = dump.parent if dump.is_file() else dump
    depths = ("",) if dump.is_file() else ("", "*/", "*/*/")  # rank folder, step folder, dump root
    journals = [p for depth in depths for p in root.glob(f"{depth}{JOURNAL_NAME}")]
    return sorted((str(j.parent) for j in journals if crashed(journal_data_file(j), j)), key=natural_order)


def journal_data_file(journal: Path) -> Path:
    """The data file the journal's dump writes (debug.json at level debug, else dump.json), by the
    level in its header: a folder may also hold the other file, of an earlier run of another level;
    without a header, debug.json where it is alone."""
    rank_dir = journal.parent
    header = header_of(journal)
    if header is not None:
        return rank_dir / data_file_of(header.get("level"))
    debug = rank_dir / DEBUG_JSON
    return debug if debug.exists() and not (rank_dir / DUMP_JSON).exists() else rank_dir / DUMP_JSON


def crashed(dump_json: Path, journal: Path) -> bool:
    """The journal is newer than dump.json, or it holds records while dump.json (the empty one a window
    writes as it opens) holds none: ``cp -r`` and ``scp -r`` give both files new times, in the order
    they copy them."""
    return _older(dump_json, journal) or (
        journal_holds_records(journal) and not dump_holds_records(dump_json)
    )


def _older(path: Path, than: Path) -> bool:
    """Whether ``path`` is missing or was last written before ``than``."""
    try:
        return path.stat().st_mtime_ns < than.stat().st_mtime_ns
    except FileNotFoundError:
        return True


def natural_order(text: str) -> list[object]:
    """``rank2`` before ``rank10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]
