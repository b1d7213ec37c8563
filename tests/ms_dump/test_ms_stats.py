"""Laws of the host-side statistics against independent formulations."""

from __future__ import annotations

import math
import zlib

import mindspore as ms
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from msprobe.dump.mindspore.encode import Encoder
from msprobe.dump.mindspore.stats import array_stats, crc32_hex

finite32 = st.floats(-1e4, 1e4, allow_nan=False, width=32)
arrays32 = hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=6), elements=finite32)


def _ulps(a: float, b: float) -> float:
    return abs(a - b) / max(np.spacing(np.float32(abs(b))), np.spacing(np.float32(1e-30)))


@given(arrays32)
def test_float32_stats_match_float64_reference(a):
    vmax, vmin, mean, norm = array_stats(a)
    ref = a.astype(np.float64)
    assert vmax == float(ref.max()) and vmin == float(ref.min())
    assert _ulps(mean, float(ref.mean())) <= 1.0 or abs(mean - ref.mean()) < 1e-6
    assert _ulps(norm, math.sqrt(float((ref * ref).sum()))) <= 1.0
    assert all(type(v) is float for v in (vmax, vmin, mean, norm))


@given(
    hnp.arrays(
        np.int32, hnp.array_shapes(min_dims=1, max_dims=2, max_side=5), elements=st.integers(-1000, 1000)
    )
)
def test_integers_are_summarised_as_float32(a):
    vmax, vmin, mean, norm = array_stats(a)
    assert (vmax, vmin) == (float(a.max()), float(a.min()))
    assert mean == float(np.float32(a.astype(np.float64).mean()))
    assert isinstance(norm, float)


@given(
    hnp.arrays(
        np.float16,
        hnp.array_shapes(min_dims=1, max_dims=2, max_side=5),
        elements=st.floats(-100, 100, width=16),
    )
)
def test_float16_stats_carry_float16_rounding(a):
    _, _, mean, norm = array_stats(a)
    assert mean == float(np.float16(a.astype(np.float64).mean()))
    assert norm == float(np.float16(np.sqrt((a.astype(np.float64) ** 2).sum())))


def test_special_cases():
    assert array_stats(np.zeros((0, 3), np.float32)) == (None, None, None, None)
    assert array_stats(np.array([True, False])) == (True, False, None, None)
    assert array_stats(np.array(True)) == (True, True, None, None)  # bool before 0-dim, as 8.1.1
    assert array_stats(np.array(3, np.int64)) == (3, 3, 3, 3)
    assert array_stats(np.array(2.5, np.float32)) == (2.5, 2.5, 2.5, 2.5)
    vmax, *_ = array_stats(np.array([1.0, np.nan], np.float32))
    assert math.isnan(vmax)
    assert array_stats(np.array([3 + 4j, 0j], np.complex64))[0] == 5.0


def test_a_0_dim_bfloat16_tensor_is_summarised_as_python_floats():
    stats = array_stats(ms.Tensor(2.5, ms.bfloat16).asnumpy())
    assert stats == (2.5, 2.5, 2.5, 2.5) and all(type(v) is float for v in stats)  # json can write them


def test_bfloat16_tensor_summary_and_md5():
    t = ms.Tensor(np.array([1.0, 2.0, 3.140625], np.float32), ms.bfloat16)
    enc = Encoder(md5=True, saver=None)
    s = enc.value(t, None, "x", 0)
    assert s["dtype"] == "BFloat16" and s["Max"] == 3.140625
    raw = np.array([1.0, 2.0, 3.140625], np.float32).tobytes()
    assert s["md5"] == f"{zlib.crc32(raw):08x}" == crc32_hex(t.asnumpy())
    assert list(s) == ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "md5"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (3, {"type": "int", "value": 3}),
        (True, {"type": "bool", "value": True}),
        ("s", {"type": "str", "value": "s"}),
        (slice(1, None, 2), {"type": "slice", "value": [1, None, 2]}),
        (Ellipsis, {"type": "ellipsis", "value": "..."}),
        (ms.float16, {"type": "mindspore.dtype", "value": "Float16"}),
        ((1, [2.0]), [{"type": "int", "value": 1}, [{"type": "float", "value": 2.0}]]),
        (np.float32(2.0), {"type": "float32", "value": 2.0}),
        (object(), None),
    ],
)
def test_value_encodings(value, expected):
    assert Encoder(md5=False, saver=None).value(value, None, "x", 0) == expected
