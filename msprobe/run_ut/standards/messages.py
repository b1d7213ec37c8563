"""The exact Message sentences of the details CSV.

Sentences are facts about upstream's output (they land in a CSV read by api_precision_compare and by
people who grep for them); each constant is grouped by the check that writes it.
"""

from __future__ import annotations

# legacy status chain; each ends in "\n" as written upstream.
MAX_ABS_PASS = "Max abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n"
REL_LESS_THOUSANDTH_PASS = (
    "Relative error is less than 0.001, consider as pass, skip other check and set to SPACE.\n"
)
REL_GREATER_THOUSANDTH_WARNING = (
    "Relative error is greater than 0.001, consider as warning, skip other check and set to SPACE.\n"
)
REL_GREATER_HUNDREDTH_ERROR = (
    "Relative error is greater than 0.01, consider as error, skip other check and set to SPACE.\n"
)
REL_GREATER_THOUSANDTH_ERROR = (
    "Relative error is greater than 0.001, consider as error, skip other check and set to SPACE.\n"
)
REL_GREATER_TEN_THOUSANDTH_WARNING = (
    "Relative error is greater than 0.0001, consider as warning, skip other check and set to SPACE.\n"
)
REL_LESS_TEN_THOUSANDTH_PASS = "Relative error is less than 0.0001, consider as pass.\n"
COSINE_ERROR = "Cosine similarity is less than 0.99, consider as error, skip other check and set to SPACE.\n"

# cosine; no trailing newline: the chain appends "\n" after the cosine message.
COSINE_SCALAR = "All the data in device dump data is scalar. Please refer to other compare algorithms."
COSINE_BOTH_ZERO = "All the data in device and bench outputs are zero."
COSINE_DEVICE_ZERO = "All the data is zero in device dump data."
COSINE_BENCH_ZERO = "All the data is zero in bench dump data."
COSINE_NAN = "Dump data has NaN when comparing with Cosine Similarity."
# ours (Deviations from 8.1.1, docs/standards.md): every position is inf/nan at the same place.
COSINE_ALL_SAME_NONFINITE = "All the data in device and bench outputs are inf/nan at the same positions."

# structure and tensor checks
BENCH_NONE = "Bench output is None, skip this test."
STRUCTURE_DIFFERENT = "bench and npu output structure is different."
TYPE_DIFFERENT = "bench and npu output type is different."
DICT_KEYS_DIFFERENT = "bench and npu output dict keys are different."
EMPTY_OUTPUT = "The output is empty: no element to compare."  # ours (8.1.1: an error, NO_BENCH_RESULT)


def unexpected_type(obj: object) -> str:
    return f"Unexpected output type in compare_core: {type(obj)}"


def shape_not_equal(bench_shape: tuple[int, ...], device_shape: tuple[int, ...]) -> str:
    return f"The shape of bench{bench_shape} and npu{device_shape} not equal."


def cannot_compare(bench_dtype: str, device_dtype: str) -> str:
    return f"Bench out dtype is {bench_dtype} but npu output dtype is {device_dtype}, cannot compare."


def only_error_rate(dtype: str) -> str:
    """Integer/bool outputs."""
    return f"Compare algorithm is not supported for {dtype} data. Only judged by Error Rate.\n"


def dtype_not_new_standard(dtype: str) -> str:
    """Float outputs other than fp16/bf16/fp32 get no standard metrics."""
    return f"The data type {dtype} is not supported for new precision standard."


def noise_floor_pass(bench_max: float, floor: float, error: float, atol: float) -> str:
    """Ours (docs/standards.md "Deviations from 8.1.1"): a near-zero output re-judged by its noise floor."""
    return (
        f"Bench output is at its noise floor (max |bench| {bench_max:.3g}, noise floor {floor:.3g}) and "
        f"max abs error {error:.3g} is within {atol:g} floors, consider as pass.\n"
    )


def correctly_rounded(dtype: str) -> str:
    """Ours (docs/standards.md "Deviations from 8.1.1"): the device output is the bench rounded to its
    dtype, element by element."""
    return (
        f"Device output equals the bench output rounded to {dtype.removeprefix('torch.')} at every element "
        "(the closest values the dtype holds), consider as pass.\n"
    )
