"""MindSpore dump (PyNative): framework code on top of the shared core in ``msprobe.dump``.

Imports mindspore, never torch. The public front door is :mod:`msprobe.mindspore`.
"""
