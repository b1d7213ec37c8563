"""``-save_error_data``: the inputs and outputs of every API that did not pass, as ``.pt`` files.

Names as upstream: ``{api}.forward.input.{i}.pt``,
``{api}.forward.output.bench.{i}.pt``, ``{api}.forward.output.device.{i}.pt``,
``{api}.backward.input.{i}.pt``, ``{api}.backward.output.{bench,device}.{i}.pt``; ``i`` counts every leaf
(None and scalars take an index too). Deviation: kwarg tensors continue the argument numbering instead
of restarting at 0, so they never overwrite an argument's file. Each API writes only its own files,
so xdist workers never share one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from msprobe.errors import first_line
from msprobe.formats.record_names import data_file_name
from msprobe.run_ut.arg_values import TensorArg, leaves


def _leaves(value: Any) -> Iterator[Any]:
    return (leaf.tensor if isinstance(leaf, TensorArg) else leaf for leaf in leaves(value))


class ErrorDataNotSaved(Exception):
    """One file of ``-save_error_data`` could not be written (its one-line reason names it)."""


def needs_saving(result_row: list[Any]) -> bool:
    """Forward not pass, or backward neither pass nor blank (backward SKIP counts, as upstream)."""
    return result_row[1] != "pass" or result_row[2] not in ("pass", " ")


def save(folder: Path, api: str, saved: dict[str, Any]) -> list[Path]:
    """Write the tensors of one API; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for part, value in saved.items():
        if value is None:
            continue
        for i, leaf in enumerate(_leaves(value)):
            if isinstance(leaf, torch.Tensor):
                path = folder / data_file_name(api, part, (i,))
                try:
                    torch.save(leaf.detach().cpu().contiguous(), path)
                except (OSError, RuntimeError) as exc:  # a name over 255 bytes, a full disk: torch's
                    # RuntimeError ("[enforce fail at inline_container.cc ...]") names no file
                    reason = first_line(exc).rpartition("strerror: ")[2]
                    raise ErrorDataNotSaved(f"{path}: cannot save ({reason})") from None
                written.append(path)
    return written
