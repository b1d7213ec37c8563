"""``MsprobeStep`` / ``MsprobeInitStep``: callbacks for ``mindspore.train.Model``."""

from __future__ import annotations

from typing import Any

from mindspore.train import Callback


class MsprobeStep(Callback):  # type: ignore[misc]
    """start() at each train step begin, stop() + step() at its end: one dump folder per step.

    Cell and Primitive hooks need the model: call ``debugger.start(net)`` once before ``Model.train``.
    """

    def __init__(self, debugger: Any) -> None:
        super().__init__()
        self.debugger = debugger

    def on_train_begin(self, run_context: Any) -> None:
        self.debugger.start()

    def on_train_step_begin(self, run_context: Any) -> None:
        self.debugger.start()

    def on_train_step_end(self, run_context: Any) -> None:
        self.debugger.stop()
        self.debugger.step()


class MsprobeInitStep(Callback):  # type: ignore[misc]
    """Sets the debugger's initial step from ``cur_step_num`` when training resumes (8.1.1 intent)."""

    def on_train_begin(self, run_context: Any) -> None:
        from msprobe.dump.mindspore.debugger import PrecisionDebugger

        params = run_context.original_args()
        cur = getattr(params, "cur_step_num", 0) or 0
        if PrecisionDebugger._instance is not None:
            PrecisionDebugger.set_init_step(int(cur))
