"""msprobe: accuracy pre-check for PyTorch (dump -> replay -> compare).

Importing this package is cheap: it imports neither torch nor pandas. The framework front doors are
``msprobe.pytorch`` and ``msprobe.mindspore``.
"""

__version__ = "0.1.0"
