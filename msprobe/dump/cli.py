"""``msprobe rebuild PATH...``: rebuild the json files of crashed dumps from their journals."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from msprobe.dump.writer import find_journals, rebuild
from msprobe.errors import MsprobeError
from msprobe.paths import missing


def main(argv: Sequence[str] | None = None, prog: str = "msprobe rebuild") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Rebuild dump.json, stack.json and construct.json (debug.json at level debug) from "
        "the journal a dump writes as it goes (use it after a crash or a kill). PATH may be a dump_path, "
        "a step or a rank folder.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(list(argv) if argv is not None else None)
    total = 0
    for root in args.paths:
        if not os.path.exists(root):
            raise missing(root, "")
        if not os.path.isdir(root):
            raise MsprobeError(f"{root}: a file, not a dump folder (give its rank folder or dump_path)")
        rank_dirs = find_journals(root)
        if not rank_dirs:
            raise MsprobeError(f"{root}: no journal found (nothing to rebuild; the dump ended cleanly?)")
        for rank_dir in rank_dirs:
            n = rebuild(rank_dir)
            if n is None:  # its dump ended cleanly while this rebuild ran (waited for another journal)
                print(f"{rank_dir}: its dump ended cleanly, nothing to rebuild")
                continue
            total += n
            print(f"{rank_dir}: {n} records rebuilt")
    return 0
