"""``PrecisionDebugger``: the upstream-compatible front door (spec §1). One instance per process."""

from __future__ import annotations

import atexit
import logging
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from msprobe.dump.config import build_config
from msprobe.dump.exceptions import MsprobeException
from msprobe.dump.pytorch.service import TorchDumpService
from msprobe.errors import MsprobeError

log = logging.getLogger("msprobe")
_INVALID = MsprobeException.INVALID_PARAM_ERROR
_NO_INSTANCE = "PrecisionDebugger instance is not created."


def _install_excepthook() -> None:
    """An uncaught MsprobeError (a user's config mistake) prints one line instead of a traceback."""
    previous = sys.excepthook
    if getattr(previous, "_msprobe", False):
        return

    def hook(tp: type[BaseException], value: BaseException, tb: Any) -> None:
        if isinstance(value, MsprobeError):
            print(f"msprobe: error: {value}", file=sys.stderr)
            return
        previous(tp, value, tb)

    hook._msprobe = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def _check_model(model: Any) -> None:
    items = model if isinstance(model, list | tuple) else [model]
    for m in items:
        if not isinstance(m, torch.nn.Module) or isinstance(m, torch.jit.ScriptModule):
            raise MsprobeException(
                _INVALID,
                "The 'model' parameter must be a torch.nn.Module or list[torch.nn.Module] type, "
                f"currently there is an unsupported {type(m)} type.",
            )


def _check_token_range(token_range: Any) -> None:
    if token_range is None:
        return
    if not isinstance(token_range, list | tuple):
        raise MsprobeException(_INVALID, f"Token_range must be a list or tuple, got {token_range!r}.")
    if len(token_range) != 2:
        raise MsprobeException(_INVALID, f"Token_range must have 2 items [start, end], got {token_range!r}.")
    start, end = token_range
    if (
        isinstance(start, bool)
        or isinstance(end, bool)
        or not isinstance(start, int)
        or not isinstance(end, int)
    ):
        raise MsprobeException(
            _INVALID, f"Start and end in token_range must be integer, got {token_range!r}."
        )
    if start > end:
        raise MsprobeException(_INVALID, f"Start in token_range must less than the end, got {token_range!r}.")
    if start < 0:
        raise MsprobeException(_INVALID, f"Start in token_range must be >= 0, got {token_range!r}.")


class PrecisionDebugger:
    _instance: PrecisionDebugger | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> PrecisionDebugger:
        if cls._instance is None:
            inst = super().__new__(cls)
            inst._initialized = False
            return inst
        return cls._instance

    def __init__(
        self,
        config_path: str | None = None,
        task: str | None = None,
        dump_path: str | None = None,
        level: str | None = None,
        model: Any = None,
        step: Sequence[int | str] | None = None,
    ) -> None:
        if getattr(self, "_initialized", False):
            return
        _install_excepthook()
        self.config = build_config(config_path, task, dump_path, level, step)
        if model is not None:
            _check_model(model)
            warnings.warn(
                "PrecisionDebugger(model=...) is deprecated, pass the model to start(model=...)",
                DeprecationWarning,
                stacklevel=2,
            )
        self.model = model
        self.service = TorchDumpService(self.config)
        self._initialized = True
        type(self)._instance = self
        atexit.register(self.service.close)
        if self.config.async_dump:
            log.warning("msprobe: async_dump is accepted but this dump writes synchronously (no OOM risk)")
        if self.config.enable_dataloader:
            self._patch_dataloader()

    def _patch_dataloader(self) -> None:
        """Deprecated 8.1.1 mode: every ``next(loader)`` ends the previous step and starts the next."""
        from torch.utils.data import dataloader

        orig = dataloader._BaseDataLoaderIter.__next__
        service = self.service
        state = {"first": True}

        def __next__(it: Any) -> Any:
            if not state["first"]:
                service.stop()
                service.step()
            state["first"] = False
            batch = orig(it)  # StopIteration: the last step is closed, no empty step is opened
            service.start(self.model)
            return batch

        dataloader._BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign,assignment]
        self._dataloader_orig = orig

    @classmethod
    def _shutdown(cls) -> None:
        """Close the dump and forget the instance (tests; a process normally keeps its one instance)."""
        inst = cls._instance
        if inst is None:
            return
        inst.service.close()
        orig = getattr(inst, "_dataloader_orig", None)
        if orig is not None:
            from torch.utils.data import dataloader

            dataloader._BaseDataLoaderIter.__next__ = orig  # type: ignore[method-assign]
        inst.service.patcher.restore_all()
        inst.service.modules.remove()
        atexit.unregister(inst.service.close)
        cls._instance = None

    @classmethod
    def _get(cls) -> PrecisionDebugger:
        inst = cls._instance
        if inst is None:
            raise Exception(_NO_INSTANCE)
        return inst

    @classmethod
    def start(cls, model: Any = None, token_range: Sequence[int] | None = None) -> None:
        inst = cls._get()
        if inst.config.enable_dataloader:
            log.warning("DataLoader is enabled, start() skipped.")
            return
        _check_token_range(token_range)
        model = model if model is not None else inst.model
        if model is not None:
            _check_model(model)
        if model is None and (inst.config.level in ("L0", "mix") or token_range is not None):
            raise MsprobeException(
                _INVALID,
                f"For level {inst.config.level} or non-empty token_range, PrecisionDebugger or start "
                "interface must receive a 'model' parameter: missing the parameter 'model'",
            )
        inst.service.start(model, tuple(token_range) if token_range is not None else None)  # type: ignore[arg-type]

    @classmethod
    def stop(cls) -> None:
        inst = cls._get()
        if inst.config.enable_dataloader:
            log.warning("DataLoader is enabled, stop() skipped.")
            return
        inst.service.stop()

    @classmethod
    def forward_backward_dump_end(cls) -> None:
        """Deprecated alias of :meth:`stop` (8.1.1)."""
        cls._get().service.stop()

    @classmethod
    def step(cls) -> None:
        cls._get().service.step()

    @classmethod
    def set_init_step(cls, step: int) -> None:
        inst = cls._get()
        if isinstance(step, bool) or not isinstance(step, int):
            raise MsprobeException(_INVALID, f"{step!r} must be an integer")
        if step < 0:
            raise MsprobeException(_INVALID, f"{step} must be greater than or equal to 0")
        inst.service.session.set_init_step(step)

    @classmethod
    def save(cls, variable: Any, name: str, save_backward: bool = True) -> None:
        """Level ``debug``: record ``variable`` (nested tensors/scalars) as ``{name}.{k}.debug``."""
        cls._get().service.saver.save(variable, name, save_backward)

    @classmethod
    def register_custom_api(cls, module: Any, api_name: str, api_prefix: str | None = None) -> None:
        inst = cls._get()
        if api_prefix is None:
            api_prefix = getattr(module, "__name__", None) or "Custom"
        if not isinstance(api_prefix, str):
            raise MsprobeException(_INVALID, f"api_prefix must be string, got {api_prefix!r}")
        if not hasattr(module, api_name):
            raise MsprobeException(_INVALID, f"module {module!s} does not have {api_name}")
        inst.service.patcher.wrap(module, api_name, (api_prefix, api_name))

    @classmethod
    def restore_custom_api(cls, module: Any, api_name: str) -> None:
        inst = cls._get()
        if not hasattr(module, api_name):
            raise MsprobeException(_INVALID, f"module {module!s} does not have {api_name}")
        inst.service.patcher.restore(module, api_name)


def module_dump(module: Any, dump_name: str) -> None:
    """Dump ``module`` as ``Module.{dump_name}.{Class}.*`` until :func:`module_dump_end`; the APIs called
    inside it are not recorded meanwhile."""
    inst = PrecisionDebugger._instance
    if inst is None:
        raise MsprobeException(
            MsprobeException.INTERFACE_USAGE_ERROR,
            "PrecisionDebugger must be instantiated before using module_dump interface",
        )
    if not isinstance(module, torch.nn.Module):
        raise MsprobeException(
            _INVALID, f"the module argument in module_dump must be a torch.nn.Module type, got {type(module)}"
        )
    if not isinstance(dump_name, str):
        raise MsprobeException(
            _INVALID, f"the dump_name argument in module_dump must be a str, got {dump_name!r}"
        )
    svc = inst.service
    if svc.modules.registered and svc.modules_on:
        log.warning(
            "msprobe: %s is already hooked by level %s, module_dump is not available",
            dump_name,
            inst.config.level,
        )
        return
    hooked = getattr(module, "_msprobe_module_dump", None)
    if hooked is None:
        svc.modules.hook_named(module, dump_name, lambda: svc.module_dump_on)
        module._msprobe_module_dump = dump_name  # type: ignore[assignment]
    svc.module_dump_on = True
    svc.apis_suppressed = True


def module_dump_end() -> None:
    """End :func:`module_dump`: APIs are recorded again, the module hook stays but stops firing."""
    inst = PrecisionDebugger._instance
    if inst is None:
        raise MsprobeException(
            MsprobeException.INTERFACE_USAGE_ERROR,
            "PrecisionDebugger must be instantiated before using module_dump_end interface",
        )
    inst.service.module_dump_on = False
    inst.service.apis_suppressed = False
