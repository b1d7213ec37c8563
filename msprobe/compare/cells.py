"""Reading the text cells of a details CSV as upstream 8.1.1's compare reads them, column at a time.

Upstream reads both files with pandas defaults and then converts each cell it needs:

* an empty cell or one of pandas' NA words (``nan``, ``NaN``, ``NA``, ``None``, ...) is NaN, a number;
* a blank cell (our and upstream's ``" "``, or any whitespace) raises ``ERROR: Input data is an empty
  string`` and the row becomes a SKIP row carrying that text;
* any other text is ``float(text)`` or raises ``ERROR: Input data cannot be converted to float``.

``parse`` returns the numbers and an error code per cell so the verdict code can pick, per row, the first
failing cell in upstream's evaluation order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

# pandas.read_csv's default NA strings (exact match, no stripping).
NA_WORDS = frozenset(
    {
        "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
        "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
    }
)  # fmt: skip

OK, EMPTY, NOT_FLOAT = 0, 1, 2
ERROR_TEXT = {
    EMPTY: "ERROR: Input data is an empty string",
    NOT_FLOAT: "ERROR: Input data cannot be converted to float",
}


def text_frame(columns: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """A frame of the given columns in which text stays in object arrays.

    pandas 3 would infer its own string dtype for object columns of text, which every later step
    (comparisons, ``str`` methods, iteration) pays for; numeric columns keep their dtype. The frame
    takes the arrays over instead of copying them into one block (callers pass arrays of their own);
    a read-only array (a ``to_numpy`` view of another frame) is copied, so the frame can be written to.
    """
    owned = {k: v if v.flags.writeable else v.copy() for k, v in columns.items()}
    return pd.DataFrame(
        {k: pd.Series(v, dtype=object, copy=False) if v.dtype == object else v for k, v in owned.items()},
        copy=False,
    )


def text_test(cells: np.ndarray, test: Callable[[str], bool]) -> np.ndarray:
    """``test`` of each cell, run once per distinct text; False for a cell that is no text."""
    codes, uniques = pd.factorize(cells)
    hits = np.array([isinstance(u, str) and test(u) for u in uniques] + [False], dtype=bool)
    return hits[codes]  # a missing cell's code -1 picks the trailing False


def is_na(cells: pd.Series) -> np.ndarray:
    return cells.isin(NA_WORDS).to_numpy()


def parse(cells: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Cells (str) → (float64 values, int8 error codes). NA cells are NaN with code OK.

    Works on the distinct texts of the column (blanks and repeated values are parsed once).
    """
    codes_of, uniques = pd.factorize(cells.to_numpy(dtype=object))
    texts = pd.Series(uniques, dtype=object)
    na = is_na(texts)
    stripped = texts.str.strip()
    blank = (stripped == "").to_numpy() & ~na
    numbers = pd.to_numeric(stripped.where(~(na | blank), "nan"), errors="coerce")
    values = np.array(numbers, dtype=np.float64)  # a writable copy (pandas may hand out read-only views)
    codes = np.zeros(len(texts), dtype=np.int8)
    codes[blank] = EMPTY
    # to_numeric gives NaN both for real NaN spellings and for junk: decide those few texts with float().
    unsure = np.flatnonzero(np.isnan(values) & ~na & ~blank)
    raw = stripped.to_numpy(dtype=object)
    for i in unsure:
        try:
            number = float(raw[i])
        except ValueError:
            codes[i] = NOT_FLOAT
        else:
            values[i] = number
    return values[codes_of], codes[codes_of]


def first_error(codes: Sequence[np.ndarray]) -> np.ndarray:
    """Per row, the code of the first failing cell in the given order (OK where none fails)."""
    if not codes:
        return np.zeros(0, dtype=np.int8)
    stacked = np.stack(codes, axis=1)
    failing = stacked != OK
    first = np.argmax(failing, axis=1)
    out = stacked[np.arange(len(first)), first]
    return np.where(failing.any(axis=1), out, OK).astype(np.int8)


def numeric_column(cells: pd.Series) -> bool:
    """Whether pandas would have read this whole column as numbers (no blank or text cell in it)."""
    if (cells.to_numpy(dtype=object) == " ").any():  # the usual blank: text column, no need to parse
        return False
    _, codes = parse(cells)
    return bool((codes == OK).all())


def format_floats(values: np.ndarray) -> np.ndarray:
    """float64 values → ``"%.14f"`` text (``nan``/``inf``/``-inf`` as such), like ``format_cell``.

    Each distinct value is formatted once (metric columns repeat a few values: 0, 1, NaN); values are
    told apart by their bits, so ``-0.0`` keeps its sign.
    """
    codes, bits = pd.factorize(np.ascontiguousarray(values, dtype=np.float64).view(np.int64))
    texts = np.array([f"{v:.14f}" for v in bits.view(np.float64).tolist()], dtype=object)
    return texts[codes]


def as_read(cells: pd.Series, numeric: bool) -> np.ndarray:
    """A cell upstream copies into its output: NA → ``nan``; text as read, or re-printed if numeric."""
    if numeric:
        values, _ = parse(cells)
        return format_floats(values)
    out = cells.to_numpy(dtype=object).copy()
    out[is_na(cells)] = "nan"
    return out
