"""The cosine cell does not depend on how many threads numpy's BLAS uses (the host's core count).

np.dot splits a long dot product over OpenBLAS's threads and rounds differently with each count, so
the same replay wrote 1.00000000000000 under OMP_NUM_THREADS=1 and 0.99999999999999 with it unset
on a 2-core host (tiny Llama, Functional.linear.14.backward.output.1).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import numpy as np
from msprobe.run_ut.standards import metrics
rng = np.random.default_rng(0)
b = rng.standard_normal(1_000_000)
d = b + rng.standard_normal(1_000_000) * 1e-3
print(repr(metrics.cosine(b, d)[0]))
"""


def _cosine_with_threads(threads: int) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_cosine_is_the_same_on_one_and_two_blas_threads() -> None:
    # on a one-core host BLAS runs one thread either way and this passes trivially
    assert _cosine_with_threads(1) == _cosine_with_threads(2)
