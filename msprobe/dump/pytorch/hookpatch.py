"""What module backward hooks need of torch while we are installed, and nothing after.

PyTorch's full backward hooks route module inputs/outputs through ``BackwardHookFunction``, whose
views refuse in-place ops (pytorch #61519): ``nn.ReLU(inplace=True)`` after a hooked module would
fail. While a :class:`~msprobe.dump.pytorch.modules.ModuleDumper` has its hooks on a model (from
``start()`` to ``stop()``), ``BackwardHook.setup_input_hook``/``setup_output_hook`` are wrapped so the
views get the default creation meta back (what upstream 8.1.1 does too), repeated arguments stay one
tensor, and a warning filter hides torch's "Full backward hook is firing" warning, which our hooks
cause on modules whose inputs need no grad. :func:`release` by the last user puts both back: the
original functions and ``warnings.filters`` as they were.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable
from typing import Any

import torch

from msprobe.dump.pytorch.recorder import Recorder
from msprobe.dump.pytorch.torch_compat import BackwardHook, DisableTorchFunction, reset_view_creation_meta

_ATTRS = ("setup_input_hook", "setup_output_hook")
_WARNING = "Full backward hook is firing when gradients are computed"

_users: list[Recorder] = []  # recorders whose hooks are on a model now
_originals: dict[str, Any] = {}
_filter: tuple[Any, ...] | None = None  # the warnings.filters entry we added


def _reset_views(value: Any) -> Any:
    items = value if isinstance(value, tuple | list) else (value,)
    for t in items:
        if isinstance(t, torch.Tensor):
            reset_view_creation_meta(t)
    return value


def _keep_aliases(orig: Callable[..., Any], hook: Any, args: Any) -> Any:
    """Route each distinct tensor through the hook once, so ``q is k`` stays true inside the module.

    BackwardHookFunction returns a separate view per argument: ``attn(h, h, h)`` would see three
    different tensors and take MultiheadAttention's slower, differently rounded path. The grads of
    repeated arguments are then reported at their first position.
    """
    if not isinstance(args, tuple):
        return orig(hook, args)
    first: dict[int, int] = {}
    dups: list[tuple[int, int]] = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            if id(a) in first:
                dups.append((i, first[id(a)]))
            else:
                first[id(a)] = i
    if not dups:
        return orig(hook, args)
    dedup = list(args)
    for i, _ in dups:
        dedup[i] = None
    res = list(orig(hook, tuple(dedup)))
    for i, j in dups:
        res[i] = res[j]
    return tuple(res)


def _wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def wrapper(self: Any, args: Any) -> Any:
        if not any(r.running for r in _users):
            return _reset_views(_keep_aliases(orig, self, args))
        # The hook machinery's own tensor calls (view_as, requires_grad, grad_fn: ~15 per module
        # call) are not the user's: hidden from every function mode while we dump, so neither our
        # API capture nor the in-place guard pays for them.
        with DisableTorchFunction():
            return _reset_views(_keep_aliases(orig, self, args))

    return wrapper


def _add_filter() -> tuple[Any, ...] | None:
    """Ignore torch's warning; the entry added, or None when an equal one was there already."""
    entry = ("ignore", re.compile(_WARNING, re.I), Warning, None, 0)
    if entry in warnings.filters:
        return None
    warnings.filterwarnings("ignore", message=_WARNING)
    return warnings.filters[0]


def _remove_filter(entry: tuple[Any, ...]) -> None:
    filters: list[Any] = warnings.filters  # type: ignore[assignment]  # a list at run time
    for i, item in enumerate(filters):
        if item is entry:
            del filters[i]  # an "ignore" entry leaves nothing cached behind
            return


def acquire(recorder: Recorder) -> None:
    """``recorder`` has module hooks on a model now: patch (once for every user)."""
    global _filter
    if recorder in _users:
        return
    _users.append(recorder)
    if len(_users) > 1:
        return
    _filter = _add_filter()
    for attr in _ATTRS:
        orig = BackwardHook.__dict__[attr]
        _originals[attr] = orig
        setattr(BackwardHook, attr, _wrap(orig))


def release(recorder: Recorder) -> None:
    """``recorder``'s hooks are gone: the last user puts torch and the warning filters back."""
    global _filter
    if recorder not in _users:
        return
    _users.remove(recorder)
    if _users:
        return
    for attr, orig in _originals.items():
        setattr(BackwardHook, attr, orig)
    _originals.clear()
    if _filter is not None:
        _remove_filter(_filter)
        _filter = None


def installed() -> bool:
    return bool(_users)
