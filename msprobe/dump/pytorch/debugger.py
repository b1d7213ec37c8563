"""``PrecisionDebugger``: the upstream-compatible front door. One instance per process."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from msprobe.dump.config import build_config
from msprobe.dump.exceptions import MsprobeException
from msprobe.dump.frontdoor import (
    INVALID,
    FrontDoor,
    check_token_range,
    models_of,
    no_empty_models,
    user_entry,
)
from msprobe.dump.pytorch.service import TorchDumpService
from msprobe.dump.pytorch.torch_compat import dataloader_iter_class

log = logging.getLogger("msprobe")
_INVALID = INVALID


def _check_model(model: Any) -> None:
    for m in models_of(model):
        if not isinstance(m, torch.nn.Module) or isinstance(m, torch.jit.ScriptModule):
            raise MsprobeException(
                _INVALID,
                "The 'model' parameter must be a torch.nn.Module or list[torch.nn.Module] type, "
                f"currently there is an unsupported {type(m)} type.",
            )


class PrecisionDebugger(FrontDoor):
    _instance: ClassVar[PrecisionDebugger | None] = None
    service: TorchDumpService

    @user_entry
    def __init__(
        self,
        config_path: str | None = None,
        task: str | None = None,
        dump_path: str | None = None,
        level: str | None = None,
        model: Any = None,
        step: Sequence[int | str] | None = None,
    ) -> None:
        if not self._begin(
            config_path=config_path, task=task, dump_path=dump_path, level=level, model=model, step=step
        ):
            return
        self.config = build_config(config_path, task, dump_path, level, step)
        if model is not None:
            _check_model(model)
            # a log line, as 8.1.1: a DeprecationWarning raised here is attributed to msprobe's own
            # frame and hidden by Python's default filters
            if self.config.enable_dataloader and self.config.records_modules:  # that mode needs it here
                advice = "as is enable_dataloader, which needs it; without enable_dataloader, pass"
            else:
                advice = "pass"
            log.warning(
                f"msprobe: PrecisionDebugger(model=...) is deprecated, {advice} the model to start(model=...)"
            )
        if self.config.enable_dataloader and model is None and self.config.records_modules:
            raise MsprobeException(
                _INVALID,
                f"{self.config.config_path}: enable_dataloader at level {self.config.level} starts the dump "
                "from the DataLoader, so PrecisionDebugger must receive a 'model' parameter",
            )
        self.model = model
        self.service = TorchDumpService(self.config)
        self._become_instance()
        if self.config.async_dump:
            log.info("msprobe: async_dump: device statistics fetched and records written once a step")
        if self.config.enable_dataloader:
            self._patch_dataloader()

    def _patch_dataloader(self) -> None:
        """Deprecated 8.1.1 mode: every ``next(loader)`` ends the previous step and starts the next."""
        iter_class = dataloader_iter_class()
        orig = iter_class.__next__
        service = self.service
        state = {"open": False}  # a step was started by a next() and not closed yet

        def __next__(it: Any) -> Any:
            if state["open"]:
                state["open"] = False
                service.stop()
                service.step()
            # StopIteration: the last step is closed, no empty step is opened, and the next epoch's
            # first next() does not close (and count) a step again
            batch = orig(it)
            service.start(self.model)
            state["open"] = True
            return batch

        iter_class.__next__ = __next__
        self._dataloader_orig = orig

    def _unhook(self) -> None:
        orig = getattr(self, "_dataloader_orig", None)
        if orig is not None:
            dataloader_iter_class().__next__ = orig
            self._dataloader_orig = None
        self.service.modules.remove()

    @classmethod
    @user_entry
    def start(cls, model: Any = None, token_range: Sequence[int] | None = None) -> None:
        inst = cls._get()
        if inst.config.enable_dataloader:
            log.warning("DataLoader is enabled, start() skipped.")
            return
        check_token_range(token_range)
        model = model if model is not None else inst.model
        needed = inst.config.records_modules or token_range is not None
        model = no_empty_models(model, needed, "torch.nn.Module")
        if model is not None:
            _check_model(model)
        if model is None and needed:
            raise MsprobeException(
                _INVALID,
                f"For level {inst.config.level} or non-empty token_range, PrecisionDebugger or start "
                "interface must receive a 'model' parameter: missing the parameter 'model'",
            )
        inst.service.start(model, tuple(token_range) if token_range is not None else None)  # type: ignore[arg-type]

    @classmethod
    @user_entry
    def stop(cls) -> None:
        inst = cls._get()
        if inst.config.enable_dataloader:
            log.warning("DataLoader is enabled, stop() skipped.")
            return
        inst.service.stop()

    @classmethod
    @user_entry
    def save(cls, variable: Any, name: str, save_backward: bool = True) -> None:
        """Level ``debug``: record ``variable`` (nested tensors/scalars) as ``{name}.{k}.debug``."""
        cls._get().service.saver.save(variable, name, save_backward)


@user_entry
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
    if not svc.modules.is_named(module):
        svc.modules.hook_named(module, dump_name, lambda: svc.module_dump_on)
    svc.module_dump_on = True
    svc.apis_suppressed = True


@user_entry
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
