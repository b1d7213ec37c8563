"""Root conftest: hypothesis profiles (derandomised, no example database and a small budget in CI)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "msprobe-ci",
    derandomize=True,
    database=None,
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=20, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "msprobe-ci"))

pytest_plugins = ["pytester"]
