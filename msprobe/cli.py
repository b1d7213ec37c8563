"""``msprobe`` command: a thin dispatcher to one module per subcommand.

Each subcommand lives next to the stage it drives and exposes ``main(argv) -> int``; this module only
maps names to those functions (imported lazily, so ``msprobe --help`` needs no torch).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence

from msprobe.errors import MsprobeError

# name -> ("module:function", one-line help). Upstream's spellings are kept as aliases.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("msprobe.demo:main", "built-in model with a planted fault: dump, replay twice, compare"),
    "run_ut": ("msprobe.run_ut.cli:main", "replay a dump as pytest cases (upstream's run_ut flags)"),
    "compare": ("msprobe.compare.cli:main", "compare NPU and GPU details CSVs into verdicts and a report"),
    "api_precision_compare": ("msprobe.compare.cli:main", "alias of compare (upstream's name)"),
    "rebuild": ("msprobe.dump.cli:main", "rebuild dump.json/stack.json from the journal of a crashed run"),
}

USAGE = (
    "usage: msprobe {"
    + ",".join(SUBCOMMANDS)
    + "} [args...]\n\n"
    + "\n".join(f"  {name:<22} {text}" for name, (_, text) in SUBCOMMANDS.items())
)


def _resolve(target: str) -> Callable[[Sequence[str]], int]:
    module_name, func_name = target.split(":")
    return getattr(importlib.import_module(module_name), func_name)  # type: ignore[no-any-return]


FRAMEWORK_FLAGS = ("-f", "--framework")
FRAMEWORKS = ("pytorch", "pt", "mindspore", "ms")


def _drop_framework(args: list[str]) -> list[str]:
    """Upstream 8.1.1 spells commands ``msprobe -f pytorch run_ut ...``: accept and drop that prefix."""
    if len(args) >= 2 and args[0] in FRAMEWORK_FLAGS and args[1] in FRAMEWORKS:
        return args[2:]
    return args


def closed_stdout() -> int:
    """The reader of stdout went away (``msprobe ... | head -1``): stop quietly, no traceback.

    stdout is pointed at the null device so the interpreter's final flush cannot fail again; the
    status is the shell's for a process ended by SIGPIPE.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor (captured, replaced)
        pass
    return 141


def run_main(command: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None) -> int:
    """Every command line's outer frame: stdout flushed at the end, a closed stdout ends quietly."""
    try:
        try:
            return command(argv)
        finally:
            sys.stdout.flush()  # also after argparse's --help / usage exit
    except BrokenPipeError:
        return closed_stdout()


def user_error(exc: MsprobeError) -> int:
    """The one-line report of a user's mistake; its exit status."""
    print(f"msprobe: error: {exc}", file=sys.stderr)
    return exc.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_main, argv)


def _main(argv: Sequence[str] | None = None) -> int:
    args = _drop_framework(list(sys.argv[1:] if argv is None else argv))
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"msprobe: error: unknown command {name!r}\n{USAGE}", file=sys.stderr)
        return 2
    verbose = "-v" in rest or "--verbose" in rest
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s")
    try:
        return _resolve(SUBCOMMANDS[name][0])(rest)
    except MsprobeError as exc:
        if verbose:
            raise
        return user_error(exc)
    except KeyboardInterrupt:
        print("msprobe: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
