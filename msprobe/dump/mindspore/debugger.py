"""``PrecisionDebugger`` for MindSpore PyNative. One instance per process."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any, ClassVar

import mindspore as ms
from mindspore import nn

from msprobe.dump.config import build_config
from msprobe.dump.exceptions import FileCheckException, MsprobeException
from msprobe.dump.frontdoor import (
    INVALID,
    FirstModel,
    FrontDoor,
    WeakModel,
    check_token_range,
    models_of,
    no_empty_models,
    user_entry,
)
from msprobe.dump.mindspore.cells import CellHooks
from msprobe.dump.mindspore.debug_save import DebugSaver
from msprobe.dump.mindspore.jit import JitHooks
from msprobe.dump.mindspore.primitives import PrimitiveHooks
from msprobe.dump.mindspore.service import MsDumpService
from msprobe.dump.writer import make_dirs

_INVALID = INVALID


def _check_model(model: Any) -> None:
    for m in models_of(model):
        if not isinstance(m, nn.Cell):
            raise MsprobeException(
                _INVALID,
                "The 'model' parameter must be a mindspore.nn.Cell or list[mindspore.nn.Cell] type, "
                f"currently there is a {type(m)} type.",
            )


def _check_mode(level: str) -> None:
    """Static graph needs MindSpore's on-device dump (Ascend); PyNative is what this dump observes."""
    if ms.get_context("mode") == ms.GRAPH_MODE:
        what = {
            "L0": "static-graph L0 (Cell TensorDump) needs an Ascend device",
            "L2": "static-graph L2 (kernel dump) needs an Ascend device",
        }.get(level, f"level {level} is not supported in static graph mode (GRAPH_MODE)")
        raise MsprobeException(
            _INVALID, f"{what}; run the network in PYNATIVE_MODE to dump it with msprobe (level {level})"
        )


class TokenRange:
    """``start(model, token_range=[a, b])``: dumping is on from the a-th to the b-th forward of the root."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.bounds: tuple[int, int] | None = None
        self.count = 0
        self.handle: Any = None

    def arm(self, root: Any, token_range: Sequence[int]) -> None:
        self.bounds = (int(token_range[0]), int(token_range[1]))
        self.count = 0
        self.session.running = False
        if self.handle is None:
            self.handle = root.register_forward_pre_hook(self._on_forward)

    def _on_forward(self, cell: Any, args: Any) -> None:
        if self.bounds is None:
            return
        lo, hi = self.bounds
        if self.count == lo:
            self.session.running = True
        if self.count == hi + 1:
            self.session.running = False
        self.count += 1


class PrecisionDebugger(FrontDoor):
    _instance: ClassVar[PrecisionDebugger | None] = None
    service: MsDumpService

    @user_entry
    def __init__(
        self,
        config_path: str | None = None,
        task: str | None = None,
        dump_path: str | None = None,
        level: str | None = None,
        step: Sequence[int | str] | None = None,
    ) -> None:
        if not self._begin(config_path=config_path, task=task, dump_path=dump_path, level=level, step=step):
            return
        config = build_config(config_path, task, dump_path, level, step, framework="mindspore")
        # MindSpore: dump_path is made absolute at construction and created at once.
        config = dataclasses.replace(config, dump_path=os.path.abspath(config.dump_path))
        try:
            make_dirs(config.dump_path)
        except OSError as exc:  # one line, as the PyTorch dump's first start() says it
            raise FileCheckException(
                f"cannot create the dump folder {config.dump_path}: {exc.strerror}"
            ) from None
        self.config = config
        self.service = MsDumpService(config)
        self.cells = CellHooks(self.service)
        self.primitives = PrimitiveHooks(self.service)
        self.jit = JitHooks(self.service)
        self.saver = DebugSaver(self.service)
        self.jit.suspend_hooks += [self.primitives.suspend, self.cells.suspend]
        if config.records_calls:
            self.jit.install()
        self._first_model = FirstModel()
        # the net of the last start() that named one: a later start() without it (MsprobeStep) uses it
        self._last_model: WeakModel | None = None
        self.tokens = TokenRange(self.service.session)
        self._become_instance()

    def _unhook(self) -> None:
        self.cells.remove()
        self.primitives.restore()
        self.jit.uninstall()

    @classmethod
    @user_entry
    def start(cls, model: Any = None, token_range: Sequence[int] | None = None) -> None:
        inst = cls._get()
        level = inst.config.level
        _check_mode(level)
        check_token_range(token_range)
        needed = inst.config.records_modules or token_range is not None
        model = no_empty_models(model, needed, "mindspore.nn.Cell")
        if model is not None:
            _check_model(model)
        if token_range is not None and model is None:
            raise MsprobeException(
                _INVALID, "The 'model' parameter must be provided when token_range is not None"
            )
        if model is not None:
            inst._last_model = WeakModel(model)
        elif inst._last_model is not None:
            model = inst._last_model.get()  # None once the user dropped it
        if model is None and inst.config.records_modules:
            raise MsprobeException(
                _INVALID, f'The model cannot be None, when level is "{level}": start(model=net)'
            )
        if level == "debug":
            return
        if not inst.service.start():
            return
        if inst._first_model.take(model):
            inst._register(model)
        if token_range is not None:
            inst.tokens.arm(models_of(model)[0], token_range)

    def _register(self, model: Any) -> None:
        if model is None:
            return
        if self.config.records_apis and self.config.task in ("statistics", "tensor", "structure"):
            self.primitives.register([c for r in models_of(model) for _, c in r.cells_and_names()])
        if self.config.records_modules:
            self.cells.register(model)

    @classmethod
    @user_entry
    def save(cls, variable: Any, name: str, save_backward: bool = True) -> None:
        cls._get().saver.save(variable, name, save_backward)


__all__ = ["PrecisionDebugger"]
