"""MindSpore front door: ``from msprobe.mindspore import PrecisionDebugger, seed_all, MsprobeStep``.

Needs ``mindspore`` (``pip install 'msprobe[mindspore]'``); never imports torch.
"""

from msprobe.dump.mindspore.callback import MsprobeInitStep, MsprobeStep
from msprobe.dump.mindspore.debugger import PrecisionDebugger
from msprobe.dump.mindspore.seed import seed_all

__all__ = ["MsprobeInitStep", "MsprobeStep", "PrecisionDebugger", "seed_all"]
