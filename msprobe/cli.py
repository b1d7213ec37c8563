"""``msprobe`` command: a thin dispatcher to one module per subcommand.

Each subcommand lives next to the stage it drives and exposes ``main(argv, prog) -> int`` (``prog``: the
command as typed, for its usage lines); this module only maps names to those functions (imported
lazily, so ``msprobe --help`` needs no torch).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata

from msprobe.errors import MsprobeError, one_line

# name -> ("module:function", one-line help). Upstream's spellings are kept as aliases.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("msprobe.demo:main", "built-in model with a planted fault: dump, replay twice, compare"),
    "run_ut": ("msprobe.run_ut.cli:main", "replay a dump as pytest cases (upstream's run_ut flags)"),
    "multi_run_ut": ("msprobe.run_ut.cli:main", "alias of run_ut (upstream's name for a run with -n)"),
    "compare": ("msprobe.compare.cli:main", "compare NPU and GPU details CSVs into verdicts and a report"),
    "api_precision_compare": ("msprobe.compare.cli:main", "alias of compare (upstream's name)"),
    "rebuild": (
        "msprobe.dump.cli:main",
        "rebuild dump.json/stack.json/construct.json from the journal of a crashed run",
    ),
}

USAGE = (
    "usage: msprobe [--version] {"
    + ",".join(SUBCOMMANDS)
    + "} [args...]\n\n"
    + "\n".join(f"  {name:<22} {text}" for name, (_, text) in SUBCOMMANDS.items())
)


def package_version() -> str:
    """The installed distribution's version (``msprobe 0.1.0``)."""
    try:
        return f"msprobe {metadata.version('msprobe')}"
    except metadata.PackageNotFoundError:
        return "msprobe (version unknown: not installed, run from a source tree)"


def option_value(args: Sequence[str], option: str, default: str) -> str:
    """The value of ``option`` in ``args`` (``--out X`` or ``--out=X``; the last one wins)."""
    value = default
    for i, arg in enumerate(args):
        if arg == option and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(option + "="):
            value = arg.split("=", 1)[1]
    return value


def _check_demo(args: Sequence[str]) -> None:
    """Before the demo starts: its extras are installed and ``--out`` could hold its files (the folder
    is not kept: the demo's own arguments are parsed before it creates anything)."""
    if any(a in ("-h", "--help", "--dump-child") for a in args):
        return
    from msprobe.extras import require
    from msprobe.paths import output_dir

    require("demo")
    output_dir(option_value(args, "--out", "msprobe_demo"), "--out", keep=False)


#: commands whose ``-v``/``--verbose`` asks for tracebacks; run_ut's ``-v`` is pytest's verbosity, so a
#: mistake there stays one line with its own exit status
TRACEBACK_VERBOSE = ("demo", "compare", "api_precision_compare", "rebuild")

#: name -> the checks of its arguments made before its module is imported (none: the module's own).
PRECHECKS: dict[str, Callable[[Sequence[str]], None]] = {"demo": _check_demo}


def _resolve(target: str) -> Callable[..., int]:
    module_name, func_name = target.split(":")
    return getattr(importlib.import_module(module_name), func_name)  # type: ignore[no-any-return]


FRAMEWORK_FLAGS = ("-f", "--framework")
FRAMEWORKS = ("pytorch", "pt", "mindspore", "ms")


#: commands that are 8.1.1's PyTorch API pre-check: under ``-f mindspore`` 8.1.1 runs its MindSpore
#: checker (``run_ut``, ``multi_run_ut``) or its dump compare (``compare``), none of which is here
PYTORCH_ONLY = ("run_ut", "multi_run_ut", "compare", "api_precision_compare")


def _drop_framework(args: list[str]) -> list[str]:
    """Upstream 8.1.1 spells commands ``msprobe -f pytorch run_ut ...``: accept and drop that prefix;
    a framework not in :data:`FRAMEWORKS` (or none) is one line naming the flag, and so is a
    MindSpore framework before a command that is PyTorch's only here."""
    if not args:
        return args
    flag, value = args[0], None
    if flag in FRAMEWORK_FLAGS:
        if len(args) < 2:
            raise MsprobeError(f"{flag}: expected a framework ({', '.join(FRAMEWORKS)})")
        value, rest = args[1], args[2:]
    elif flag.startswith("--framework="):
        flag, value = flag.split("=", 1)
        rest = args[1:]
    if value is None:
        return args
    if value not in FRAMEWORKS:
        raise MsprobeError(f"{flag} {value}: unknown framework ({', '.join(FRAMEWORKS)})")
    if value in ("mindspore", "ms") and rest and rest[0] in PYTORCH_ONLY:
        raise MsprobeError(
            f"{flag} {value} {rest[0]}: not supported: replay and compare here are PyTorch's only "
            "(8.1.1's MindSpore checker and dump compare are not implemented); use -f pytorch"
        )
    return rest


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
    print(one_line(exc), file=sys.stderr)
    return exc.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_main, argv)


def _main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _drop_framework(list(sys.argv[1:] if argv is None else argv))
    except MsprobeError as exc:
        return user_error(exc)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(package_version())
        return 0
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"msprobe: error: unknown command {name!r}\n{USAGE}", file=sys.stderr)
        return 2
    verbose = name in TRACEBACK_VERBOSE and ("-v" in rest or "--verbose" in rest)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s")
    try:
        PRECHECKS.get(name, lambda _: None)(rest)
        # usage and errors name the command as typed (``msprobe compare``, ``msprobe multi_run_ut``)
        return _resolve(SUBCOMMANDS[name][0])(rest, prog=f"msprobe {name}")
    except MsprobeError as exc:
        if verbose:
            raise
        return user_error(exc)
    except KeyboardInterrupt:
        print("msprobe: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
