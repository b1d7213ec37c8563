"""``msprobe-compare`` / ``msprobe compare`` / ``msprobe api_precision_compare``.

Example (the two-host workflow):

    msprobe run_ut -api_info dump/step0/rank/dump.json -o npu_out     # on the NPU host
    msprobe run_ut -api_info dump/step0/rank/dump.json -o gpu_out     # on the GPU host
    msprobe-compare -npu npu_out -gpu gpu_out -o cmp --dump dump/step0/rank

(-npu/-gpu: a details CSV, or a replay's output folder for its newest one; rank/ in a dump made
without torch.distributed, rank{R}/ with it.)
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from msprobe.cli import package_version, run_main, user_error
from msprobe.errors import MsprobeError
from msprobe.extras import require
from msprobe.formats.accuracy_csv import RUN_UT_DETAILS_NAME, run_ut_files
from msprobe.paths import missing, natural_order, output_dir, where

ORDER = ("error", "mismatch", "missing", "pass", "SKIP", " ")
STRICT_VERDICTS = ("mismatch", "missing")
"""API verdicts that fail ``--strict`` besides ``error`` (and a warning said first)."""


def newest_details(folder: str, option: str) -> str:
    """The newest ``accuracy_checking_details_{ts}.csv`` directly in a replay's output folder (reruns
    into one folder add one per run); said on stderr when there are several."""
    found = [p.name for p in run_ut_files(Path(folder), RUN_UT_DETAILS_NAME)]
    if not found:
        raise MsprobeError(
            f"{where(option, folder)}: no accuracy_checking_details_<14 digits>.csv in this folder"
            + _replay_folders_below(Path(folder))
        )
    if len(found) > 1:
        print(f"msprobe: {option} {folder}: {found[-1]}, the newest of {len(found)}", file=sys.stderr)
    return os.path.join(folder, found[-1])


def _replay_folders_below(folder: Path) -> str:
    """Where a replay of a dump root wrote its files (``OUT/<step>/<rank>/``), said: compare one of
    those folders at a time."""
    below = sorted(
        {str(p.parent.relative_to(folder)) for p in folder.glob("*/*/accuracy_checking_details_*.csv")}
        | {str(p.parent.relative_to(folder)) for p in folder.glob("*/accuracy_checking_details_*.csv")},
        key=natural_order,
    )
    if not below:
        return ""
    more = f" (and {len(below) - 3} more)" if len(below) > 3 else ""
    return (
        f"; a replay of a dump root writes one pair per dump file, here in {', '.join(below[:3])}{more}: "
        "compare one of those folders at a time"
    )


class CompareCommand:
    """Compare NPU and GPU accuracy_checking_details CSVs into verdicts, CSVs and an HTML report."""

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "-npu",
            "--npu_csv_path",
            required=True,
            metavar="CSV|DIR",
            help="accuracy_checking_details_*.csv of the device under test (NPU), or the replay's output "
            "folder (its newest details CSV)",
        )
        parser.add_argument(
            "-gpu",
            "--gpu_csv_path",
            required=True,
            metavar="CSV|DIR",
            help="accuracy_checking_details_*.csv of the reference device (GPU), or the replay's output "
            "folder (its newest details CSV)",
        )
        parser.add_argument(
            "-o",
            "--out_path",
            default="./",
            metavar="DIR",
            help="output folder, created if missing (default: ./)",
        )
        parser.add_argument(
            "--dump",
            dest="dump_dir",
            default=None,
            metavar="DIR",
            help="dump root or rank folder: adds each failing API's call stack to the report",
        )
        parser.add_argument(
            "-f",
            "--framework",
            default="pytorch",
            choices=("pytorch", "pt"),
            help="accepted for upstream compatibility (only PyTorch details files)",
        )
        parser.add_argument(
            "--strict",
            action="store_true",
            help="exit with status 1 when any API is judged error, missing (one side only) or mismatch "
            "(outputs of other shapes), or a warning is said first (a file has "
            "no rows, the files look like different runs or were scored with different routings, the "
            "--dump names none of the compared APIs, a replay result CSV beside a file is damaged)",
        )
        parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks")  # fmt: skip
        parser.add_argument("-V", "--version", action="version", version=package_version())

    def check(self, args: argparse.Namespace) -> None:
        """The user's paths and the compare extra, before any work: one line for the first problem."""
        for attr in ("npu_csv_path", "gpu_csv_path", "out_path", "dump_dir"):  # ~ as output_dir reads it
            if getattr(args, attr, None):
                setattr(args, attr, os.path.expanduser(getattr(args, attr)))
        for option, attr in (("-npu", "npu_csv_path"), ("-gpu", "gpu_csv_path")):
            path = getattr(args, attr)
            if not os.path.exists(path):
                raise missing(path, option)
            if os.path.isdir(path):
                setattr(args, attr, newest_details(path, option))
            elif not os.path.isfile(path):
                raise MsprobeError(f"{where(option, path)}: not an accuracy_checking_details CSV")
        if args.dump_dir is not None and not os.path.exists(args.dump_dir):
            raise missing(args.dump_dir, "--dump")
        if args.dump_dir is not None and not os.path.isdir(args.dump_dir):
            raise MsprobeError(f"{where('--dump', args.dump_dir)}: not a folder")
        require("compare")
        output_dir(args.out_path, "-o", keep=False)

    def run(self, args: argparse.Namespace) -> int:
        self.check(args)
        from msprobe.compare.run import run_compare

        outcome = run_compare(args.npu_csv_path, args.gpu_csv_path, args.out_path, dump_dir=args.dump_dir)
        if outcome.warning:
            print(f"msprobe: warning: {outcome.warning}", file=sys.stderr, flush=True)
        counts = outcome.api_counts
        summary = ", ".join(f"{counts[k]} {k.strip() or 'blank'}" for k in ORDER if counts.get(k))
        rows, apis = sum(outcome.row_counts.values()), sum(counts.values())
        print(f"compared {rows} output rows of {apis} APIs" + (f": {summary}" if summary else ""))
        if outcome.routing != "8.1.1":
            print(
                f"routing {outcome.routing} (as the replays scored the files): every float output by the "
                "benchmark standard"
            )
        if outcome.flagged:
            print(
                f"{outcome.flagged} paired rows differ in dtype or shape between NPU and GPU (see the report)"
            )
        for path in outcome.paths:
            print(f"wrote {path}")
        # --strict: a CI gate; an API compared on one side only, or on outputs of other shapes, was
        # not compared at all, which must not pass the gate as a pass would
        unpaired = any(counts.get(k) for k in STRICT_VERDICTS)
        return 1 if args.strict and (outcome.failed or outcome.warning or unpaired) else 0


#: the input flag of 8.1.1's dump compare (``msprobe -f pytorch compare -i compare.json``)
DUMP_COMPARE_FLAGS = ("-i", "--input_path")


def main(argv: Sequence[str] | None = None, prog: str = "msprobe-compare") -> int:
    """``prog``: the command as the user typed it (``msprobe compare`` through the dispatcher)."""
    return run_main(functools.partial(_main, prog=prog), argv)


def _main(argv: Sequence[str] | None = None, prog: str = "msprobe-compare") -> int:
    command = CompareCommand()
    parser = argparse.ArgumentParser(
        prog=prog,
        description=CompareCommand.__doc__,
        epilog="Example" + __doc__.split("Example", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.prepare_parser(parser)
    given = list(sys.argv[1:] if argv is None else argv)
    dump_compare = [a for a in given if a in DUMP_COMPARE_FLAGS or a.startswith("--input_path=")]
    if dump_compare and not any(
        a.startswith(("-npu", "-gpu", "--npu_csv_path", "--gpu_csv_path")) for a in given
    ):
        # 8.1.1's `msprobe -f pytorch compare -i compare.json -o out` compares two dumps: not this command
        return user_error(
            MsprobeError(
                f"{dump_compare[0].split('=', 1)[0]}: 8.1.1's dump compare (compare -i compare.json) is not "
                f"implemented here; {prog} compares two replays: -npu NPU_DETAILS -gpu GPU_DETAILS"
            )
        )
    args = parser.parse_args(given)
    try:
        return command.run(args)
    except MsprobeError as exc:
        if args.verbose:
            raise
        return user_error(exc)


if __name__ == "__main__":
    raise SystemExit(main())
