"""What replay knows about individual APIs: one declarative ``ApiInfo`` entry per API, like OpInfo.

Generic code (inputs, execution, plugin) never tests an API name; per-API knowledge lives here as data:
how the bench side upcasts, which output drives backward, fixed backward messages, argument tweaks,
and ``Skip`` entries with their reasons. Lookup order: exact bare name -> family default of the API
type (``NAMESPACES``). Fused NPU/MindSpeed ops come from the ``FUSED_OPS`` table of
``msprobe.run_ut.npu_ops`` (see :func:`fused_ops`, the one place that wiring lives).

Sources: ``shared/spec/run_ut_compare.md`` §4.1-4.6, ``run_ut_compare_v811.md`` §3.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

NOT_SUPPORTED = "API {name} not support for run ut. SKIP."
NO_BACKWARD_DATA = "This API does not have backward input data, skip backward."
NO_BACKWARD_UT = "This API does not support backward ut, skip backward."


@dataclass(frozen=True)
class Skip:
    """A known reason not to replay an API, scoped like OpInfo's ``DecorateInfo``."""

    reason: str
    device: str | None = None  # "cpu" / "cuda" / "npu"; None: every device
    dtypes: tuple[str, ...] = ()  # input dtype strings ("torch.float16"); empty: any
    issue: str = ""

    def applies(self, device_type: str, input_dtypes: Collection[str]) -> bool:
        if self.device is not None and self.device != device_type:
            return False
        return not self.dtypes or any(d in self.dtypes for d in input_dtypes)


Prepare = Callable[[list[Any], dict[str, Any]], None]


@dataclass(frozen=True)
class ApiInfo:
    """Replay facts of one API (bare name, e.g. ``linear``); every field but ``name`` defaults."""

    name: str
    family: str = "plain"
    upcast: bool = True  # bench side raises fp16/bf16/fp32 inputs (spec §4.2); type_as never
    upcast_fp32: bool = True  # fp32 -> fp64 on the bench side (conv keeps fp32: HF32 semantics)
    hf32: bool = False  # fp32 inputs rounded to HF32 on both sides (conv1d/conv2d, spec §4.1)
    grad_index: int | None = None  # which output drives backward when the output is a tuple
    backward_message: str | None = None  # fixed backward SKIP message (spec §4.6)
    prepare_spec: Callable[[dict[str, Any]], None] | None = None  # tweak the record before building
    prepare: Prepare | None = None  # tweak the rebuilt CPU args before both sides are made
    reference: Callable[..., Any] | None = None  # run this instead of the framework function
    forward_outputs: tuple[int, ...] | None = None  # indices of the compared outputs (None = all)
    skips: tuple[Skip, ...] = ()

    def skip_reason(self, device_type: str, input_dtypes: Collection[str]) -> str | None:
        for skip in self.skips:
            if skip.applies(device_type, input_dtypes):
                return skip.reason
        return None


@dataclass(frozen=True)
class ConvInfo(ApiInfo):
    """conv1d/conv2d: fp32 stays fp32 on the bench side, inputs rounded to HF32 (spec §4.1, §4.2)."""

    family: str = "conv"
    upcast_fp32: bool = False
    hf32: bool = True


def _zero_dropout(args: list[Any], kwargs: dict[str, Any]) -> None:
    """8.1.1 replays dropout with p = 0 (``run_ut_compare_v811.md`` §3)."""
    if len(args) > 1 and isinstance(args[1], (int, float)):
        args[1] = 0.0
    if "p" in kwargs:
        kwargs["p"] = 0.0


@dataclass(frozen=True)
class DropoutInfo(ApiInfo):
    family: str = "dropout"
    prepare: Prepare | None = field(default=_zero_dropout)


def _cross_entropy_spec(record: dict[str, Any]) -> None:
    args = record.get("input_args") or []
    if len(args) > 1 and isinstance(args[1], dict):
        target = args[1]
        if isinstance(target.get("Min"), (int, float)) and target["Min"] <= 0:
            target["Min"] = 0
        if target.get("dtype") == "torch.int32":
            target["dtype"] = "torch.int64"


def _as_dtype(index: int, source: tuple[str, ...], target: str) -> Prepare:
    def prepare(args: list[Any], kwargs: dict[str, Any]) -> None:
        import torch

        from msprobe.run_ut.inputs import TensorArg

        arg = args[index] if len(args) > index else None
        if isinstance(arg, TensorArg) and str(arg.tensor.dtype) in source:
            args[index] = TensorArg(arg.tensor.to(getattr(torch, target)), arg.requires_grad)

    return prepare


def _tuple_index(args: list[Any], kwargs: dict[str, Any]) -> None:
    """A dumped multi-dimensional index is a JSON list; torch wants a tuple (a list is a tensor index)."""
    if len(args) > 1 and isinstance(args[1], list):
        args[1] = tuple(args[1])


RANDOM_REASON = "random values: the device's and the CPU's generators differ, nothing to compare"
_RANDOM = (Skip(RANDOM_REASON, device="cuda"), Skip(RANDOM_REASON, device="npu"))
_RANDOM_APIS = (
    "rand randn randint randperm rand_like randn_like randint_like bernoulli bernoulli_ normal normal_ "
    "uniform_ multinomial exponential_ random_ cauchy_ geometric_ log_normal_ poisson rrelu"
)

API_DB: tuple[ApiInfo, ...] = (
    ConvInfo("conv1d"),
    ConvInfo("conv2d"),
    *(
        DropoutInfo(n)
        for n in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")
    ),
    ApiInfo("type_as", upcast=False),
    ApiInfo("__getitem__", prepare=_tuple_index),
    ApiInfo("__setitem__", prepare=_tuple_index),
    ApiInfo("repeat_interleave", backward_message=NO_BACKWARD_DATA),
    ApiInfo("masked_select", backward_message=NO_BACKWARD_UT),
    ApiInfo("topk", grad_index=0),
    ApiInfo(
        "cross_entropy",
        prepare_spec=_cross_entropy_spec,
        prepare=_as_dtype(1, ("torch.int32",), "int64"),
    ),
    ApiInfo("histc", prepare=_as_dtype(0, ("torch.int8", "torch.int32", "torch.int64"), "float32")),
    *(ApiInfo(n, family="random", skips=_RANDOM) for n in _RANDOM_APIS.split()),
)
_BY_NAME: dict[str, ApiInfo] = {info.name: info for info in API_DB}


def fused_ops() -> Mapping[str, Any]:
    """The fused NPU op table (``FusedOp(name, reference, forward_outputs, grad_index, backward,
    prepare_inputs)`` by bare name), empty until ``msprobe.run_ut.npu_ops`` exists."""
    try:
        module = importlib.import_module("msprobe.run_ut.npu_ops")
    except ImportError:
        return {}
    return getattr(module, "FUSED_OPS", {})


def _fused_info(api_type: str, bare: str) -> ApiInfo:
    op = fused_ops().get(bare)
    if op is None:
        reason = f"no CPU reference for {api_type}.{bare}"
        return ApiInfo(bare, family="fused", skips=(Skip(reason),))
    prepare_inputs = getattr(op, "prepare_inputs", None)

    def prepare(args: list[Any], kwargs: dict[str, Any]) -> None:
        """``prepare_inputs(args, kwargs) -> (args, kwargs)`` sees plain tensors (CPU, dumped dtype)."""
        if prepare_inputs is None:
            return
        from msprobe.run_ut.inputs import unwrap, wrap

        grads: dict[int, bool] = {}
        new_args, new_kwargs = prepare_inputs(unwrap(args, grads), unwrap(kwargs, grads))
        args[:] = wrap(list(new_args), grads)
        kwargs.clear()
        kwargs.update(wrap(dict(new_kwargs), grads))

    return ApiInfo(
        bare,
        family="fused",
        reference=op.reference,
        forward_outputs=getattr(op, "forward_outputs", None),
        grad_index=getattr(op, "grad_index", None),
        backward_message=None if getattr(op, "backward", True) else NO_BACKWARD_UT,
        prepare=prepare,
    )


def _attr_path(root: Any, dotted: str) -> Any:
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _namespace(module: str) -> Callable[[str], Any]:
    return lambda bare: _attr_path(importlib.import_module(module), bare)


def _tensor_method(bare: str) -> Any:
    import torch

    return getattr(torch.Tensor, bare, None)


def _aten(bare: str) -> Any:
    import torch

    return _attr_path(torch.ops.aten, bare)


#: API type (first name segment) -> how to find its framework function; None: not replayable.
NAMESPACES: dict[str, Callable[[str], Any] | None] = {
    "Functional": _namespace("torch.nn.functional"),
    "Torch": _namespace("torch"),
    "Tensor": _tensor_method,
    "VF": _namespace("torch._VF"),
    "Aten": _aten,
    "Distributed": None,
}
FUSED_TYPES = frozenset({"NPU", "MindSpeed"})


def lookup(api_type: str, bare: str) -> ApiInfo:
    """The registry entry for an API: exact name, else the family default of its type."""
    if api_type in FUSED_TYPES:
        return _fused_info(api_type, bare)
    return _BY_NAME.get(bare) or ApiInfo(bare)


def resolve(api_type: str, bare: str, info: ApiInfo) -> Callable[..., Any] | None:
    """The function to call for an API, or None when this build cannot run it."""
    if info.reference is not None:
        return info.reference
    finder = NAMESPACES.get(api_type)
    if finder is None:
        return None
    func = finder(bare)
    return func if callable(func) else None


def unsupported_reason(full_name: str, api_type: str, grammar_ok: bool) -> str | None:
    """The 8.1.1 "not support" SKIP for names outside the grammar or types with no replay."""
    if not grammar_ok or (api_type not in NAMESPACES and api_type not in FUSED_TYPES):
        return NOT_SUPPORTED.format(name=full_name)
    if NAMESPACES.get(api_type, True) is None:
        return NOT_SUPPORTED.format(name=full_name)
    return None
