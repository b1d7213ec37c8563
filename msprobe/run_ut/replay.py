"""Replaying one API record: inputs -> both sides -> scoring -> an :class:`ApiResult` (plain data).

This is the pure core a pytest item calls; it never writes files (error data aside, which the caller
asks for) and never raises for a problem of the API itself: any exception while building inputs,
running or comparing becomes the API's SKIP result carrying the exception text, as upstream does
(as upstream 8.1.1 does), and never stops the run.
"""

from __future__ import annotations

import copy
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from msprobe.errors import first_line
from msprobe.formats.record_names import in_place_name, replay_op_name
from msprobe.run_ut import execute, registry
from msprobe.run_ut.api_info import ApiInfo
from msprobe.run_ut.arg_values import InputError, TensorArg, leaves, parse_dtype
from msprobe.run_ut.draws import check_size
from msprobe.run_ut.inputs import ArgBuilder, apply_prepare_inputs
from msprobe.run_ut.records import ApiRecord
from msprobe.run_ut.standards import (
    DEFAULT_ROUTING,
    ERROR,
    at_noise_floor,
    backward_skip_rows,
    compare_outputs,
    drawn_overflow,
    result_row,
    skip_rows,
)
from msprobe.run_ut.standards.thresholds import NOISE_FLOOR
from msprobe.run_ut.ties import canonical_form

OUT_KWARG_MESSAGE = "function with out=... arguments don't support automatic differentiation, skip backward."
MULTIPLE_BACKWARD = "Multiple backward is not supported."
NO_BACKWARD_GRAD = (
    "the backward record holds no gradient of the output backward starts from "
    "(its input[0] is null or missing): backward not replayed"
)
NO_GRAD_INPUT = (
    "no input of the replayed call requires grad (tensors in a keyword list, as in "
    "torch.cat(tensors=[...]), are replayed without it, as 8.1.1 does): backward not replayed"
)
KEYWORD_GRAD_INPUTS = (
    "the inputs that require grad are keyword arguments (torch.matmul(input=a, other=b)), and only the "
    "gradients of positional ones are compared, as in 8.1.1: backward not replayed"
)


def api_seed(name: str) -> int:
    """The seed of an API's random inputs: a stable hash of its full name (never ``hash()``)."""
    return zlib.crc32(name.encode("utf-8"))


@dataclass
class ApiResult:
    """What one API's replay produced: CSV rows plus the pytest verdict."""

    name: str
    result: list[Any]
    details: list[Any]  # DetailsRow objects
    outcome: str  # "passed" | "warning" | "failed" | "skipped"
    reason: str = ""
    saved: dict[str, Any] = field(default_factory=dict)  # tensors for -save_error_data


def skipped(name: str, reason: str) -> ApiResult:
    """An API that is not replayed: one SKIP details row, result ``SKIP,SKIP,reason``."""
    rows = list(skip_rows(name, reason))
    return ApiResult(name, list(result_row(name, rows, None)), rows, "skipped", reason)


def _verdict(name: str, result: list[Any], rows: list[Any]) -> tuple[str, str]:
    statuses = [str(c) for c in result[1:3]]
    if "error" in statuses:
        bad = next((r for r in rows if r.status == "error"), None)
        return "failed", (bad.reason or bad.message) if bad is not None else f"{name}: error"
    if "Warning" in statuses:
        warn = next((r for r in rows if r.status == "Warning"), None)
        return "warning", (warn.reason or warn.message) if warn is not None else f"{name}: Warning"
    if statuses[0] == "SKIP":
        first = next((r for r in rows if r.skips_api), None)
        first = first or next((r for r in rows if r.status == "SKIP"), None)
        return "skipped", first.message if first is not None else "SKIP"
    return "passed", ""


def _input_dtype_names(args: list[Any], kwargs: dict[str, Any]) -> set[str]:
    return {str(d) for d in execute.input_dtypes(args, kwargs)}


def check_output_sizes(output: Any, where: str = "output") -> None:
    """Refuse (InputError) an API whose recorded outputs are too large to compute (see
    :func:`~msprobe.run_ut.draws.check_size`): an output is allocated twice (device and upcast bench),
    whatever its inputs' sizes (``torch.full``, ``Tensor.repeat`` and ``arange`` take their size from
    scalars)."""
    if isinstance(output, list | tuple):
        for i, item in enumerate(output):
            check_output_sizes(item, f"{where}[{i}]")
        return
    if not isinstance(output, dict):
        return
    shape, dtype = output.get("shape"), output.get("dtype")
    if not isinstance(shape, list) or not isinstance(dtype, str):
        return
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        return
    try:
        parsed = parse_dtype(dtype)
    except InputError:
        return
    try:
        check_size(shape, parsed, output=True)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def check_computed_sizes(func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> None:
    """Refuse (InputError) an API whose outputs, computed on the meta device from the drawn inputs,
    are too large (:func:`check_output_sizes` trusts the record's shapes, which a damaged or crafted
    record can understate)."""
    for i, out in enumerate(execute.meta_outputs(func, args, kwargs) or ()):
        try:
            check_size(list(out.shape), out.dtype, output=True)
        except InputError as exc:
            raise InputError(f"output[{i}] as computed: {exc}") from None


def replay(
    record: ApiRecord,
    data_dir: Any,
    device: str,
    *,
    keep_tensors: bool = False,
    routing: str = DEFAULT_ROUTING,
    info: ApiInfo | None = None,
    device_function: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
) -> ApiResult:
    """Replay one API on ``device`` against the CPU benchmark and score it.

    ``routing``: the scorer's standard routing; ``info``: a table entry to use instead of the
    built-in lookup (from the ``pytest_msprobe_api_info`` hook); ``device_function``: given the
    function the benchmark runs, the one the device side runs (the ``pytest_msprobe_device_function``
    hook).
    """
    name = record.name
    from_plugin = info is not None  # the user's own entry: whatever it names is theirs to run
    if info is None:
        info = registry.lookup(record.api_type, record.bare_name)
    device_type = device.split(":")[0]
    forward: dict[str, Any] = dict(record.forward)
    if info.prepare_spec is not None:
        forward = copy.deepcopy(forward)
        info.prepare_spec(forward)
    seed = api_seed(name)
    gen = torch.Generator().manual_seed(seed)
    builder = ArgBuilder(data_dir, gen, name)
    try:
        check_output_sizes(record.forward.get("output"))
        args, kwargs = builder.build(forward)
        if info.prepare is not None:
            info.prepare(args, kwargs)
        if info.prepare_inputs is not None:
            apply_prepare_inputs(info.prepare_inputs, args, kwargs)
        reason = info.skip_reason(device_type, _input_dtype_names(args, kwargs))
        if reason is not None:
            return skipped(name, reason)
        func = registry.resolve(record.api_type, record.bare_name, info)
        if func is None:
            return skipped(name, registry.missing_reason(name, record.api_type, record.bare_name))
        if (
            not from_plugin
            and info.reference is None
            and not registry.recordable(record.api_type, record.bare_name, func)
        ):
            return skipped(name, registry.not_recorded_reason(name, record.api_type))
        device_func = func if device_function is None else device_function(func)
        if device_type == "npu" and device_func is func and not from_plugin and info.reference is not None:
            kernel = registry.npu_kernel(record.api_type, record.bare_name)  # the reference is the bench's
            if isinstance(kernel, str):
                return skipped(name, kernel)
            device_func = kernel if kernel is not None else device_func
        check_computed_sizes(func, args, kwargs)
        backward_message = _backward_message(record, info, args, kwargs)
        grad = None
        if record.backward is not None and backward_message is None:
            grad = builder.grad(record.backward, record.forward.get("output"))
        first_out = record.forward.get("output") or [{}]
        while isinstance(first_out, list) and first_out:  # a list output is wrapped: [[a, b]]
            first_out = first_out[0]
        first_out = first_out if isinstance(first_out, dict) else {}
        if info.bench_keeps_fp32 is not None and info.bench_keeps_fp32(args, kwargs):
            info = replace(info, upcast_fp32=False)
        in_place = in_place_name(replay_op_name(record.api_type, record.bare_name))
        plan = execute.make_plan(info, execute.input_dtypes(args, kwargs), first_out.get("dtype"), in_place)
        cast, note = plan.bench_dtype, ""

        def bench(a: list[Any], k: dict[str, Any], g: Any) -> execute.BenchResult:
            side = execute.Side("cpu", cast, info.hf32, plan.bench_round)
            return execute.run_bench(
                func,
                side,
                a,
                k,
                g,
                seed=seed,
                grad_index=info.grad_index,
                forward_outputs=info.forward_outputs,
                writes_self=info.writes_self,
            )

        try:
            base = bench(args, kwargs, grad)
        except Exception as exc:  # e.g. no float64 kernel: benchmark in float32, said in the Message
            fallback = execute.fallback_cast(cast)
            if fallback is None:
                raise _bench_failure(exc, func, args, kwargs, seed, info.hf32, plan.autocast_dtype) from None
            cast, note = fallback, execute.fallback_note(exc)
            try:
                base = bench(args, kwargs, grad)
            except Exception:
                raise _bench_failure(exc, func, args, kwargs, seed, info.hf32, plan.autocast_dtype) from None
        if base.multiple:
            backward_message, grad = MULTIPLE_BACKWARD, None
        elif record.backward is not None and backward_message is None and grad is None:
            # a backward record without a first gradient (``a, b = x.split(n)`` with ``a`` unused
            # records input [null, grad_b]): as 8.1.1, a tuple output is "Multiple backward"; a
            # backward record is never dropped without a word
            multiple = isinstance(base.output, (tuple, list)) and info.grad_index is None
            backward_message = MULTIPLE_BACKWARD if multiple else NO_BACKWARD_GRAD
        device_side = execute.Side(device, {}, info.hf32)
        device_raw = execute.run_forward(
            device_func,
            device_side,
            args,
            kwargs,
            seed=seed,
            autocast=plan.autocast_dtype,
            writes_self=info.writes_self,
        )
        bench_output, bench_grads = base.output, base.grads
        device_grads = None
        if grad is not None:
            device_grads = execute.in_computed_dtype(
                execute.to_cpu(execute.run_backward(device_side, device_raw, grad, info.grad_index)),
                plan.grads_in,
                plan.grads_exact,
            )
        device_output = execute.select_outputs(execute.to_cpu(device_raw), info.forward_outputs)
        scored = (bench_output, device_output, bench_grads, device_grads)
        form = canonical_form(info.ties, args, kwargs) if info.ties is not None else None
        if form is not None:  # equal input values: scored modulo their order
            scored = (
                form.outputs(bench_output),
                form.outputs(device_output),
                form.grads(bench_grads),
                form.grads(device_grads),
            )
        forward_rows = list(
            compare_outputs(name, "forward", scored[0], scored[1], routing=routing, info=info)
        )
        backward_rows: list[Any] | None = None
        if backward_message is not None:
            backward_rows = list(backward_skip_rows(name, backward_message))
        elif grad is not None:
            backward_rows = list(
                compare_outputs(name, "backward", scored[2], scored[3], routing=routing, info=info)
            )
        # An API that orders or selects values (``info.ties``) computes nothing: its values, indices
        # and gradients are exact copies, so it has no rounding noise to excuse, and a perturbed
        # input breaks its ties, moving whole gradients ("floors" as large as the gradient itself).
        if info.ties is None and any(r.status == ERROR for r in forward_rows + (backward_rows or [])):
            floors = execute.noise_floors(
                bench,
                base,
                args,
                kwargs,
                grad,
                seed=seed,
                draws=NOISE_FLOOR.draws,
                compute=plan.autocast_dtype,
                max_ulps=NOISE_FLOOR.max_ulps,
            )
            forward_rows = at_noise_floor(forward_rows, scored[0], scored[1], floors[0])
            if backward_rows is not None and grad is not None:
                backward_rows = at_noise_floor(backward_rows, scored[2], scored[3], floors[1])
        # an overflow of drawn inputs where the real call's outputs were finite; not when some inputs
        # are real (read from files): the overflow may be theirs
        if builder.drew and not builder.read:
            forward_rows = drawn_overflow(forward_rows, scored[0], scored[1], record.forward.get("output"))
            if backward_rows is not None and grad is not None and record.backward is not None:
                recorded = record.backward.get("output")  # the gradients of the inputs
                backward_rows = drawn_overflow(backward_rows, scored[2], scored[3], recorded)
        if note:
            forward_rows = [replace(r, message=note + r.message) for r in forward_rows]
            backward_rows = backward_rows and [replace(r, message=note + r.message) for r in backward_rows]
    except Exception as exc:  # InputError and any failure of the API itself: this API's SKIP
        reason = first_line(exc)
        if _refuses_a_null(exc, reason) and _has_null_argument(record.forward):
            reason += NULL_ARGUMENT_HINT
        return skipped(name, reason)
    result = list(result_row(name, forward_rows, backward_rows))
    rows = forward_rows + (backward_rows or [])
    outcome, why = _verdict(name, result, rows)
    saved: dict[str, Any] = {}
    if keep_tensors:
        saved = {
            "forward.input": [args, kwargs],
            "forward.output.bench": bench_output,
            "forward.output.device": device_output,
            "backward.input": grad,
            "backward.output.bench": bench_grads,
            "backward.output.device": device_grads,
        }
    return ApiResult(name, result, rows, outcome, why, saved)


def _bench_failure(
    exc: Exception,
    func: Any,
    args: list[Any],
    kwargs: dict[str, Any],
    seed: int,
    hf32: bool,
    autocast: torch.dtype | None,
) -> Exception:
    """What a benchmark that raised is reported as: the call's own error when it raises in its recorded
    dtypes too (the model's call raised: ``x & x`` on float32 is not "not implemented for 'Double'"),
    else the benchmark's."""
    try:
        execute.run_forward(func, execute.Side("cpu", {}, hf32), args, kwargs, seed=seed, autocast=autocast)
    except Exception as own:
        return own
    return exc


NULL_ARGUMENT_HINT = (
    " (the record holds a null argument: a value the dump cannot encode, such as a complex number, "
    "is written as null and replayed as None)"
)


def _refuses_a_null(exc: Exception, reason: str) -> bool:
    """A TypeError about a None argument (``must be Number, not NoneType``, an operator's
    ``NotImplemented``), not any TypeError of a record that holds a None (``bias=None`` is ordinary)."""
    return isinstance(exc, TypeError) and ("NoneType" in reason or "NotImplemented" in reason)


def _has_null_argument(forward: Mapping[str, Any]) -> bool:
    args = forward.get("input_args") or []
    kwargs = forward.get("input_kwargs") or {}
    return any(a is None for a in args) or any(v is None for k, v in kwargs.items() if k != "out")


def _needs_grad(args: list[Any], kwargs: dict[str, Any]) -> bool:
    """Whether a rebuilt argument will require grad (float or complex, as :mod:`execute` re-leafs)."""
    return any(
        isinstance(leaf, TensorArg)
        and leaf.requires_grad
        and (leaf.tensor.is_floating_point() or leaf.tensor.is_complex())
        for leaf in leaves([args, kwargs])
    )


def _backward_message(
    record: ApiRecord, info: ApiInfo, args: list[Any], kwargs: dict[str, Any]
) -> str | None:
    """The backward SKIP message known before the call runs: upstream 8.1.1's fixed ones, attached
    whether or not a backward entry exists; then, for a backward entry, why its backward would compare
    nothing (never a blank cell)."""
    if kwargs.get("out") is not None:  # ``out=None`` (a re-packed call's default) is no out= call
        return OUT_KWARG_MESSAGE
    if info.backward_message is not None or record.backward is None:
        return info.backward_message
    if not _needs_grad(args, kwargs):
        # its backward raises "element 0 of tensors does not require grad", which would skip the forward
        return NO_GRAD_INPUT
    if not _needs_grad(args, {}):  # it would run and compare no gradient: a blank cell, a fault unseen
        return KEYWORD_GRAD_INPUTS
    return None
