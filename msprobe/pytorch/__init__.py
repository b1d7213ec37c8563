"""PyTorch front door, compatible with msprobe 8.1.1:
``from msprobe.pytorch import PrecisionDebugger, seed_all, module_dump, module_dump_end``."""

from msprobe.dump.pytorch.debugger import PrecisionDebugger, module_dump, module_dump_end
from msprobe.dump.pytorch.seed import seed_all

__all__ = ["PrecisionDebugger", "module_dump", "module_dump_end", "seed_all"]
