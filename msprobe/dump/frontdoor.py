"""What both ``PrecisionDebugger`` front doors share, whatever the framework (upstream 8.1.1).

The one-instance rule (a second construction returns the first object, its arguments ignored), the
one-line :class:`MsprobeException` (an ``Exception``, as upstream's) when a class method runs before
construction, the argument checks of
``token_range`` and ``set_init_step``, and the ``stop``/``step``/custom-API flow that only forwards
to the framework's dump service. A framework subclass adds what differs: the model type check, the
hooks it registers in ``start`` and what ``_shutdown`` undoes. No torch, no mindspore here.

A user mistake is an :class:`~msprobe.errors.MsprobeError` whose message is one line naming the field,
the value and what is allowed. The front door's entry points (:func:`user_entry`) raise it with a
traceback cut to the user's own call: the last frames a user reads are their line and that entry point,
never the checks behind it. ``sys.excepthook`` stays Python's (the command-line tools print the
one-line form themselves).
"""

from __future__ import annotations

import atexit
import functools
import logging
import weakref
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from msprobe.dump.config import DumpConfig
from msprobe.dump.exceptions import MsprobeException
from msprobe.errors import MsprobeError

INVALID = MsprobeException.INVALID_PARAM_ERROR
NO_INSTANCE = "PrecisionDebugger instance is not created."

log = logging.getLogger("msprobe")

_D = TypeVar("_D", bound="FrontDoor")
_F = TypeVar("_F", bound=Callable[..., Any])


def user_entry(fn: _F) -> _F:
    """``fn``, raising an :class:`MsprobeError` from here: the traceback shows the user's call and
    this entry point only (the error's message says what is wrong, in one line)."""

    @functools.wraps(fn)
    def entry(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MsprobeError as exc:
            raise exc.with_traceback(None) from None

    return entry  # type: ignore[return-value]


def _short(value: Any) -> str:
    """``repr`` when it is one short line (a module's is many lines: its class name instead)."""
    text = repr(value)
    return text if "\n" not in text and len(text) <= 200 else f"<{type(value).__name__}>"


def models_of(model: Any) -> list[Any]:
    """``start(model)`` takes one model or a list/tuple of them."""
    return list(model) if isinstance(model, list | tuple) else [model]


def _weak(obj: Any) -> Callable[[], Any]:
    """A weak reference to ``obj``, or a strong one where it takes none."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


class WeakModel:
    """``start(model)``'s model (one, or a list/tuple of them), held weakly: the dump must not keep a
    model the user dropped alive with its parameters, and a model made after it was freed may take its
    address (an ``id`` would then match)."""

    __slots__ = ("_is_list", "_refs")

    def __init__(self, model: Any) -> None:
        self._refs = tuple(_weak(m) for m in models_of(model))
        self._is_list = isinstance(model, list | tuple)

    def get(self) -> Any:
        """The model (a list of them if a list or tuple was given), or None once any was dropped."""
        models = [r() for r in self._refs]
        if any(m is None for m in models):
            return None
        return models if self._is_list else models[0]

    def is_(self, model: Any) -> bool:
        """Whether ``model`` is this very model (these very models, in order)."""
        models = models_of(model)
        return len(models) == len(self._refs) and all(r() is m for r, m in zip(self._refs, models))


class FirstModel:
    """The model the dump hooked at the first window given one: it stays the one, as in 8.1.1. A
    later ``start()`` naming another model is said once (its modules or Cells are not recorded); a
    window without a model (a warm-up step at L1) hooks nothing and leaves the choice open."""

    def __init__(self) -> None:
        self._first: WeakModel | None = None
        self._said = False

    def take(self, model: Any) -> bool:
        """True the first time a model is given (hook it now); later False, saying so once if
        ``model`` is another."""
        if model is None:
            return False
        if self._first is None:
            self._first = WeakModel(model)
            return True
        if not self._first.is_(model) and not self._said:
            self._said = True
            log.warning(
                "msprobe: start() was given another model than the one hooked at the first dump window; "
                "as in 8.1.1 that first model stays the one whose modules are recorded, this one's are not"
            )
        return False


def no_empty_models(model: Any, needed: bool, kind: str) -> Any:
    """An empty list/tuple of models is no model: ``None`` (nothing hooked, the first-model choice left
    open), or one line when the level or a ``token_range`` needs a model (``kind``: what to give)."""
    if isinstance(model, list | tuple) and not model:
        if needed:
            raise MsprobeException(
                INVALID,
                f"The 'model' parameter is an empty {type(model).__name__}: level L0, mix or a token_range "
                f"needs at least one {kind}",
            )
        return None
    return model


def check_token_range(token_range: Any) -> None:
    """``[start, end]``: two ints (not bools), ``0 <= start <= end``; None means no token range."""
    if token_range is None:
        return
    if not isinstance(token_range, list | tuple):
        raise MsprobeException(INVALID, f"Token_range must be a list or tuple, got {token_range!r}.")
    if len(token_range) != 2:
        raise MsprobeException(INVALID, f"Token_range must have 2 items [start, end], got {token_range!r}.")
    start, end = token_range
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (start, end)):
        raise MsprobeException(INVALID, f"Start and end in token_range must be integer, got {token_range!r}.")
    if start > end:
        raise MsprobeException(INVALID, f"Start in token_range must less than the end, got {token_range!r}.")
    if start < 0:
        raise MsprobeException(INVALID, f"Start in token_range must be >= 0, got {token_range!r}.")


def check_init_step(step: Any) -> int:
    """``set_init_step(step)``: a non-negative int (not a bool)."""
    if isinstance(step, bool) or not isinstance(step, int):
        raise MsprobeException(INVALID, f"{step!r} must be an integer")
    if step < 0:
        raise MsprobeException(INVALID, f"{step} must be greater than or equal to 0")
    return step


def check_custom_api(module: Any, api_name: str, api_prefix: Any = None) -> str:
    """The record prefix of ``register_custom_api`` (default: the module's ``__name__``)."""
    if api_prefix is None:
        api_prefix = getattr(module, "__name__", None) or "Custom"
    if not isinstance(api_prefix, str):
        raise MsprobeException(INVALID, f"api_prefix must be string, got {api_prefix!r}")
    check_has_api(module, api_name)
    return api_prefix


def check_has_api(module: Any, api_name: str) -> None:
    if not hasattr(module, api_name):
        raise MsprobeException(INVALID, f"module {module!s} does not have {api_name}")


class FrontDoor:
    """Base of the framework ``PrecisionDebugger`` classes: one instance per process.

    ``service`` is the framework's dump service; it has ``start``/``stop``/``step``/``close``, a
    ``session`` (the shared :class:`~msprobe.dump.session.DumpSession`) and a ``patcher`` that wraps
    and restores module attributes. A subclass ``__init__`` begins with ``if not
    self._begin(**its_arguments): return`` and ends with ``self._become_instance()``; ``_unhook``
    undoes what its ``start`` hooked.
    """

    _instance: ClassVar[Any] = None
    config: DumpConfig
    service: Any

    def __new__(cls: type[_D], *args: Any, **kwargs: Any) -> _D:
        if cls._instance is None:
            inst = super().__new__(cls)
            inst._initialized = False
            return inst
        return cls._instance  # type: ignore[no-any-return]

    def _begin(self, **arguments: Any) -> bool:
        """False when this is the one instance already: then arguments that differ from the first
        construction's are ignored with one warning line."""
        if not getattr(self, "_initialized", False):
            self._arguments = arguments
            # (id(module), name) of what register_custom_api wrapped (restore_custom_api undoes only that)
            self._custom_wrapped: set[tuple[int, str]] = set()
            return True
        if arguments != getattr(self, "_arguments", arguments):
            given = ", ".join(f"{k}={_short(v)}" for k, v in arguments.items() if v is not None)
            log.warning(
                "msprobe: PrecisionDebugger(%s): the instance already exists (task %s, level %s, "
                "dump_path %s), these arguments are ignored",
                given,
                self.config.task,
                self.config.level,
                self.config.dump_path,
            )
        return False

    def _become_instance(self) -> None:
        self._initialized = True
        type(self)._instance = self
        atexit.register(self.service.close)

    @classmethod
    def _shutdown(cls) -> None:
        """Close the dump, undo every patch and forget the instance (tests; a process keeps one)."""
        inst = cls._instance
        if inst is None:
            return
        inst.service.close()
        inst.service.patcher.restore_all()
        inst._unhook()
        atexit.unregister(inst.service.close)
        cls._instance = None

    def _unhook(self) -> None:
        """Undo the framework's own hooks (module/cell hooks, patched loaders) at ``_shutdown``."""

    @classmethod
    def _get(cls: type[_D]) -> _D:
        inst = cls._instance
        if inst is None:
            raise MsprobeException(MsprobeException.INTERFACE_USAGE_ERROR, NO_INSTANCE)
        return inst  # type: ignore[no-any-return]

    @classmethod
    @user_entry
    def stop(cls) -> None:
        cls._get().service.stop()

    @classmethod
    @user_entry
    def forward_backward_dump_end(cls) -> None:
        """Deprecated alias of :meth:`stop` (8.1.1): whatever a front's ``stop`` does (under
        ``enable_dataloader``, nothing)."""
        cls.stop()

    @classmethod
    @user_entry
    def step(cls) -> None:
        cls._get().service.step()

    @classmethod
    @user_entry
    def set_init_step(cls, step: int) -> None:
        inst = cls._get()
        inst.service.session.set_init_step(check_init_step(step))

    @classmethod
    @user_entry
    def register_custom_api(cls, module: Any, api_name: str, api_prefix: str | None = None) -> None:
        inst = cls._get()
        prefix = check_custom_api(module, api_name, api_prefix)
        before = getattr(module, api_name)
        inst.service.patcher.wrap(module, api_name, (prefix, api_name))
        if getattr(module, api_name) is not before:  # wrapped now (an API the dump wraps stays as it is)
            inst._custom_wrapped.add((id(module), api_name))

    @classmethod
    @user_entry
    def restore_custom_api(cls, module: Any, api_name: str) -> None:
        """Undoes :meth:`register_custom_api`, as 8.1.1: only what it wrapped, never an API the dump
        records anyway (its wrapper stays) or a name never registered."""
        inst = cls._get()
        check_has_api(module, api_name)
        if (id(module), api_name) in inst._custom_wrapped:
            inst._custom_wrapped.discard((id(module), api_name))
            inst.service.patcher.restore(module, api_name)
