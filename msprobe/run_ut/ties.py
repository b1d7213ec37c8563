"""Equal values that a device may order otherwise than the CPU without being wrong.

Sorting and selecting (``sort``, ``topk``, ``kthvalue``, ``median``, ...) return, among equal values,
whichever their kernel meets first, and CUDA and NPU kernels meet them in other orders than the CPU's.
Where the replayed input holds equal values (a saved tensor; drawn inputs repeat none), the indices
a device returns, and the gradient it sends back through them, then differ from the benchmark's
while being right. So both sides are scored in one canonical form, made from the replayed input:

* an index output holds, for each index, the first index along the ordered dimension whose element
  equals the element it names;
* the input's gradient holds, within each group of equal input elements along that dimension, the
  group's gradient values in ascending order.

Where no value repeats, both are what they were. A device that names an element of another value, or
sends a gradient to one, still differs from the benchmark in the canonical form, and fails.
"""

from __future__ import annotations

from typing import Any

import torch

from msprobe.run_ut.api_info import Ties
from msprobe.run_ut.arg_values import TensorArg


def _argument(args: list[Any], kwargs: dict[str, Any], where: tuple[int, str]) -> Any:
    index, name = where
    return args[index] if len(args) > index else kwargs.get(name)


def _grad_slot(args: list[Any], index: int) -> int | None:
    """The place of positional argument ``index`` in the list of input gradients (one per tensor of
    the positional arguments, nested lists flattened); None for a keyword argument."""
    if index >= len(args):
        return None

    def count(value: Any) -> int:
        if isinstance(value, TensorArg):
            return 1
        if isinstance(value, (list, tuple)):
            return sum(count(v) for v in value)
        return 0

    return sum(count(a) for a in args[:index])


def first_equal(x: torch.Tensor) -> torch.Tensor:
    """For each element of ``x`` along its last dimension, the index of the first element equal to it
    (NaN equal to NaN), as int64."""
    values, order = torch.sort(x, dim=-1, stable=True)  # equal values keep their index order
    same = values[..., 1:] == values[..., :-1]
    if values.is_floating_point():
        same |= values[..., 1:].isnan() & values[..., :-1].isnan()
    positions = torch.arange(x.shape[-1]).expand_as(order)
    starts = torch.cat([torch.ones((*same.shape[:-1], 1), dtype=torch.bool), ~same], dim=-1)
    run_start = torch.where(starts, positions, 0).cummax(dim=-1).values
    return torch.empty_like(order).scatter_(-1, order, order.gather(-1, run_start))


def canonical_indices(first: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``index`` (into the last dimension of the input that gave ``first``) with each index replaced
    by the first one naming an equal element; an index out of range is kept as it is, and so is an
    index tensor of another shape or dtype than an index into that input can have."""
    if index.dtype != torch.int64 or index.dim() != first.dim() or index.shape[:-1] != first.shape[:-1]:
        return index
    size = first.shape[-1]
    inside = (index >= 0) & (index < size)
    return torch.where(inside, first.gather(-1, index.clamp(0, size - 1)), index)


def canonical_grad(first: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``grad`` (of the input that gave ``first``) with the values of each group of equal input
    elements sorted, in ascending order, over the group's positions."""
    by_value = torch.sort(grad, dim=-1, stable=True).indices
    by_group = torch.sort(first.gather(-1, by_value), dim=-1, stable=True).indices
    source = by_value.gather(-1, by_group)  # positions by (group, gradient value)
    target = torch.sort(first, dim=-1, stable=True).indices  # positions by (group, position)
    return torch.empty_like(grad).scatter_(-1, target, grad.gather(-1, source))


class Canonical:
    """The canonical form of one replay's outputs and gradients for an API that orders ``x``."""

    def __init__(self, ties: Ties, x: torch.Tensor, dim: int | None, grad_slot: int | None) -> None:
        self.ties = ties
        self.dim = dim
        self.grad_slot = grad_slot
        self.first = first_equal(self._last(x))

    def _last(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` with the ordered dimension last (the whole tensor flattened when there is none)."""
        return t.reshape(-1) if self.dim is None else t.movedim(self.dim, -1)

    def _back(self, t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return t.reshape(like.shape) if self.dim is None else t.movedim(-1, self.dim)

    def outputs(self, output: Any) -> Any:
        dim = self.dim
        if dim is None or not self.ties.indices:
            return output
        single = isinstance(output, torch.Tensor)
        parts = [output] if single else list(output)
        for i in self.ties.indices:
            part = parts[i] if i < len(parts) else None
            if not isinstance(part, torch.Tensor):
                continue
            kept = part.dim() == self.first.dim()  # else keepdim=False took the ordered dimension
            if not kept and part.dim() != self.first.dim() - 1:
                continue
            index = (part if kept else part.unsqueeze(dim)).movedim(dim, -1)
            mapped = canonical_indices(self.first, index).movedim(-1, dim)
            parts[i] = mapped if kept else mapped.squeeze(dim)
        return parts[0] if single else type(output)(parts)

    def grads(self, grads: list[torch.Tensor | None] | None) -> list[torch.Tensor | None] | None:
        slot = self.grad_slot
        if grads is None or slot is None or slot >= len(grads):
            return grads
        grad = grads[slot]
        if grad is None or grad.numel() != self.first.numel():
            return grads
        out = list(grads)
        out[slot] = self._back(canonical_grad(self.first, self._last(grad)), grad)
        return out


def canonical_form(ties: Ties, args: list[Any], kwargs: dict[str, Any]) -> Canonical | None:
    """The canonical form for a replay of these rebuilt arguments; None where nothing can tie (no
    repeated value, a stable sort, no tensor to order)."""
    x = _argument(args, kwargs, ties.input)
    if not isinstance(x, TensorArg) or x.tensor.dim() == 0 or x.tensor.numel() == 0:
        return None
    if ties.stable is not None and _argument(args, kwargs, ties.stable) is True:
        return None
    tensor = x.tensor.detach()
    given = _argument(args, kwargs, ties.dim) if ties.dim is not None else None
    dim = given if isinstance(given, int) and not isinstance(given, bool) else ties.default_dim
    if dim is not None:
        dim %= tensor.dim()
    form = Canonical(ties, tensor, dim, _grad_slot(args, ties.input[0]))
    positions = torch.arange(form.first.shape[-1]).expand_as(form.first)
    return None if torch.equal(form.first, positions) else form
