"""A module call's backward data, read from the autograd graph without changing it.

torch's full backward hooks put identity ``BackwardHookFunction`` nodes around a module: each input
then reaches the module through its own node, so the gradients of a tensor with several consumers
(a hidden state feeding q, k and v; RMSNorm's input used by pow, mul and the residual) are summed in
another association than without the hooks, and training changes in the last bits. Here nothing is
inserted; what those hooks report is read off the graph the forward built:

- grad_output (the record's ``input``): a multi-grad hook on the module's output tensors (tensor
  hooks, which run on the node's accumulated gradient before the node runs), called once every output
  gradient that this backward computes has arrived;
- grad_input (the record's ``output``): the module's own contribution to the gradient of each
  positional input that requires grad. A hook on the input tensor would see its total gradient (every
  consumer, inside and outside the module), so instead the graph is walked, once after the forward,
  from the outputs back to the inputs, and each node on the way that consumes an input (an edge to
  the input's node and output number) gets a post hook; the contributions are summed in the order the
  engine runs those nodes, as the identity node's input buffer sums them. The record is complete when
  every consumer this backward runs has reported.

The walk stops at the nodes of every tensor argument and at nodes older than the newest input node
(made before the call, so outside the module). A consumer outside the module that is reachable from
its outputs without passing an argument (a tensor the module reads from elsewhere that was itself
computed from the input) would be counted as the module's: a documented deviation.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.weak import WeakTensorKeyDictionary

from msprobe.dump.pytorch.torch_compat import DisableTorchFunction, sequence_nr, will_run
from msprobe.dump.pytorch.tree import tensors

Grad = torch.Tensor | None
Begin = Callable[[list[Grad]], None]
End = Callable[[list[torch.Tensor]], None]


def _edge(t: torch.Tensor) -> tuple[Any, int]:
    node = t.grad_fn
    if node is not None:
        return node, t.output_nr
    e = torch.autograd.graph.get_gradient_edge(t)  # a leaf: its AccumulateGrad node
    return e.node, e.output_nr


class Inputs:
    """What a module call's inputs were when it started (an in-place op inside the module moves a
    tensor's ``grad_fn``): the edges of the positional tensors that require grad and of every tensor
    argument, and the newest node among them."""

    __slots__ = ("likes", "oldest", "positions", "slots", "stops")

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seen: dict[tuple[int, int], int] = {}
        self.slots: list[tuple[Any, int]] = []  # one per distinct positional input that requires grad
        self.positions: list[int] = []  # its position among the arguments
        self.likes: list[tuple[torch.Size, torch.dtype, torch.device]] = []  # its shape, dtype, device
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.requires_grad:
                node, nr = _edge(a)
                if (id(node), nr) not in seen:  # attn(h, h, h): reported at the first position
                    seen[(id(node), nr)] = len(self.slots)
                    self.slots.append((node, nr))
                    self.positions.append(i)
                    self.likes.append((a.shape, a.dtype, a.device))
        self.stops: list[Any] = []
        self.oldest = -1
        if not self.slots:
            return
        for t in tensors((args, kwargs)):
            if t.requires_grad:
                node = _edge(t)[0]
                self.stops.append(node)
                if t.grad_fn is not None:
                    self.oldest = max(self.oldest, sequence_nr(node))

    def moved(self, args: tuple[Any, ...]) -> frozenset[int]:
        """The slots whose tensor is no longer at its edge when the call ends: written in place inside
        the module (``nn.ReLU(inplace=True)``), so its gradient no longer passes that edge and cannot
        be seen there."""
        out = set()
        for slot, (i, (node, nr)) in enumerate(zip(self.positions, self.slots)):
            a = args[i] if i < len(args) else None
            if not isinstance(a, torch.Tensor) or _edge(a) != (node, nr):
                out.add(slot)
        return frozenset(out)


def inputs_needing_grad(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Inputs | None:
    """The call's :class:`Inputs`, or None when no positional input requires grad (then the record
    is complete as soon as the output gradients are in, as with torch's full backward hooks)."""
    if not torch.is_grad_enabled():
        return None
    inputs = Inputs(args, kwargs)
    return inputs if inputs.slots else None


def _consumers(roots: list[Any], inputs: Inputs) -> list[tuple[Any, list[tuple[int, int]]]]:
    """Nodes between ``roots`` and the inputs that consume an input: (node, [(edge index, slot)])."""
    target = {(id(n), nr): i for i, (n, nr) in enumerate(inputs.slots)}
    stop = {id(n) for n in inputs.stops}
    keep: list[Any] = list(roots)  # node wrappers stay alive (and their ids unique) during the walk
    visited: set[int] = set()
    stack = list(roots)
    found = []
    while stack:
        node = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        hits = []
        for j, (nxt, nr) in enumerate(node.next_functions):
            if nxt is None:
                continue
            slot = target.get((id(nxt), nr))
            if slot is not None:
                hits.append((j, slot))
                continue
            if id(nxt) in stop or id(nxt) in visited or sequence_nr(nxt) <= inputs.oldest:
                continue
            keep.append(nxt)
            stack.append(nxt)
        if hits:
            found.append((node, hits))
    return found


class Capture:
    """One module call's backward: ``begin(grad_outputs)`` once the output gradients are in, then
    ``end(grad_inputs)`` once every consumer of an input that this backward runs has reported.
    Both run at most once; :meth:`release` drops the hooks (and the graph references) early."""

    def __init__(
        self,
        outputs: list[torch.Tensor],
        inputs: Inputs | None,
        begin: Begin,
        end: End,
        moved: frozenset[int] = frozenset(),
    ) -> None:
        self._begin_fn, self._end_fn = begin, end
        self._lock = threading.Lock()
        self._begun = self._ended = False
        self._n_slots = len(inputs.slots) if inputs is not None else 0
        self._sums: list[torch.Tensor | None] = [None] * self._n_slots
        # what a slot without a gradient reports: zeros like its input (torch's full backward hooks
        # give those), or nothing for an input written in place inside the module (its gradient
        # exists but does not pass the edge watched)
        likes = inputs.likes if inputs is not None else []
        self._no_grad: list[tuple[torch.Size, torch.dtype, torch.device] | None] = [
            None if k in moved else like for k, like in enumerate(likes)
        ]
        self._pending: list[Any] | None = None  # the consumers this backward will run (first call)
        self._fired: set[int] = set()
        self._consumers: list[Any] = []
        self._handles: list[Any] = []
        self._identity: list[tuple[int, int]] = []  # (output index, slot): an input returned as is
        if inputs is not None and inputs.slots:
            self._find_identity(outputs, inputs)
            roots = [t.grad_fn for t in outputs if t.grad_fn is not None]
            for k, (node, hits) in enumerate(_consumers(roots, inputs)):
                self._consumers.append(node)
                self._handles.append(node.register_hook(self._consumer_hook(k, hits)))
        self._grad_outputs: list[Grad] = [None] * len(outputs)
        self._output_nodes: list[Any] | None = [_edge(t)[0] for t in outputs]
        self._outputs_expected: list[int] | None = None
        self._outputs_fired: set[int] = set()
        for k, t in enumerate(outputs):
            on_gradient(t, functools.partial(self.on_output, k))

    def _find_identity(self, outputs: list[torch.Tensor], inputs: Inputs) -> None:
        slots = {(id(n), nr): i for i, (n, nr) in enumerate(inputs.slots)}
        for k, t in enumerate(outputs):
            node, nr = _edge(t)
            slot = slots.get((id(node), nr))
            if slot is not None:
                self._identity.append((k, slot))

    # -- hooks ------------------------------------------------------------------------------------
    def on_output(self, k: int, grad: Grad) -> None:
        """Output ``k``'s gradient; the last one this backward computes begins the record."""
        with self._lock:
            if self._begun:  # begun, or released
                return
            if self._outputs_expected is None:
                nodes, self._output_nodes = self._output_nodes or [], None
                self._outputs_expected = [i for i, n in enumerate(nodes) if will_run(n)]
            self._grad_outputs[k] = grad
            self._outputs_fired.add(k)
            if any(i not in self._outputs_fired for i in self._outputs_expected):
                return
        self._on_outputs(self._grad_outputs)

    def _on_outputs(self, grads: list[Grad]) -> None:
        with DisableTorchFunction():
            with self._lock:
                for k, slot in self._identity:
                    self._add(slot, grads[k])
                self._expect()
                self._begun = True
            self._grad_outputs = []
            self._begin_fn(grads)
            self._maybe_end()

    def _consumer_hook(self, k: int, hits: list[tuple[int, int]]) -> Callable[[Any, Any], None]:
        def hook(grad_inputs: Any, grad_outputs: Any) -> None:
            with DisableTorchFunction():
                with self._lock:
                    self._expect()
                    for j, slot in hits:
                        self._add(slot, grad_inputs[j] if j < len(grad_inputs) else None)
                    self._fired.add(k)
                self._maybe_end()

        return hook

    def _expect(self) -> None:
        if self._pending is not None:
            return
        self._pending = [k for k, n in enumerate(self._consumers) if will_run(n)]
        self._consumers = []  # the graph is no longer referenced from here

    def _add(self, slot: int, grad: Any) -> None:
        if not isinstance(grad, torch.Tensor):
            return
        old = self._sums[slot]
        # torch.add, not ``+``: the dump patches Tensor.__add__ (mix), and this sum is not the model's
        self._sums[slot] = grad if old is None else torch.add(old, grad)

    def _maybe_end(self) -> None:
        with self._lock:
            if not self._begun or self._ended or self._pending is None:
                return
            if any(k not in self._fired for k in self._pending):
                return
            self._ended = True
        filled = [g if g is not None else _zeros(like) for g, like in zip(self._sums, self._no_grad)]
        end, sums = self._end_fn, [g for g in filled if g is not None]
        self._sums = []
        self.release()
        end(sums)

    def release(self) -> None:
        """Remove the hooks and drop every tensor and callback held (what was begun never ends)."""
        for h in self._handles:
            h.remove()
        self._handles = []
        self._consumers = []
        self._output_nodes = None
        self._grad_outputs = []
        self._begin_fn, self._end_fn = _ignore, _ignore
        self._begun = True  # late output hooks do nothing


def _zeros(like: tuple[torch.Size, torch.dtype, torch.device] | None) -> torch.Tensor | None:
    if like is None:
        return None
    with DisableTorchFunction():
        return torch.zeros(like[0], dtype=like[1], device=like[2])


def _ignore(grads: list[Any]) -> None:
    return None


# One hook per output tensor, calling its watchers newest first: a tensor returned by a module and by
# its parent (a layer's last sublayer) begins the parent's record first, as the parent's identity node
# runs first with full backward hooks; an API call that returned the tensor it was given is seen after
# the modules around the call and before the module that made the tensor. Keyed by tensor and version
# (an in-place op moves the tensor to a new node, whose gradient is another one).
_watchers: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
# the leaves hooked (a parameter a module returns): their hooks come off when the window closes
# (release_leaf_hooks), else they outlive the dump, and forwards without a backward pile watchers on them
_leaf_hooks: list[tuple[Any, Any]] = []  # (weakref to the leaf, handle)


def on_gradient(t: torch.Tensor, watcher: Callable[[torch.Tensor | None], None]) -> None:
    """Call ``watcher`` with ``t``'s next gradient, before the watchers ``t`` already has: None when
    the node that made ``t`` runs but ``t`` gets no gradient (another output of the node does).

    A watcher is called once. A leaf (a parameter a module returns) keeps its hook across steps, so
    the hook lets go of the watchers it served, and of itself once the leaf is written (an optimizer
    step). A non-leaf's earlier hook stays: written in place, the tensor's earlier version still gets
    its own gradient there."""
    entry = _watchers.get(t)
    # a new version (written in place) or a new node: a leaf made inside a custom Function's forward
    # and returned by it (T5's position bias under a reentrant checkpoint) is given that Function's
    # node without a version change, and the hook put on it as a leaf never runs again
    if entry is None or entry[0] != t._version or entry[3] is not t.grad_fn:
        if entry is not None and t.grad_fn is None:
            entry[2].remove()
        watchers: list[Callable[[torch.Tensor | None], None]] = []

        def hook(grad: torch.Tensor | None) -> None:
            served = list(watchers)
            watchers.clear()
            for w in served:
                w(grad)

        node = t.grad_fn
        if node is None:  # a leaf: its tensor hook, until the window closes
            handle = t.register_hook(hook)
            _leaf_hooks.append((weakref.ref(t), handle))
        else:
            # a pre-hook of the node that made ``t``: it runs after every hook of the tensor, so
            # a user's hook registered later (gradient clipping or reversal on an activation) has
            # changed the gradient first, as the module's backward receives it
            nr = t.output_nr

            def node_hook(grad_outputs: Any) -> None:
                # None: the node runs but this output gets no gradient (the unused second output of
                # a custom Function, a reentrant checkpoint's pass-through tensor); the watchers
                # still hear of it, else a module waiting for every output it will get would wait
                # for ever and its backward record would be lost
                hook(grad_outputs[nr])

            handle = node.register_prehook(node_hook)
        entry = (t._version, watchers, handle, node)
        _watchers[t] = entry
    entry[1].insert(0, watcher)


def release_leaf_hooks() -> None:
    """The dump window closes: the hooks put on leaves come off, with the watchers they hold."""
    hooked, _leaf_hooks[:] = list(_leaf_hooks), []
    for ref, handle in hooked:
        handle.remove()
        t = ref()
        if t is not None:
            entry = _watchers.get(t)
            if entry is not None and entry[2] is handle:
                del _watchers[t]


def watch(
    output: Any, inputs: Inputs | None, begin: Begin, end: End, args: tuple[Any, ...] | None = None
) -> Capture | None:
    """Watch a module call's backward (see :class:`Capture`); None when no output requires grad.
    ``args``: the call's positional arguments at its end (an input written in place inside the
    module gets no zeros when its gradient is not seen)."""
    if not torch.is_grad_enabled():
        # a call under no_grad (a reentrant checkpoint's first pass, a monitoring call) has no
        # backward, as with torch's full backward hooks, even if it returns a tensor that requires
        # grad as it is (its input, a leaf): that tensor's gradient is not this call's
        return None
    outputs = [t for t in tensors(output) if t.requires_grad]
    if not outputs:
        return None
    moved = inputs.moved(args) if inputs is not None and args is not None else frozenset()
    return Capture(outputs, inputs, begin, end, moved)
