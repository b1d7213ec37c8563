"""Compare a dump folder with an upstream fixture: names, order, shapes, dtypes, statistics, files.

The fixtures were made on another CPU, whose conv and matmul kernels may round differently from this
one's (oneDNN picks AVX2 or AVX-512 code at run time): statistics are compared to a few float32 ulp,
and an ``md5`` (the CRC-32 of a tensor's bytes) is never compared with upstream's, except for the
tensors whose bytes are known to be upstream's (data and initial weights made from the same seeds).
:func:`md5_problems` checks the hash itself, on bytes that are known: a dump's md5 against the tensor
files of a tensor dump of the same run.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator
from typing import Any

import numpy as np

STAT_KEYS = ("Max", "Min", "Mean", "Norm")
REL_TOL = 2e-6  # device reductions vs correctly rounded host reductions: a few float32 ulp


def load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        if math.isnan(a) and math.isnan(b):
            return True
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-7)
    return a == b


def diff_values(ours: Any, theirs: Any, where: str, out: list[str]) -> None:
    if isinstance(theirs, dict) and theirs.get("type") == "mindspore.Tensor":
        if not isinstance(ours, dict):
            out.append(f"{where}: expected a tensor, got {ours!r}")
            return
        for key in ("type", "dtype", "shape", "data_name"):
            if ours.get(key) != theirs.get(key):
                out.append(f"{where}.{key}: {ours.get(key)!r} != {theirs.get(key)!r}")
        if "md5" in theirs and not re.fullmatch(r"[0-9a-f]{8}", str(ours.get("md5"))):
            out.append(f"{where}.md5: {ours.get('md5')!r} is not a CRC-32 in 8 hex digits")
        if list(ours) != list(theirs):
            out.append(f"{where}: keys {list(ours)} != {list(theirs)}")
        for key in STAT_KEYS:
            if not _close(ours.get(key), theirs.get(key)):
                out.append(f"{where}.{key}: {ours.get(key)!r} != {theirs.get(key)!r}")
        return
    if isinstance(theirs, dict):
        if not isinstance(ours, dict) or list(ours) != list(theirs):
            out.append(f"{where}: keys {list(ours) if isinstance(ours, dict) else ours!r} != {list(theirs)}")
            return
        for k in theirs:
            diff_values(ours[k], theirs[k], f"{where}.{k}", out)
        return
    if isinstance(theirs, list):
        if not isinstance(ours, list) or len(ours) != len(theirs):
            out.append(f"{where}: {ours!r} != {theirs!r}")
            return
        for i, (a, b) in enumerate(zip(ours, theirs)):
            diff_values(a, b, f"{where}[{i}]", out)
        return
    if ours != theirs:
        out.append(f"{where}: {ours!r} != {theirs!r}")


def compare_rank(ours_dir: str, theirs_dir: str, check_order: bool = True) -> list[str]:
    """Differences between two rank folders (empty list = same)."""
    out: list[str] = []
    data_file = "debug.json" if os.path.exists(os.path.join(theirs_dir, "debug.json")) else "dump.json"
    ours, theirs = load(os.path.join(ours_dir, data_file)), load(os.path.join(theirs_dir, data_file))
    for key in ("task", "level", "framework"):
        if ours.get(key) != theirs.get(key):
            out.append(f"{data_file} {key}: {ours.get(key)!r} != {theirs.get(key)!r}")
    if (ours.get("dump_data_dir") is None) != (theirs.get("dump_data_dir") is None):
        out.append(f"dump_data_dir: {ours.get('dump_data_dir')!r} vs {theirs.get('dump_data_dir')!r}")
    a, b = ours["data"], theirs["data"]
    if set(a) != set(b):
        out.append(f"records only ours: {sorted(set(a) - set(b))}; only upstream: {sorted(set(b) - set(a))}")
    elif check_order and list(a) != list(b):
        out.append(f"record order differs: {list(a)} != {list(b)}")
    for name in b:
        if name in a:
            diff_values(a[name], b[name], name, out)
    if data_file == "dump.json":
        ca = load(os.path.join(ours_dir, "construct.json"))
        cb = load(os.path.join(theirs_dir, "construct.json"))
        if ca != cb:
            keys = sorted(set(ca) | set(cb))
            bad = [
                (k, ca.get(k, "<missing>"), cb.get(k, "<missing>"))
                for k in keys
                if ca.get(k, 0) != cb.get(k, 0)
            ]
            out.append(f"construct.json differs: {bad}")
    td_a, td_b = os.path.join(ours_dir, "dump_tensor_data"), os.path.join(theirs_dir, "dump_tensor_data")
    files_a = sorted(os.listdir(td_a)) if os.path.isdir(td_a) else []
    files_b = sorted(os.listdir(td_b)) if os.path.isdir(td_b) else []
    if files_a != files_b:
        out.append(
            f"tensor files only ours: {sorted(set(files_a) - set(files_b))}; "
            f"only upstream: {sorted(set(files_b) - set(files_a))}"
        )
    return out


def tensor_leaves(value: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(place, tensor entry) for every MindSpore tensor in a record structure, in document order."""
    if isinstance(value, dict) and value.get("type") == "mindspore.Tensor":
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from tensor_leaves(item, f"{where}.{key}" if where else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from tensor_leaves(item, f"{where}[{i}]")


def md5_problems(md5_dir: str, tensor_dir: str, crc32_hex: Any) -> list[str]:
    """Where an ``md5`` of the dump in ``md5_dir`` is not ``crc32_hex`` of the tensor file that the
    tensor dump in ``tensor_dir`` (the same run, task ``tensor``) saved at the same place."""
    files = {
        where: leaf["data_name"]
        for where, leaf in tensor_leaves(load(os.path.join(tensor_dir, "dump.json"))["data"])
        if "data_name" in leaf
    }
    out: list[str] = []
    checked = 0
    for where, leaf in tensor_leaves(load(os.path.join(md5_dir, "dump.json"))["data"]):
        if where not in files:
            out.append(f"{where}: the tensor dump saved no file for it")
            continue
        array = np.load(os.path.join(tensor_dir, "dump_tensor_data", files[where]), allow_pickle=False)
        if leaf.get("md5") != crc32_hex(array):
            out.append(f"{where}.md5: {leaf.get('md5')!r} != CRC-32 of {files[where]} {crc32_hex(array)!r}")
        checked += 1
    if not checked:
        out.append(f"{md5_dir}: no md5 entries")
    return out
