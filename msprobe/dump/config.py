"""config.json + constructor arguments -> one validated, immutable :class:`DumpConfig` (upstream 8.1.1).

Precedence: constructor argument > config.json > built-in default. Every error is one line naming
where the wrong value came from (the user's config.json, or the constructor argument), the field, the
value and the allowed values; the packaged default config, which the user never wrote, is never blamed.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from msprobe.dump.exceptions import FileCheckException, MsprobeException, ScopeException
from msprobe.dump.filters import DATA_MODES, DataMode
from msprobe.dump.steps import parse_index_list
from msprobe.formats.dump_json import json_problem
from msprobe.formats.record_names import SCOPE_API_RE, SCOPE_MODULE_RE

UPSTREAM_TASKS = (
    "tensor",
    "statistics",
    "overflow_check",
    "free_benchmark",
    "run_ut",
    "grad_probe",
    "structure",
)
SUPPORTED_TASKS = ("statistics", "tensor", "structure")
LEVELS = ("L0", "L1", "L2", "mix", "debug")
SUPPORTED_LEVELS = ("L0", "L1", "mix", "debug")
MODULE_LEVELS = ("L0", "mix")  # the levels that record modules (PyTorch) or Cells (MindSpore)
API_LEVELS = ("L1", "mix")  # the levels that record API calls
SUMMARY_MODES = ("statistics", "md5")
FILE_FORMATS = ("npy", "bin")
CONFIG_PATH_RE = re.compile(r"^[a-zA-Z0-9_.:/-]+$")
DUMP_PATH_RE = re.compile(r"^[a-zA-Z0-9_./-]+$")
MAX_CONFIG_BYTES = 1 << 30

_INVALID = MsprobeException.INVALID_PARAM_ERROR
log = logging.getLogger("msprobe")

# Every key 8.1.1 documents, top level and per task section (also the ones read but not acted on).
TOP_KEYS = ("task", "dump_path", "rank", "step", "level", "enable_dataloader", "async_dump", *UPSTREAM_TASKS)
SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "statistics": ("scope", "list", "tensor_list", "data_mode", "summary_mode", "device", "precision"),
    "tensor": (
        "scope",
        "list",
        "data_mode",
        "summary_mode",
        "file_format",
        "online_run_ut",
        "nfs_path",
        "host",
        "port",
        "tls_path",
        "online_run_ut_recompute",
    ),
    "overflow_check": ("overflow_nums", "check_mode"),
    "free_benchmark": (
        "scope",
        "list",
        "fuzz_device",
        "pert_mode",
        "handler_type",
        "fuzz_level",
        "fuzz_stage",
        "if_preheat",
        "preheat_step",
        "max_sample",
    ),
    "run_ut": (
        "white_list",
        "black_list",
        "error_data_path",
        "is_online",
        "nfs_path",
        "host",
        "port",
        "rank_list",
        "tls_path",
    ),
    "grad_probe": ("grad_level", "param_list", "bounds"),
    "structure": (),
}


def _task_choices(task: Any) -> str:
    """The tasks this dump runs, then the wrong value (one line; "task must be one of " + this)."""
    unsupported = [t for t in UPSTREAM_TASKS if t not in SUPPORTED_TASKS]
    return (
        f"{list(SUPPORTED_TASKS)} (8.1.1's {', '.join(unsupported)} are not supported by this dump), "
        f"got {task!r}"
    )


def default_config_path() -> str:
    """The packaged default config.json (task statistics, level L1, ``./dump_path``)."""
    return str(resources.files("msprobe.dump").joinpath("config.json"))


@dataclass(frozen=True)
class DumpConfig:
    task: str = "statistics"
    dump_path: str = "./dump_path"
    level: str = "L1"
    rank: tuple[int, ...] = ()
    step: tuple[int, ...] = ()
    enable_dataloader: bool = False
    async_dump: bool = False
    scope: tuple[str, ...] = ()
    list: tuple[str, ...] = ()
    tensor_list: tuple[str, ...] = ()
    data_mode: DataMode = field(default_factory=DataMode)
    summary_mode: str = "statistics"
    file_format: str | None = None
    config_path: str = ""

    @property
    def saves_tensors(self) -> bool:
        """Whether ``.pt`` files (and ``dump_tensor_data/``) are written."""
        return self.task == "tensor" or (self.task == "statistics" and bool(self.tensor_list))

    @property
    def records_modules(self) -> bool:
        """Whether this level records modules / Cells (:data:`MODULE_LEVELS`)."""
        return self.level in MODULE_LEVELS

    @property
    def records_apis(self) -> bool:
        """Whether this level records API calls (:data:`API_LEVELS`)."""
        return self.level in API_LEVELS

    @property
    def records_calls(self) -> bool:
        """Whether this level records module or API calls (every level but ``debug``)."""
        return self.records_modules or self.records_apis

    @property
    def md5(self) -> bool:
        return self.summary_mode == "md5" and not self.async_dump


#: MindSpore's static-graph dump settings, which its config.json may hold (8.1.1 checks them): a
#: ``summary_mode`` list of statistics, and the kernel-by-kernel dump's ``device`` and ``precision``.
MS_SUMMARY_LIST = ("md5", "max", "min", "mean", "l2norm")
MS_KBK_KEYS = {"device": ("device", "host"), "precision": ("high", "low")}


def _mindspore_static_graph_keys(section: dict[str, Any], task: str, summary_mode: Any, where: str) -> Any:
    """Check MindSpore's static-graph keys as 8.1.1 does; a valid ``summary_mode`` list becomes
    ``statistics`` (a PyNative dump records Max, Min, Mean and Norm), said once."""
    if task == "statistics":
        for key, allowed in MS_KBK_KEYS.items():
            value = section.get(key)
            if value is not None and value not in allowed:
                raise _fail(
                    f"{where}.{key}", f"Config param [{key}] is invalid, {value!r} is not in {list(allowed)}"
                )
    if not isinstance(summary_mode, list):
        return summary_mode
    if not summary_mode or not all(isinstance(m, str) and m in MS_SUMMARY_LIST for m in summary_mode):
        raise _fail(
            f"{where}.summary_mode",
            f"summary_mode is invalid, {summary_mode!r}: a list must hold some of {list(MS_SUMMARY_LIST)}",
        )
    log.warning(
        "msprobe: %s.summary_mode: a list selects the statistics of MindSpore's static-graph dump; this "
        "PyNative dump records Max, Min, Mean and Norm (summary_mode 'statistics')",
        where,
    )
    return "statistics"


def _fail(where: str, msg: str) -> MsprobeException:
    return MsprobeException(_INVALID, f"{where}: {msg}" if where else msg)


def check_config_path(config_path: str) -> str:
    """Upstream 8.1.1's file checks on the config path; returns the real path."""
    if not os.path.exists(config_path):
        raise FileCheckException(f"config_path {config_path}: the file does not exist")
    if os.path.islink(config_path):
        raise FileCheckException(f"config_path {config_path}: a symbolic link is not allowed")
    real = os.path.realpath(config_path)
    if not os.path.isfile(real):
        raise FileCheckException(f"config_path {config_path}: not a regular file")
    if not real.endswith(".json"):
        raise FileCheckException(f"config_path {config_path}: the file name must end in .json")
    if not CONFIG_PATH_RE.match(real):
        raise FileCheckException(
            f"config_path {config_path}: the path contains characters outside [a-zA-Z0-9_.:/-]"
        )
    if not os.access(real, os.R_OK):
        raise FileCheckException(f"config_path {config_path}: the file is not readable")
    if os.path.getsize(real) > MAX_CONFIG_BYTES:
        raise FileCheckException(f"config_path {config_path}: the file is larger than 1 GiB")
    return real


def read_config_file(config_path: str) -> dict[str, Any]:
    real = check_config_path(config_path)
    try:
        with open(real, encoding="utf-8-sig") as fh:
            data = json.load(fh)
    except (ValueError, RecursionError) as exc:
        raise _fail(config_path, f"not valid JSON ({json_problem(exc)})") from None
    except OSError as exc:
        raise FileCheckException(f"config_path {config_path}: cannot read ({exc.strerror})") from None
    if not isinstance(data, dict):
        raise _fail(config_path, f"the top level must be a JSON object, got {type(data).__name__}")
    return data


def check_dump_path(dump_path: str, where: str = "") -> None:
    """``dump_path`` must use safe characters and be creatable/writable (checked before any dump)."""
    # os.path.realpath raises a bare ValueError on a NUL byte: such a path fails the character check
    real = dump_path if "\x00" in dump_path else os.path.realpath(dump_path)
    if len(real) > 4096 or any(len(part) > 255 for part in real.split(os.sep)):
        raise _fail(where, f"dump_path {dump_path!r} is too long (4096 chars, 255 per name)")
    if not DUMP_PATH_RE.match(real):
        resolved = "" if real == dump_path else f" (resolved to {real!r})"
        raise _fail(where, f"dump_path {dump_path!r}{resolved} contains characters outside [a-zA-Z0-9_./-]")
    # a symbolic link to a missing target: realpath resolves it, but creating the folder through it fails
    part = os.path.abspath(dump_path)
    while part != os.path.dirname(part):
        if os.path.islink(part) and not os.path.exists(part):
            raise _fail(
                where,
                f"dump_path {dump_path!r} is not writable: {part} is a symbolic link to a missing target",
            )
        part = os.path.dirname(part)
    probe = real
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise _fail(where, f"dump_path {dump_path!r} is not writable: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise _fail(where, f"dump_path {dump_path!r} is not writable (no write permission on {probe})")


def did_you_mean(key: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def warn_unknown_keys(raw: dict[str, Any], task: str, where: str) -> None:
    """One warning line per key 8.1.1 does not know (it would be ignored), top level and sections."""
    for key in raw:
        if key in TOP_KEYS:
            continue
        hint = did_you_mean(key, TOP_KEYS)
        homes = [sec for sec in (task, "statistics", "tensor") if key in SECTION_KEYS.get(sec, ())]
        if homes:
            hint = f"; it belongs in the {homes[0]!r} section"
        log.warning("msprobe: %s: unknown top-level key %r is ignored%s", where, key, hint)
    for sec, keys in SECTION_KEYS.items():
        body = raw.get(sec)
        if not isinstance(body, dict):
            continue
        for key in body:
            if key not in keys:
                log.warning(
                    "msprobe: %s: unknown key %r in the %r section is ignored%s",
                    where,
                    key,
                    sec,
                    did_you_mean(key, keys),
                )


def _str_list(value: Any, name: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(where, f"{name} is invalid, it should be a list[str], got {value!r}")
    return tuple(value)


def _bool(value: Any, name: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(where, f"{name} is invalid, it should be a boolean (true or false), got {value!r}")
    return value


def _data_mode(value: Any, where: str) -> DataMode:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise _fail(where, f"data_mode is invalid, it should be a non-empty list[str] of {list(DATA_MODES)}")
    for item in value:
        if item not in DATA_MODES:
            raise _fail(where, f"The element '{item}' of data_mode {value} is not in {list(DATA_MODES)}.")
    if "all" in value and len(value) > 1:
        raise _fail(where, f"data_mode {value}: 'all' cannot be combined with other options in data_mode.")
    if len(value) > 4:
        raise _fail(where, f"data_mode {value} has more than 4 items")
    return DataMode(tuple(value))


def _scope(value: Any, level: str, where: str) -> tuple[str, ...]:
    loc = f"{where}: " if where else ""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ScopeException(ScopeException.InvalidScope, f"{loc}scope must be a list[str], got {value!r}")
    if not value:
        return ()
    if len(value) != 2:
        raise ScopeException(
            ScopeException.InvalidScope,
            f"{loc}scope must be a list of length 2 [start, end], got length {len(value)}: {value}",
        )
    patterns = {"L1": [SCOPE_API_RE], "L0": [SCOPE_MODULE_RE], "mix": [SCOPE_API_RE, SCOPE_MODULE_RE]}
    allowed = patterns.get(level, [SCOPE_API_RE, SCOPE_MODULE_RE])
    kinds = set()
    for name in value:
        hit = [p for p in allowed if p.match(name)]
        if not hit:
            want = {
                "L1": "API names like Functional.linear.0.forward",
                "L0": "module names like Module.fc.Linear.forward.0 (MindSpore: Cell.fc.Dense.forward.0)",
            }.get(level, "API or module record names")
            raise ScopeException(
                ScopeException.InvalidScope,
                f"{loc}scope item {name!r} is not valid at level {level}: use {want}",
            )
        kinds.add(hit[0] is SCOPE_MODULE_RE)
    if level != "mix" and len(kinds) > 1:
        raise ScopeException(ScopeException.InvalidScope, f"{loc}scope {value} mixes API and module names")
    return tuple(value)


def build_config(
    config_path: str | None = None,
    task: str | None = None,
    dump_path: str | None = None,
    level: str | None = None,
    step: Sequence[int | str] | None = None,
    framework: str = "pytorch",
) -> DumpConfig:
    """Validate the constructor arguments, read the file, apply precedence, return a DumpConfig.
    ``framework``: ``mindspore`` reads the static-graph keys MindSpore's config holds too."""
    if config_path is not None and not isinstance(config_path, str):
        raise MsprobeException(_INVALID, f"config_path must be a string, got {type(config_path).__name__}")
    if task is not None and task not in UPSTREAM_TASKS:
        raise MsprobeException(_INVALID, f"task must be one of {_task_choices(task)}")
    if dump_path is not None and not isinstance(dump_path, str):
        raise MsprobeException(_INVALID, f"dump_path must be a string, got {type(dump_path).__name__}")
    if level is not None and level not in LEVELS:
        raise MsprobeException(_INVALID, f"level must be one of {LEVELS}, got {level!r}")
    path = config_path or default_config_path()
    raw = read_config_file(path)
    where = config_path or ""  # the user's file; errors in the packaged default name no file

    def origin(argument: object, name: str) -> str:
        return f"PrecisionDebugger({name}=...)" if argument is not None else where

    cfg_task = task if task is not None else raw.get("task", "statistics")
    if not isinstance(cfg_task, str) or cfg_task not in UPSTREAM_TASKS:
        raise _fail(where, f"task is invalid, it should be one of {_task_choices(cfg_task)}")
    if cfg_task not in SUPPORTED_TASKS:
        raise _fail(
            origin(task, "task"),
            f"task {cfg_task!r} is not supported by this dump; use one of {list(SUPPORTED_TASKS)}"
            if cfg_task in UPSTREAM_TASKS
            else f"task is invalid, it should be one of {_task_choices(cfg_task)}",
        )
    cfg_level = level if level is not None else raw.get("level", "L1")
    if not isinstance(cfg_level, str) or cfg_level not in LEVELS:
        raise _fail(
            origin(level, "level"), f"level is invalid, it should be one of {list(LEVELS)}, got {cfg_level!r}"
        )
    if cfg_level not in SUPPORTED_LEVELS:
        raise _fail(
            origin(level, "level"),
            f"level {cfg_level!r} needs an Ascend NPU kernel dump; use one of {list(SUPPORTED_LEVELS)}",
        )
    if cfg_task == "structure" and cfg_level not in MODULE_LEVELS:
        log.warning(
            "msprobe: %slevel %r is not available with task 'structure' (L0 or mix); level mix is used",
            f"{origin(level, 'level')}: " if origin(level, "level") else "",
            cfg_level,
        )
        cfg_level = "mix"
    if where:
        warn_unknown_keys(raw, cfg_task, where)
    cfg_dump_path = dump_path or raw.get("dump_path")  # 8.1.1: ``dump_path`` argument or the file's
    if cfg_dump_path is None:
        raise _fail(
            where, "The dump_path not found: set dump_path in config.json or PrecisionDebugger(dump_path=)"
        )
    if not isinstance(cfg_dump_path, str) or not cfg_dump_path:
        raise _fail(where, f"dump_path is invalid, it should be a non-empty string, got {cfg_dump_path!r}")
    check_dump_path(cfg_dump_path, origin(dump_path or None, "dump_path"))
    steps = (
        parse_index_list(step, "step", "PrecisionDebugger(step=...)")
        if step is not None
        else parse_index_list(raw.get("step", []), "step", where)
    )
    ranks = parse_index_list(raw.get("rank", []), "rank", where)
    enable_dataloader = _bool(raw.get("enable_dataloader", False), "enable_dataloader", where)
    async_dump = _bool(raw.get("async_dump", False), "async_dump", where)
    section = raw.get(cfg_task, {}) if cfg_task != "structure" else {}
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise _fail(where, f"the {cfg_task!r} section must be a JSON object, got {section!r}")
    sec_where = f"{where}: {cfg_task}" if where else cfg_task
    scope = _scope(section.get("scope", []), cfg_level, f"{sec_where}.scope")
    names = _str_list(section.get("list", []), "list", f"{sec_where}.list")
    tensor_list: tuple[str, ...] = ()
    if cfg_task == "statistics":
        tensor_list = _str_list(section.get("tensor_list", []), "tensor_list", f"{sec_where}.tensor_list")
        if tensor_list and cfg_level == "debug":
            log.warning("msprobe: %s.tensor_list is ignored at level debug (as in 8.1.1)", sec_where)
            tensor_list = ()
    data_mode = _data_mode(section.get("data_mode", ["all"]), f"{sec_where}.data_mode")
    summary_mode = section.get("summary_mode", "statistics")
    if framework == "mindspore":
        summary_mode = _mindspore_static_graph_keys(section, cfg_task, summary_mode, sec_where)
    if summary_mode not in SUMMARY_MODES:
        raise _fail(
            f"{sec_where}.summary_mode",
            f"summary_mode is invalid, {summary_mode!r} is not in {list(SUMMARY_MODES)}.",
        )
    if async_dump and summary_mode == "md5":
        log.warning(
            "msprobe: %sasync_dump is true, so summary_mode 'md5' is ignored (statistics only, as in 8.1.1)",
            f"{where}: " if where else "",
        )
    file_format = section.get("file_format")
    if cfg_task == "tensor" and file_format is not None and file_format not in FILE_FORMATS:
        raise _fail(
            f"{sec_where}.file_format",
            f"file_format is invalid, {file_format!r} is not in {list(FILE_FORMATS)}",
        )
    if async_dump and cfg_task == "tensor" and cfg_level != "debug" and not names:
        raise _fail(
            where,
            "The parameters async_dump is true in tensor task, the parameters list cannot be empty.",
        )
    return DumpConfig(
        task=cfg_task,
        dump_path=cfg_dump_path,
        level=cfg_level,
        rank=ranks,
        step=steps,
        enable_dataloader=enable_dataloader,
        async_dump=async_dump,
        scope=scope,
        list=names,
        tensor_list=tensor_list,
        data_mode=data_mode,
        summary_mode=summary_mode,
        file_format=file_format,
        config_path=path,
    )
