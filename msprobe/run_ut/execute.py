"""Running one API twice: on the device in the dumped dtype, and on the CPU upcast (the benchmark).

Rules of upstream 8.1.1:

* bench upcast: with one float dtype among fp16/bf16/fp32 inputs, fp16/bf16 -> fp32 and fp32 -> fp64;
  with two or more, every one of them -> fp32; fp64 and integer tensors never change;
* a tensor that required grad is re-leafed on each side as ``(x.requires_grad_() * 1).type_as(x)``, so
  in-place APIs work; after backward the ``.grad`` of the leaf ``x`` is read (8.1.1 reads the copy's
  retained grad, which for an in-place API is the incoming gradient itself: see docs/replay.md);
* backward runs ``out.backward(grad)`` (or ``out[grad_index]``) and returns the ``.grad`` of every
  tensor of the positional arguments, nested lists flattened, ``None`` where none was needed.

The torch global RNG is reseeded with the API's seed before each side, so random APIs draw the same
numbers on the CPU and results never depend on what ran before.

Length (some 450 lines): the two sides share their rules (upcast, re-leafing, autocast, the
float32 fallback), which read best beside each other.

Ours (docs/replay.md "Deviations from 8.1.1"): autocast on the CPU too, the autocast input rounding
on the bench side (:class:`Plan`), the float32 bench fallback (:func:`fallback_cast`) and the noise
floors of near-zero outputs (:func:`noise_floors`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from msprobe.errors import first_line
from msprobe.run_ut.api_info import ApiInfo
from msprobe.run_ut.arg_values import DeviceArg, TensorArg, leaves, map_leaves

LOW_PRECISION = (torch.float16, torch.bfloat16, torch.float32)
UPCAST = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64}
COMPLEX_UPCAST = {torch.complex32: torch.complex64, torch.complex64: torch.complex128}


def _walk(value: Any) -> Iterator[TensorArg]:
    return (leaf for leaf in leaves(value) if isinstance(leaf, TensorArg))


def input_dtypes(args: list[Any], kwargs: dict[str, Any]) -> set[torch.dtype]:
    return {t.tensor.dtype for t in _walk([args, kwargs])}


def hf32_round(tensor: torch.Tensor) -> torch.Tensor:
    """Round fp32 to HF32: clear the low 12 mantissa bits, rounding half up."""
    if tensor.dtype != torch.float32:
        return tensor
    bits = tensor.contiguous().view(torch.int32)
    return (((bits >> 11) + 1) >> 1 << 12).view(torch.float32).reshape(tensor.shape)


@dataclass(frozen=True)
class Plan:
    """How the bench side casts, and whether the device side runs under autocast.

    ``bench_round``: under autocast with an output in the autocast dtype, the op computed in that
    dtype, so autocast rounded its wider float inputs to it; the bench rounds them the same way first
    (then upcasts them as ``bench_dtype`` says for their recorded dtype), so the input cast that the
    user asked for is not counted as the device's error.

    ``grads_in``: the dtype the device computed the gradients of its wider float inputs in, so they
    are judged in it (:func:`in_computed_dtype`): ``bench_round`` under autocast, and the output's
    fp16/bf16 for an in-place API writing into such a ``self`` (``bf16.mul_(fp32)``: the incoming
    gradient is ``self``'s dtype, and torch computes the fp32 operand's gradient from it in that dtype,
    then widens it), although the bench keeps that operand unrounded. ``grads_exact``: the in-place
    case, where only a gradient holding values of that dtype was computed in it (``mul_``'s); one that
    does not (``addcmul_``'s, ``div_``'s ``g * t2``, ``-g * x / y**2``: computed from the fp32 operand,
    in fp32) is judged as it is, at fp32 thresholds, not rounded to pass for the bench's equal.
    """

    bench_dtype: dict[torch.dtype, torch.dtype]
    autocast_dtype: torch.dtype | None
    bench_round: torch.dtype | None = None
    grads_in: torch.dtype | None = None

    @property
    def grads_exact(self) -> bool:
        """The in-place case of ``grads_in`` (autocast rounded no input: ``bench_round`` is None)."""
        return self.grads_in is not None and self.bench_round is None


def make_plan(
    info: ApiInfo, dtypes: set[torch.dtype], output_dtype: str | None, in_place: bool = False
) -> Plan:
    """``in_place``: the API writes into its first argument (``mul_``, ``__iadd__``); autocast never
    casts the inputs of such an API, so low + fp32 inputs are type promotion (torch computes in the
    wider dtype and rounds once into the output), not an autocast cast to undo on the bench."""
    present = [d for d in LOW_PRECISION if d in dtypes]
    mapping: dict[torch.dtype, torch.dtype] = {}
    autocast: torch.dtype | None = None
    if info.upcast and len(present) == 1:
        mapping = {present[0]: UPCAST[present[0]]}
        autocast = present[0]
        is_autocast = False
    elif info.upcast and len(present) >= 2:
        mapping = {d: torch.float32 for d in present}
        autocast = next(d for d in present if d != torch.float32)
        is_autocast = True
    else:
        is_autocast = False
    if info.upcast:  # complex tensors: their parts as the float rule says
        mapping.update((low, high) for low, high in COMPLEX_UPCAST.items() if low in dtypes)
    if not info.upcast_fp32:
        mapping.pop(torch.float32, None)
        mapping.pop(torch.complex64, None)
    if not is_autocast and output_dtype is not None:
        out = {"torch.float16": torch.float16, "torch.bfloat16": torch.bfloat16}.get(output_dtype)
        float_out = out or {"torch.float32": torch.float32, "torch.float64": torch.float64}.get(output_dtype)
        if float_out is not None:
            is_autocast = autocast is not None and autocast != float_out
            if autocast in (torch.float16, torch.bfloat16) and float_out.itemsize > autocast.itemsize:
                # a wider output of low-precision inputs: an explicit cast (``x.float()``), or an op
                # that autocast ran in float32 (its fp32 policy: ``cross_entropy``, ``nll_loss``, ...).
                # Replaying under autocast of the input dtype reproduces both (autocast leaves the
                # cast alone); the bench is float64, above the float32 the device computes in.
                mapping[autocast] = torch.float64
            else:
                autocast = float_out
    low_out = autocast in (torch.float16, torch.bfloat16) and output_dtype == str(autocast)
    if not is_autocast:  # no autocast; an in-place API on a low self may still have a wider operand
        return Plan(mapping, None, grads_in=autocast if low_out and in_place else None)  # bf16.mul_(fp64)
    computed_low = low_out and info.autocast_casts and not in_place
    return Plan(
        mapping,
        autocast,
        bench_round=autocast if computed_low else None,
        grads_in=autocast if computed_low or (low_out and in_place) else None,
    )


class Side:
    """One execution side: where its tensors live, which dtypes change, and its leaf tensors."""

    def __init__(
        self,
        device: str,
        cast: dict[torch.dtype, torch.dtype],
        hf32: bool,
        round_to: torch.dtype | None = None,
    ) -> None:
        self.device = device
        self.cast = cast
        self.hf32 = hf32
        self.round_to = round_to  # Plan.bench_round: wider float inputs rounded to it first
        self.tracked: list[torch.Tensor | None] = []  # per positional tensor, its grad-carrying copy

    def tensor(self, arg: TensorArg, *, positional: bool) -> torch.Tensor:
        tensor = arg.tensor
        if self.hf32:
            tensor = hf32_round(tensor)
        dtype = self.cast.get(tensor.dtype, tensor.dtype)
        low = self.round_to
        if low is not None and tensor.is_floating_point() and tensor.dtype.itemsize > low.itemsize:
            tensor = tensor.to(low)
        tensor = tensor.to(device=self.device, dtype=dtype, copy=True)
        if arg.requires_grad and (tensor.is_floating_point() or tensor.is_complex()):
            leaf = tensor.detach().requires_grad_()  # a loaded tensor may already require grad
            tensor = (leaf * 1).type_as(leaf)
            if positional:
                # the leaf's grad, not a retained grad of the copy: an in-place API (``div_``,
                # ``__imul__``) rebases the copy onto its own output, whose retained grad is the
                # incoming gradient itself, on both sides (8.1.1 reads that one)
                self.tracked.append(leaf)
        elif positional:
            self.tracked.append(None)
        return tensor

    def value(self, value: Any, *, positional: bool) -> Any:
        if isinstance(value, TensorArg):
            return self.tensor(value, positional=positional)
        if isinstance(value, list):
            return [self.value(v, positional=positional) for v in value]
        if isinstance(value, tuple):
            return tuple(self.value(v, positional=positional) for v in value)
        if isinstance(value, DeviceArg):
            return self.device
        return value

    def build(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        new_args = [self.value(a, positional=True) for a in args]
        new_kwargs = {
            k: self.value(v, positional=False)
            for k, v in kwargs.items()
            if not (isinstance(v, DeviceArg) and self.device == "cpu")
        }
        # a compute/result dtype= that names a dtype this side raises (sum/softmax/cumsum/vector_norm
        # of bf16 with dtype=torch.bfloat16) is raised with the tensors: otherwise the bench computes
        # in the device's dtype (or linalg refuses the narrowing from the raised input)
        dtype = new_kwargs.get("dtype")
        if isinstance(dtype, torch.dtype) and dtype in self.cast:
            new_kwargs["dtype"] = self.cast[dtype]
        return new_args, new_kwargs

    def grads(self) -> list[torch.Tensor | None]:
        return [None if t is None or t.grad is None else _dense(t.grad) for t in self.tracked]


def meta_outputs(
    func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
) -> list[torch.Tensor] | None:
    """The output tensors ``func`` gives on the meta device (shapes and dtypes, no memory), or None
    when it cannot run there (no meta kernel, a value-dependent shape): the size a call would
    allocate, whatever its record claims (``torch.full``, ``repeat`` and ``arange`` take it from
    scalars)."""
    found: list[bool] = []

    def on_meta(leaf: Any) -> Any:
        if isinstance(leaf, TensorArg):
            found.append(True)
            return torch.empty_like(leaf.tensor, device="meta")
        return "meta" if isinstance(leaf, DeviceArg) else leaf

    try:
        meta_args = map_leaves(list(args), on_meta)
        meta_kwargs = {k: map_leaves(v, on_meta) for k, v in kwargs.items()}
        # the default device only for a call without tensors (a factory): as a function mode it would
        # also take every operator a meta kernel is made of through Python
        with torch.no_grad(), torch.device("meta") if not found else contextlib.nullcontext():
            out = func(*meta_args, **meta_kwargs)
    except Exception:  # whatever the meta device refuses: the record's claim is all there is
        return None
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for t in leaves(out) if isinstance(t, torch.Tensor)] if isinstance(out, (list, tuple)) else []


def _dense(t: torch.Tensor) -> torch.Tensor:
    """A sparse or mkldnn result as the dense tensor it stands for: the metrics compare elements."""
    return t.to_dense() if t.layout != torch.strided and not t.is_nested else t


def plain(value: Any) -> Any:
    """Outputs as plain dense tensors / tuples / lists (structseqs become tuples), detached."""
    if isinstance(value, torch.Tensor):
        return _dense(value.detach())
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return _dense(value.detach().cpu())
    if isinstance(value, tuple):
        return tuple(to_cpu(v) for v in value)
    if isinstance(value, list):
        return [to_cpu(v) for v in value]
    return value


def _autocast(device: str, dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
    """The device side's ``torch.autocast`` (CPU included: a CPU autocast dump replays on the CPU)."""
    device_type = device.split(":")[0]
    if dtype in (torch.float16, torch.bfloat16) and device_type in ("cpu", "cuda", "npu"):
        return torch.autocast(device_type=device_type, dtype=dtype)
    return contextlib.nullcontext()


def in_computed_dtype(
    grads: list[torch.Tensor | None], low: torch.dtype | None, exact: bool = False
) -> list[torch.Tensor | None]:
    """Device input grads of an autocast call or of an in-place API on a low-precision ``self``
    (``Plan.grads_in``) in the dtype they were computed in: autocast's cast of a wider input, and an
    in-place op's promotion of one, hand back the low-precision gradient widened, so it is judged (and
    shown in DEVICE Dtype) as the low dtype (the cast back is exact unless the call used the input
    twice, or the op computed that gradient wider: ``bf16.div_(fp32)``). A gradient with a finite
    value beyond the low dtype's range was not computed in it (``fp16.div_(fp32)`` computes its
    operand's gradient in float32): it is judged as it is, not as the ``inf`` its rounding would be.
    ``exact`` (``Plan.grads_exact``): only a gradient whose every value is one of the low dtype's is
    narrowed (computed in it); any other was computed wider and is judged as it is."""
    if low is None:
        return grads
    return [_narrowed(g, low, exact) for g in grads]


def _narrowed(grad: torch.Tensor | None, low: torch.dtype, exact: bool = False) -> torch.Tensor | None:
    if grad is None or not grad.is_floating_point() or grad.dtype.itemsize <= low.itemsize:
        return grad
    narrow = grad.to(low)
    if bool((torch.isinf(narrow) & torch.isfinite(grad)).any()):
        return grad
    if exact and not bool(((narrow.to(grad.dtype) == grad) | torch.isnan(grad)).all()):
        return grad
    return narrow


def fallback_cast(cast: dict[torch.dtype, torch.dtype]) -> dict[torch.dtype, torch.dtype] | None:
    """The bench casts without float64 (fp32 stays fp32), for APIs that have no float64 kernel;
    None when ``cast`` has no float64 target (nothing to fall back from)."""
    if torch.float64 not in cast.values():
        return None
    return {src: dst for src, dst in cast.items() if dst != torch.float64}


def fallback_note(exc: BaseException) -> str:
    """The line prefixed to each details Message of an API benchmarked by :func:`fallback_cast`."""
    return f"Bench ran in float32: the float64 benchmark failed ({first_line(exc)}).\n"


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    return map_leaves(
        value,
        lambda leaf: TensorArg(fn(leaf.tensor), leaf.requires_grad) if isinstance(leaf, TensorArg) else leaf,
    )


def ulp_perturber(
    gen: torch.Generator, compute: torch.dtype | None
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x -> x * (1 ± eps)`` with a random sign per element, in ``x``'s own dtype; ``eps`` is that
    dtype's, or the autocast ``compute`` dtype's when coarser. Non-float tensors are unchanged."""

    def perturb(tensor: torch.Tensor) -> torch.Tensor:
        if not tensor.is_floating_point():
            return tensor
        eps = torch.finfo(tensor.dtype).eps
        if compute is not None:
            eps = max(eps, torch.finfo(compute).eps)
        sign = torch.randint(0, 2, tensor.shape, generator=gen).to(tensor.dtype) * 2 - 1
        return tensor * (1 + eps * sign)

    return perturb


def perturbed(value: Any, perturb: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Arguments (``TensorArg`` inside lists, tuples, dicts) or a plain tensor with ``perturb`` applied."""
    if isinstance(value, torch.Tensor):
        return perturb(value)
    return _map_tensors(value, perturb)


def floor_of(base: Any, moved: Any) -> Any:
    """``|moved - base|`` per tensor of the same structure (``None`` where either is no float tensor)."""
    if isinstance(base, (list, tuple)) and isinstance(moved, (list, tuple)):
        return [floor_of(b, m) for b, m in zip(base, moved)]
    tensors = isinstance(base, torch.Tensor) and isinstance(moved, torch.Tensor)
    if tensors and base.is_floating_point() and moved.shape == base.shape:
        return (moved.detach().double() - base.detach().double()).abs()
    return None


def run_forward(
    func: Callable[..., Any],
    side: Side,
    args: list[Any],
    kwargs: dict[str, Any],
    *,
    seed: int,
    autocast: torch.dtype | None,
    writes_self: bool = False,
) -> Any:
    """Build this side's arguments and call ``func``; the raw output (still attached to autograd).

    ``writes_self``: the API writes into its first argument and returns nothing (``x[i] = v``,
    ``Tensor.__setitem__``): its result is that argument after the call, so that the write is what is
    compared (8.1.1 compares the ``None`` it returns: "Bench output is None", a row that always passes).
    """
    call_args, call_kwargs = side.build(args, kwargs)
    torch.manual_seed(seed)
    with _autocast(side.device, autocast):
        output = func(*call_args, **call_kwargs)
    if output is None and writes_self and call_args and isinstance(call_args[0], torch.Tensor):
        return call_args[0]
    if output is NotImplemented:  # an operator (``Tensor.__mul__``) refusing its arguments: no result
        raise TypeError(
            f"{getattr(func, '__name__', func)} returned NotImplemented for the recorded arguments"
        )
    return output


def select_outputs(output: Any, indices: tuple[int, ...] | None) -> Any:
    """The outputs that are compared (a fused op's ``forward_outputs``); ``None`` keeps them all.

    Applied after backward, so ``grad_index`` always counts the API's own outputs.
    """
    if indices is None or not isinstance(output, (tuple, list)):
        return output
    return tuple(output[i] for i in indices)


def run_backward(
    side: Side, output: Any, grad: torch.Tensor, grad_index: int | None
) -> list[torch.Tensor | None]:
    """``output.backward(grad)`` on this side; the grads of its positional tensors."""
    target = output[grad_index] if grad_index is not None else output
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"backward needs a tensor output, got {type(target).__name__}")
    dtype = target.dtype if target.is_floating_point() or target.is_complex() else grad.dtype
    target.backward(grad.to(device=side.device, dtype=dtype))
    return side.grads()


@dataclass(frozen=True)
class BenchResult:
    """The benchmark of one API: compared outputs, input grads (None: no backward) and whether the
    output was a tuple that no ``grad_index`` picks (8.1.1's "Multiple backward", no backward run)."""

    output: Any
    grads: list[torch.Tensor | None] | None
    multiple: bool = False


def run_bench(
    func: Callable[..., Any],
    side: Side,
    args: list[Any],
    kwargs: dict[str, Any],
    grad: torch.Tensor | None,
    *,
    seed: int,
    grad_index: int | None,
    forward_outputs: tuple[int, ...] | None,
    writes_self: bool = False,
) -> BenchResult:
    """Forward, then backward from ``grad``, on the CPU bench side."""
    raw = run_forward(func, side, args, kwargs, seed=seed, autocast=None, writes_self=writes_self)
    multiple = grad is not None and isinstance(raw, (tuple, list)) and grad_index is None
    grads = None
    if grad is not None and not multiple:
        grads = run_backward(side, raw, grad, grad_index)
    output = plain(raw)
    if writes_self and args and isinstance(args[0], TensorArg):
        output = _in_written_dtype(output, args[0].tensor.dtype)
    return BenchResult(select_outputs(output, forward_outputs), grads, multiple)


def _in_written_dtype(output: Any, dtype: torch.dtype) -> Any:
    """A write (``x[i] = v``) computes nothing but the conversion of ``v`` into ``x``'s dtype: the
    upcast bench's ``x`` holds its values rounded to that dtype (an fp16 ``x[mask] = -1e9`` is ``-inf``
    on every device), still in the bench's dtype."""
    if not isinstance(output, torch.Tensor) or not output.is_floating_point() or not dtype.is_floating_point:
        return output
    if output.dtype == dtype:
        return output
    return output.to(dtype).to(output.dtype)


def _larger(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return a if b is None else b
    if isinstance(a, list) and isinstance(b, list):
        return [_larger(x, y) for x, y in zip(a, b)]
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return torch.maximum(a, b)
    return None


def noise_floors(
    bench: Callable[[list[Any], dict[str, Any], torch.Tensor | None], BenchResult],
    base: BenchResult,
    args: list[Any],
    kwargs: dict[str, Any],
    grad: torch.Tensor | None,
    *,
    seed: int,
    draws: int,
    compute: torch.dtype | None,
    max_ulps: float,
) -> tuple[Any, Any]:
    """The forward and backward noise floors: per output, the elementwise largest ``|bench' - bench|``
    over ``draws`` benchmarks ``bench'`` on inputs (and ``grad``) perturbed by :func:`ulp_perturber`,
    each draw seeded from ``seed`` so the floors never depend on what ran before.

    A floor larger than ``max_ulps`` ulps of the largest input is no rounding noise but the jump of a
    discontinuous function (``floor(3 * (1 - eps))`` is 2): that output gets no floor (``None``).
    Neither does any output when a perturbed benchmark fails (inputs moved out of the API's domain,
    a probability of 1 above 1): the floor cannot be measured there.
    """
    forward: Any = None
    backward: Any = None
    for draw in range(draws):
        perturb = ulp_perturber(torch.Generator().manual_seed(seed + 1 + draw), compute)
        try:
            moved = bench(perturbed(args, perturb), perturbed(kwargs, perturb), perturbed(grad, perturb))
        except Exception:
            return None, None
        forward = _larger(forward, floor_of(base.output, moved.output))
        if base.grads is not None and moved.grads is not None:
            backward = _larger(backward, floor_of(base.grads, moved.grads))
    limit = max_ulps * _input_ulp([args, kwargs, grad], compute)
    return _below(forward, limit), _below(backward, limit)


def _input_ulp(value: Any, compute: torch.dtype | None) -> float:
    """The largest ``eps(dtype) * max|x|`` over the finite float input tensors."""
    found = 0.0
    for leaf in leaves(value):
        if not isinstance(leaf, (TensorArg, torch.Tensor)):
            continue
        t = leaf.tensor if isinstance(leaf, TensorArg) else leaf
        t = _dense(t)
        if t.is_floating_point() and t.numel():
            eps = torch.finfo(t.dtype).eps
            if compute is not None:
                eps = max(eps, torch.finfo(compute).eps)
            finite = t[torch.isfinite(t)]
            if finite.numel():
                found = max(found, eps * float(finite.abs().max()))
    return found


def _below(floor: Any, limit: float) -> Any:
    if isinstance(floor, list):
        return [_below(f, limit) for f in floor]
    if isinstance(floor, torch.Tensor) and floor.numel() and float(floor.max()) > limit:
        return None
    return floor
