"""Dump stage: framework-neutral core (config, naming, filters, journal, writers).

Framework code lives in ``msprobe.dump.pytorch`` (and later ``msprobe.dump.mindspore``); this package
itself imports neither framework.
"""
