"""``msprobe run_ut``: upstream's run_ut flags, run as a pytest session of the replay plugin.

``msprobe run_ut -api_info DUMP -o OUT [-csv_path RESULT|DIR] [-save_error_data] [-f] [-n WORKERS]
[-config CONFIG] [-d ID...] [-device_type cpu|cuda|npu]`` builds ``pytest --msprobe-dump=DUMP ...``
and calls ``pytest.main``; the exit code is pytest's (0 all passed, 1 some API failed its accuracy
check, 4 usage error, 5 nothing to replay).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from msprobe.errors import MsprobeError
from msprobe.extras import require
from msprobe.paths import dump_input, exists, output_dir
from msprobe.run_ut.config import load_config
from msprobe.run_ut.records import CheckedDumps, check_dumps, dump_files_of
from msprobe.run_ut.results import check_resume_file

#: ``-q`` hides pytest's warnings summary of the Warning verdicts (``msprobe.run_ut.collect``).
ACCURACY_WARNING_FILTER = "ignore::msprobe.run_ut.collect.AccuracyWarning"

DESCRIPTION = """Replay a dump (every API call a pytest item) on a device against a CPU benchmark.

example:
  msprobe run_ut -api_info dump_path/step0/rank/dump.json -o out -n 2

The rank folder is rank/ in a dump made without torch.distributed, rank{R}/ (rank0, ...) with it.
Then compare two replays (the newest details CSV of each output folder):
  msprobe api_precision_compare -npu npu_out -gpu gpu_out -o compare_out
"""


def build_parser(prog: str = "msprobe run_ut") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "-api_info",
        "--api_info_file",
        dest="api_info",
        required=True,
        metavar="DUMP",
        help="dump.json, rank folder or dump root",
    )
    parser.add_argument("-o", "--out_path", dest="out", default="./", help="output folder (default ./)")
    parser.add_argument(
        "-csv_path",
        "--result_csv_path",
        dest="csv_path",
        default="",
        help="resume from an interrupted accuracy_checking_result_{ts}.csv, or from the earlier -o folder "
        "(a dump of several steps or ranks)",
    )
    parser.add_argument(
        "-save_error_data",
        dest="save_error_data",
        action="store_true",
        help="save inputs/outputs of APIs that did not pass",
    )
    parser.add_argument(
        "-f",
        "--filter_api",
        dest="filter_api",
        action="store_true",
        help="replay only the first of calls with identical arguments",
    )
    parser.add_argument("-config", "--config_path", dest="config", default="", help="msprobe config.json")
    parser.add_argument(
        "-n",
        "--num_workers",
        "--num_splits",  # 8.1.1's multi_run_ut spelling
        dest="workers",
        default="0",
        type=_workers,
        help="xdist workers (a number or 'auto'; 0 = in process)",
    )
    parser.add_argument(
        "-d",
        "--device",
        dest="device_ids",
        nargs="+",
        type=int,
        default=None,
        metavar="ID",
        help="card ids (unique, >= 0); worker i takes ids[i %% len(ids)]",
    )
    parser.add_argument(
        "-device_type",
        "--device_type",
        dest="device",
        default=None,
        choices=("cpu", "cuda", "npu"),
        help="device side (default: the best available)",
    )
    parser.add_argument(
        "-j",
        "--jit_compile",
        dest="jit_compile",
        action="store_true",
        help="NPU only: jit_compile mode, as set during the dump",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="pytest -v")
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="the summary, and one line per failing API or collection error",
    )
    return parser


def _workers(text: str) -> str:
    """``-n``: a count of workers (0: in process) or one of pytest-xdist's words."""
    if text in ("auto", "logical") or (text.isdigit() and int(text) >= 0):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: a number of workers (0: in process) or 'auto'")


def pytest_args(argv: Sequence[str]) -> list[str]:
    """The pytest command line the upstream-style flags stand for (validated first)."""
    return prepare(argv)[0]


def prepare(argv: Sequence[str], prog: str = "msprobe run_ut") -> tuple[list[str], CheckedDumps]:
    """:func:`pytest_args`, and what the check of ``-api_info`` found (handed to the replay)."""
    ns = build_parser(prog).parse_args(list(argv))
    # ~ as the dump's own checks read it (a quoted ~ reaches us unexpanded)
    ns.out, ns.config, ns.csv_path = (
        os.path.expanduser(p) if p else p for p in (ns.out, ns.config, ns.csv_path)
    )
    dump = dump_input(ns.api_info, "-api_info")
    files = dump_files_of(dump, "-api_info")
    checked = check_dumps(dump, files, "-api_info")
    args = ["--msprobe-dump", str(dump), "--msprobe-out", ns.out, "-p", "no:cacheprovider"]
    # pytest's log capture attaches its handler, at every phase of every item, to each logger that
    # does not propagate (torch makes dozens): a cost per API the replay, which logs nothing, need not pay
    args += ["-p", "no:logging"]
    # msprobe itself is imported before pytest starts, so pytest cannot (and need not) rewrite it.
    args += ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
    rootdir = dump.resolve().parent if dump.is_file() else dump.resolve()
    args += ["--rootdir", str(rootdir)]
    # pytest loads the conftest.py files above the dump only up to its confcutdir, which is that
    # rootdir when no ini file is found: a dump inside the current folder gets the project's own
    # conftest.py files (its pytest_msprobe_device_function) up from it, through the current folder
    # and above, as for a dump elsewhere; the folders above a dump elsewhere are not the project's
    # and stay unread
    cwd = Path.cwd().resolve()
    if rootdir.is_relative_to(cwd):
        args += ["--confcutdir", cwd.anchor]
    # the plugin checks what it is given again, and names its own options; checked here first, the
    # errors name the flags the user typed
    if ns.csv_path:
        # a folder: the earlier -o of a multi-rank/step dump (exists: False for a name over 255 bytes)
        if not (exists(Path(ns.csv_path)) and Path(ns.csv_path).is_dir()):
            _as_flag("-csv_path", check_resume_file, Path(ns.csv_path))
            if len(files) > 1:
                raise MsprobeError(
                    f"-csv_path {ns.csv_path}: a result file resumes one dump.json, but -api_info "
                    f"{ns.api_info} holds {len(files)}; pass the earlier -o folder instead"
                )
        args += ["--msprobe-resume", ns.csv_path]
    if ns.save_error_data:
        args.append("--msprobe-save-error-data")
    if ns.filter_api:
        args.append("--msprobe-filter-api")
    if ns.jit_compile:
        args.append("--msprobe-jit-compile")
    if ns.config:
        _as_flag("-config", load_config, Path(ns.config))
        args += ["--msprobe-config", ns.config]
    if ns.device:
        args += ["--msprobe-device", ns.device]
    if ns.device_ids:
        if len(set(ns.device_ids)) != len(ns.device_ids) or min(ns.device_ids) < 0:
            raise MsprobeError(f"-d {' '.join(map(str, ns.device_ids))}: device ids must be unique and >= 0")
        args += ["--msprobe-device-ids", ",".join(map(str, ns.device_ids))]
    if str(ns.workers) not in ("0", ""):
        require("workers")
        args += ["-n", str(ns.workers)]
    if ns.quiet:
        # One line per failure or collection error (its reason), no traceback; the Warning verdicts
        # are in the CSVs and the summary line, so pytest's warnings summary does not repeat them.
        args += ["-q", "-q", "--tb=line", "-rN", "-W", ACCURACY_WARNING_FILTER]
    else:
        args.append("-v" if ns.verbose else "-q")
    return args, checked


def _as_flag(flag: str, check: Callable[[Path], object], path: Path) -> None:
    """``check(path)``, its one-line error prefixed with the flag that gave the path."""
    try:
        check(path)
    except MsprobeError as exc:
        raise MsprobeError(f"{flag} {exc}", exc.exit_code) from None


def main(argv: Sequence[str] | None = None, prog: str = "msprobe run_ut") -> int:
    import sys

    args, checked = prepare(sys.argv[1:] if argv is None else argv, prog)
    require("replay")
    if "--msprobe-device" in args:
        from msprobe.run_ut.device import DeviceError, resolve

        try:
            resolve(args[args.index("--msprobe-device") + 1], option="-device_type")
        except DeviceError as exc:
            raise MsprobeError(str(exc), 4) from None
    output_dir(args[args.index("--msprobe-out") + 1], "-o")

    import pytest

    # the session takes the check just made instead of decoding every dump.json again
    return int(pytest.main(args, plugins=[checked]))
