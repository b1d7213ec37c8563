"""MindSpore front door: ``from msprobe.mindspore import PrecisionDebugger, seed_all, MsprobeStep``
(also ``MsprobeInitStep``, ``save``, ``save_grad``).

Needs ``mindspore`` (``pip install '.[mindspore]'`` from a checkout); never imports torch.
"""

from msprobe.dump.mindspore.callback import MsprobeInitStep, MsprobeStep
from msprobe.dump.mindspore.debugger import PrecisionDebugger
from msprobe.dump.mindspore.seed import seed_all
from msprobe.dump.mindspore.single_save import save, save_grad

__all__ = ["MsprobeInitStep", "MsprobeStep", "PrecisionDebugger", "save", "save_grad", "seed_all"]
