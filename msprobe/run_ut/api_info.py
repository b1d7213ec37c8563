"""The schema of the API table: one ``ApiInfo`` per API, in the spirit of PyTorch's OpInfo.

An entry carries everything msprobe knows about replaying and scoring one API: which function runs
(the framework's, or a CPU reference), how the benchmark side upcasts, which output drives backward,
argument fixes, the precision standard that scores its float outputs, per-dtype tolerance overrides,
the compare hint, what it orders (``Ties``), and ``Skip`` entries with their reasons. Every field but
``name`` has a default, and families (:mod:`msprobe.run_ut.api_table`) are entries whose fields are
the defaults of their members.

Nothing here imports torch: the table is read by ``msprobe compare`` and by the pytest plugin before
torch is loaded, so a CPU reference may be named by :class:`Ref` and imported on first use.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

NO_BACKWARD_DATA = "This API does not have backward input data, skip backward."
NO_BACKWARD_UT = "This API does not support backward ut, skip backward."


class Standard(enum.Enum):
    """A precision standard; the value is the 比对算法 text of upstream's api_precision_compare."""

    BENCHMARK = "标杆比对法"
    ABSOLUTE_THRESHOLD = "绝对阈值法"
    BINARY = "二进制一致法"
    ULP = "ULP误差比对法"
    THOUSANDTH = "双千指标法"
    ACCUMULATIVE = "累积误差比对法"


@dataclass(frozen=True)
class Skip:
    """A known reason not to replay an API, scoped like OpInfo's ``DecorateInfo``."""

    reason: str
    device: str | None = None  # "cpu" / "cuda" / "npu"; None: every device
    dtypes: tuple[str, ...] = ()  # input dtype strings ("torch.float16"); empty: any

    def applies(self, device_type: str, input_dtypes: Collection[str]) -> bool:
        if self.device is not None and self.device != device_type:
            return False
        return not self.dtypes or any(d in self.dtypes for d in input_dtypes)


@dataclass(frozen=True)
class Ref:
    """A function named by module and attribute, imported on first call (keeps the table torch-free)."""

    module: str
    attr: str

    def load(self) -> Callable[..., Any]:
        func = getattr(importlib.import_module(self.module), self.attr)
        if not callable(func):
            raise TypeError(f"{self.module}.{self.attr} is not callable")
        return func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.load()(*args, **kwargs)


def loaded(func: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """The function itself: a :class:`Ref` imported, anything else as it is."""
    return func.load() if isinstance(func, Ref) else func


@dataclass(frozen=True)
class Ties:
    """An API that orders or selects the values of one tensor (sort, topk, median, ...): equal values
    come out in its kernel's order, which a device may take otherwise than the CPU without being
    wrong (:mod:`msprobe.run_ut.ties`). Arguments are ``(positional index, keyword)`` pairs."""

    input: tuple[int, str]  # the tensor whose values are ordered
    dim: tuple[int, str] | None = None  # the argument naming the ordered dimension
    default_dim: int | None = -1  # the dimension when that argument is absent; None: the whole tensor
    indices: tuple[int, ...] = ()  # the outputs that are indices into the ordered dimension
    stable: tuple[int, str] | None = None  # an argument that, when true, fixes the order of equal values


Prepare = Callable[[list[Any], dict[str, Any]], None]
"""Tweaks the rebuilt arguments in place (they hold ``arg_values.TensorArg`` wrappers)."""
PrepareInputs = Callable[[Any, Any], tuple[Any, Any]]
"""``(args, kwargs) -> (args, kwargs)`` on plain CPU tensors in the dumped dtypes (fused-op style)."""
Tolerances = Mapping[str, Mapping[str, float]]
"""dtype string (or ``"default"``) -> thresholds fields of the entry's standard that change."""


@dataclass(frozen=True)
class ApiInfo:
    """Replay and scoring facts of one API (``name`` is the bare name, e.g. ``linear``)."""

    name: str
    types: tuple[str, ...] | None = None  # API types it is keyed under; None: every type (8.1.1 lists)
    aliases: tuple[str, ...] = ()  # further bare names of the same API (Tensor.__add__, add_, ...)
    reference: Callable[..., Any] | None = None  # run this instead of the framework function
    upcast: bool = True  # bench side raises fp16/bf16/fp32 inputs; type_as never
    upcast_fp32: bool = True  # fp32 -> fp64 on the bench side (conv keeps fp32: HF32 semantics)
    hf32: bool = False  # fp32 inputs rounded to HF32 on both sides (conv1d/conv2d)
    autocast_casts: bool = True  # False: low + fp32 inputs are the kernel's mixed form, never a cast
    grad_index: int | None = None  # which output drives backward when the output is a tuple
    forward_outputs: tuple[int, ...] | None = None  # indices of the compared outputs (None = all)
    backward_message: str | None = None  # fixed backward SKIP message (None: backward is checked)
    prepare_spec: Callable[[dict[str, Any]], None] | None = None  # tweak the record before building
    prepare: Prepare | None = None  # tweak the rebuilt CPU args before both sides are made
    prepare_inputs: PrepareInputs | None = None  # fix the inputs, drawn or read (masks, index tensors)
    standard: Standard = Standard.BENCHMARK  # scores its float outputs (upstream 8.1.1 routing)
    tolerances: Tolerances = field(default_factory=dict)  # per-dtype changes to the standard's numbers
    hint: str = ""  # compare's result-row Message when the forward direction fails
    ties: Ties | None = None  # orders values: equal ones may come out in another order on a device
    writes_self: bool = False  # returns None: its result is its first argument after the call (x[i] = v)
    # True for a call that picks input values at coordinates it computes (grid_sample's nearest mode):
    # its bench keeps float32 as the kernel computes in it (in float64 an exact tie of float32
    # arithmetic breaks the other way, and another input value is picked); fp16/bf16 inputs are still
    # raised to float32, where the kernels compute their coordinates (CUDA's does; the CPU's bf16 kernel
    # rounds them to bf16, and its noise floor then excuses a device picking pixels far off)
    bench_keeps_fp32: Callable[[list[Any], dict[str, Any]], bool] | None = None
    skips: tuple[Skip, ...] = ()

    def __post_init__(self) -> None:
        if self.grad_index is not None and self.backward_message is not None:
            raise ValueError(f"{self.name}: grad_index given for an API whose backward is not checked")
        if self.forward_outputs is not None and not self.forward_outputs:
            raise ValueError(f"{self.name}: forward_outputs is empty (use None for 'all')")

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def skip_reason(self, device_type: str, input_dtypes: Collection[str]) -> str | None:
        for skip in self.skips:
            if skip.applies(device_type, input_dtypes):
                return skip.reason
        return None

    def variant(self, name: str, **changes: Any) -> ApiInfo:
        """A member of this family: its fields, ``name`` and ``changes`` replaced."""
        return dataclasses.replace(self, name=name, **changes)
