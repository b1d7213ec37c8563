"""Reading a record's tensor from the dump's data files (``.pt``, ``.npy``), safely.

Security: a ``data_name`` is resolved inside the dump's ``dump_tensor_data`` folder and must stay
there after symlinks are followed; ``.pt`` files are read with ``weights_only=True`` and must hold a
tensor; ``.npy`` files are read without pickle. Nothing from the dump is evaluated.
"""

from __future__ import annotations

import math
import os
import re
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from msprobe.run_ut.arg_values import InputError, parse_dtype

UNPICKLER_MARKER = "WeightsUnpickler error:"
MAX_REASON = 200
#: torch's boilerplate and advice around a weights_only refusal (e.g. to re-run with weights_only=False):
#: a security tool never passes that on; any clause containing one of these is dropped.
TORCH_ADVICE = (
    "weights_only",
    "weights only load failed",
    "re-running",
    "trust",
    "please",
    "documentation",
    "alternatively",
    "can still be loaded",
    "do it only",
    "allowlist",
)


def _refusal(exc: Exception, advice: tuple[str, ...] = TORCH_ADVICE) -> str:
    """The first clause of why a loader refused a file (``torch.load(weights_only=True)``, numpy's
    ``allow_pickle=False``), without the loader's ``advice`` to load it unsafely."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    if UNPICKLER_MARKER in text:
        text = text.split(UNPICKLER_MARKER, 1)[1]
    for line in text.splitlines():
        for clause in line.split(". "):
            clause = clause.strip().rstrip(".")
            if clause and not any(word in clause.lower() for word in advice):
                return clause[:MAX_REASON]
    return type(exc).__name__


#: numpy's advice around a refused ``.npy`` (to load it with ``allow_pickle=True``): never passed on.
NUMPY_ADVICE = ("trust", "unsafely", "pickle.load")


def _compressed_entry(path: Path) -> str | None:
    """The first compressed entry of a zip-format ``.pt``, None when there is none (or it is no zip:
    torch.load says what is wrong). torch.save stores every entry uncompressed; a deflated storage of
    zeros inflates about 1000-fold, so a 40 MB file would be 40 GB in memory before its shape is
    compared with the record's."""
    try:
        if not zipfile.is_zipfile(path):
            return None
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.compress_type != zipfile.ZIP_STORED:
                    return info.filename
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return None
    return None


def load_tensor(data_dir: Path, name: str) -> torch.Tensor:
    """Load one saved tensor, refusing paths that leave ``data_dir`` and files that are not tensors."""
    path = data_dir / name
    try:
        resolved = path.resolve(strict=True)
    except (FileNotFoundError, RuntimeError, OSError):
        raise InputError(f"{path}: no such tensor file") from None
    # The rank folder's own dump_tensor_data: a dump_tensor_data that is itself a symlink leaves the dump.
    if not resolved.is_relative_to(data_dir.parent.resolve() / data_dir.name):
        raise InputError(
            f"{path}: resolves outside the rank folder's own dump_tensor_data ({resolved}); "
            "refusing to read it"
        )
    if not resolved.is_file():  # a FIFO would block the replay forever, a device never ends
        raise InputError(f"{path}: not a regular file; refusing to read it")
    if resolved.suffix == ".npy":
        if (claim := _npy_overclaim(resolved)) is not None:
            raise InputError(f"{path}: not a plain numpy array ({claim}; refusing to allocate it)")
        try:
            return torch.from_numpy(np.load(resolved, allow_pickle=False))
        except (ValueError, TypeError, EOFError, OSError) as exc:  # TypeError: a dtype torch has not
            raise InputError(f"{path}: not a plain numpy array ({_refusal(exc, NUMPY_ADVICE)})") from None
    if resolved.suffix != ".pt":
        raise InputError(f"{path}: unsupported tensor file type {resolved.suffix!r} (expected .pt or .npy)")
    if (entry := _compressed_entry(resolved)) is not None:
        raise InputError(
            f"{path}: not a plain tensor file (its entry {entry!r} is compressed, which torch.save never "
            "writes; refusing to inflate it)"
        )
    try:
        with warnings.catch_warnings():  # "pickle protocol 4" notes are noise; a refusal raises
            warnings.simplefilter("ignore")
            value = torch.load(resolved, map_location="cpu", weights_only=True)
    except Exception as exc:  # weights_only refuses pickled objects with UnpicklingError and friends
        raise InputError(
            f"{path}: not a plain tensor file (weights_only=True refused it: {_refusal(exc)})"
        ) from None
    if not isinstance(value, torch.Tensor):
        raise InputError(f"{path}: holds a {type(value).__name__}, not a tensor")
    if value.is_meta:  # its values are nowhere: torch's "Cannot copy out of meta tensor" named no file
        raise InputError(f"{path}: holds a meta tensor (a shape without values), not a tensor's data")
    return value


def _npy_overclaim(path: Path) -> str | None:
    """Why an ``.npy`` file's header claims more data than the file holds (numpy allocates the claimed
    array before it finds the file short: a 100-byte file may ask for terabytes); None when it does not,
    or when the header is for ``np.load`` to refuse."""
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version in ((2, 0), (3, 0)):
                # 3.0 is 2.0 with a utf-8 header (numpy writes it for unicode field names) and np.load
                # reads it: read as 2.0 (latin-1), its shape and dtype's size are the same
                shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                return None
            held = os.fstat(fh.fileno()).st_size - fh.tell()
    except (ValueError, TypeError, EOFError, OSError, SyntaxError):
        return None
    if dtype.hasobject:
        return None
    claimed = math.prod(shape) * dtype.itemsize
    if claimed <= held:
        return None
    return f"its header claims shape {list(shape)} {dtype} ({claimed} bytes), the file holds {held}"


def _record_dtype(text: str) -> str:
    """A record's dtype as torch spells it (``torch.float`` is ``torch.float32``); others unchanged."""
    try:
        return str(parse_dtype(text))
    except InputError:
        return text


def as_recorded(tensor: torch.Tensor, spec: Mapping[str, Any], path: Path) -> torch.Tensor:
    """A loaded data file's tensor, refused when its shape or dtype is not the record's.

    One difference is accepted: numpy has no bfloat16, so a dump stores a bfloat16 tensor in a
    ``.npy`` as float32 (exact values); it is cast back to the recorded bfloat16.
    """
    shape, dtype = list(spec["shape"]), _record_dtype(str(spec["dtype"]))
    if tensor.is_nested:  # its .shape raises torch's "Internal error ... Please file an issue"
        raise InputError(f"{path}: holds a nested tensor, the record a tensor of shape {shape}")
    if list(tensor.shape) != shape:
        raise InputError(f"{path}: shape {list(tensor.shape)} in the file, {shape} in the record")
    if path.suffix == ".npy" and tensor.dtype == torch.float32 and dtype == str(torch.bfloat16):
        return tensor.to(torch.bfloat16)
    if str(tensor.dtype) != dtype:
        parse_dtype(dtype)  # one the replay cannot run (float8, which the dump saves as float32): that reason
        raise InputError(f"{path}: dtype {tensor.dtype} in the file, {dtype} in the record")
    return tensor
