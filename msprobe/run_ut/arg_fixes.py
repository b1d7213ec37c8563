"""Argument fixes named by table entries (``prepare_spec`` / ``prepare``): behaviour, no API names.

Each function changes a record or the rebuilt arguments in place so that an API replays as upstream
8.1.1 replays it. torch is imported inside the functions: the table that names them stays torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
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


def argument_is(index: int, name: str, value: Any) -> Callable[[list[Any], dict[str, Any]], bool]:
    """Whether the rebuilt argument at positional ``index`` or keyword ``name`` is ``value``."""

    def test(args: list[Any], kwargs: dict[str, Any]) -> bool:
        given = kwargs[name] if name in kwargs else args[index] if len(args) > index else None
        return isinstance(given, type(value)) and given == value

    return test


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


INDEX_DTYPES = frozenset(("torch.int64", "torch.long", "torch.int32", "torch.int"))
"""The dtypes of index tensors (as a record spells them)."""


def _argument(record: dict[str, Any], index: int, name: str) -> Any:
    """The record's description of the argument at positional ``index`` or keyword ``name``."""
    args = record.get("input_args") or []
    if len(args) > index:
        return args[index]
    return (record.get("input_kwargs") or {}).get(name)


def _given(record: dict[str, Any], argument: tuple[int, str]) -> Any:
    """The value of a non-tensor argument (None when absent, or a tensor)."""
    spec = _argument(record, *argument)
    return spec.get("value") if isinstance(spec, dict) and "value" in spec else None


def no_repeats(
    argument: tuple[int, str],
    *,
    dim: tuple[int, str] | None = None,
    default_dim: int | None = None,
    unless: tuple[int, str] | None = None,
    dtypes: frozenset[str] | None = None,
) -> Callable[[dict[str, Any]], None]:
    """Tensors drawn from statistics with no value repeated: the argument ``argument`` (positional
    index, keyword), a tensor or a list holding tensors (of ``dtypes``, any when None), along the
    dimension the ``dim`` argument names, ``default_dim`` when it is absent (None: in the whole
    tensor), unless the argument ``unless`` is true (an ``accumulate``, a ``reduce``). Saved tensors
    keep their values. Where a device may resolve equal values otherwise than the CPU, without being
    wrong, drawn repeats would fail the replay:

    * a write through two equal indices keeps one of the written values, and which one CUDA and
      NPU keep is not defined (the CPU keeps the last);
    * sorting and selecting (``sort``, ``topk``, ``median``, ...) order equal values as the kernel
      goes, so the indices they return, and the gradients sent back through them, differ.
    """

    def prepare_spec(record: dict[str, Any]) -> None:
        from msprobe.run_ut.draws import DISTINCT_ALONG

        if unless is not None and _given(record, unless):
            return
        along = _given(record, dim) if dim is not None else None
        if not isinstance(along, int):
            along = default_dim
        spec = _argument(record, *argument)
        for item in spec if isinstance(spec, list) else [spec]:
            if (
                isinstance(item, dict)
                and "dtype" in item
                and (dtypes is None or str(item["dtype"]) in dtypes)
            ):
                item[DISTINCT_ALONG] = along

    return prepare_spec


def as_dtype(index: int, source: tuple[str, ...], target: str) -> Prepare:
    """Cast positional tensor ``index`` to ``torch.<target>`` when its dtype is one of ``source``."""

    def prepare(args: list[Any], kwargs: dict[str, Any]) -> None:
        import torch

        from msprobe.run_ut.arg_values import TensorArg

        arg = args[index] if len(args) > index else None
        if isinstance(arg, TensorArg) and str(arg.tensor.dtype) in source:
            args[index] = TensorArg(arg.tensor.to(getattr(torch, target)), arg.requires_grad)

    return prepare


def ascending(name: str) -> Prepare:
    """Sort the 1-D tensor of keyword ``name``: offsets that must increase (``grouped_mm``'s group
    ends), which a draw between Min and Max puts in any order. Offsets read from a tensor file are
    in order already."""

    def prepare(args: list[Any], kwargs: dict[str, Any]) -> None:
        from msprobe.run_ut.arg_values import TensorArg

        arg = kwargs.get(name)
        if isinstance(arg, TensorArg) and arg.tensor.dim() == 1:
            kwargs[name] = TensorArg(arg.tensor.sort().values, arg.requires_grad)

    return prepare


def tuple_index(args: list[Any], kwargs: dict[str, Any]) -> None:
    """A dumped multi-dimensional index is a JSON list; torch wants a tuple (a list is a tensor index).

    The dump writes ``x[i, j]`` (a tuple) and ``x[[i, j]]`` (a list, a tensor index) alike. A list
    of plain ints is taken as the tuple only when it can be one (one int per dimension, each in
    range); a list of bools is always a mask, as in torch."""
    if len(args) > 1 and isinstance(args[1], list):
        index = args[1]
        if index and all(isinstance(i, bool) for i in index):
            return
        if index and all(isinstance(i, int) for i in index) and not _names_an_element(args[0], index):
            return
        args[1] = tuple(index)


def _names_an_element(tensor_arg: Any, index: list[int]) -> bool:
    """Whether ``index`` read as a tuple of ints fits the shape of ``tensor_arg`` (a TensorArg)."""
    shape = getattr(getattr(tensor_arg, "tensor", None), "shape", None)
    if shape is None:
        return True
    return len(index) <= len(shape) and all(-n <= i < n for i, n in zip(index, shape))


def dtype_limits(posinf: tuple[int, str], neginf: tuple[int, str]) -> Prepare:
    """Spell out ``nan_to_num``'s default replacements of ``+inf``/``-inf`` (positional index or
    keyword ``posinf``, ``neginf``; left out or None): the largest and lowest finite values of the
    *input's* dtype. Left to the default, the bench raised to float64 puts float64's limits
    (``±1.8e308``) where a float32 device rightly put float32's (``±3.4e38``): a false error of an
    exact result. Given explicitly, both sides put the dumped dtype's limits."""

    def prepare(args: list[Any], kwargs: dict[str, Any]) -> None:
        import torch

        from msprobe.run_ut.arg_values import TensorArg

        arg = args[0] if args else kwargs.get("input", kwargs.get("self"))
        if not isinstance(arg, TensorArg):
            return
        dtype = arg.tensor.dtype
        if dtype.is_complex:
            dtype = dtype.to_real()  # nan_to_num replaces the parts' inf by the parts' limits
        if not dtype.is_floating_point:
            return
        info = torch.finfo(dtype)
        for (index, name), value in ((posinf, float(info.max)), (neginf, float(info.min))):
            if len(args) > index:
                if args[index] is None:
                    args[index] = value
            elif kwargs.get(name) is None:
                kwargs[name] = value

    return prepare
