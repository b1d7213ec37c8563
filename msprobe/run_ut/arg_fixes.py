"""Argument fixes named by table entries (``prepare_spec`` / ``prepare``): behaviour, no API names.

Each function changes a record or the rebuilt arguments in place so that an API replays as upstream
8.1.1 replays it. torch is imported inside the functions: the table that names them stays torch-free.
"""

from __future__ import annotations

from typing import Any

from msprobe.run_ut.api_info import Prepare


def zero_probability(index: int, name: str) -> Prepare:
    """Replay with the dropout probability at positional ``index`` or keyword ``name`` set to 0: a
    device's random mask is not the CPU's (8.1.1 replays ``dropout`` itself with p = 0)."""

    def prepare(args: list[Any], kwargs: dict[str, Any]) -> None:
        if len(args) > index and isinstance(args[index], (int, float)) and not isinstance(args[index], bool):
            args[index] = 0.0
        if name in kwargs:
            kwargs[name] = 0.0

    return prepare


zero_dropout = zero_probability(1, "p")
"""``dropout(input, p)`` replayed with p = 0."""


def class_index_target(record: dict[str, Any]) -> None:
    """cross_entropy's and nll_loss's target (argument 1): class indices start at 0 (a Min of -100 is
    their ignore_index) and are int64."""
    args = record.get("input_args") or []
    if len(args) > 1 and isinstance(args[1], dict):
        target = args[1]
        if isinstance(target.get("Min"), (int, float)) and target["Min"] <= 0:
            target["Min"] = 0
        # Drawn as int64; a saved target stays the int32 its file holds (``as_dtype`` casts it).
        if target.get("dtype") == "torch.int32" and not (target.get("data_name") or target.get("datapath")):
            target["dtype"] = "torch.int64"


def as_dtype(index: int, source: tuple[str, ...], target: str) -> Prepare:
    """Cast positional tensor ``index`` to ``torch.<target>`` when its dtype is one of ``source``."""

    def prepare(args: list[Any], kwargs: dict[str, Any]) -> None:
        import torch

        from msprobe.run_ut.inputs import TensorArg

        arg = args[index] if len(args) > index else None
        if isinstance(arg, TensorArg) and str(arg.tensor.dtype) in source:
            args[index] = TensorArg(arg.tensor.to(getattr(torch, target)), arg.requires_grad)

    return prepare


def tuple_index(args: list[Any], kwargs: dict[str, Any]) -> None:
    """A dumped multi-dimensional index is a JSON list; torch wants a tuple (a list is a tensor index)."""
    if len(args) > 1 and isinstance(args[1], list):
        args[1] = tuple(args[1])
