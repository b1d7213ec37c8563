"""The ``step`` / ``rank`` list syntax of config.json: ints and ``"a-b"`` ranges."""

from __future__ import annotations

import re
from collections.abc import Iterable

from msprobe.dump.exceptions import MsprobeException

MAX_VALUE = 1_000_000
MAX_LENGTH = 1_000_000
_RANGE = re.compile(r"^(\d+)-(\d+)$")


def parse_index_list(value: object, field: str, where: str = "") -> tuple[int, ...]:
    """Parse a step/rank list into a sorted, de-duplicated tuple of ints.

    ``where`` names the file the value came from (added to the message). Raises
    :class:`MsprobeException` with a one-line message naming ``field``.
    """
    loc = f"{where}: " if where else ""

    def fail(msg: str) -> MsprobeException:
        return MsprobeException(MsprobeException.INVALID_PARAM_ERROR, f"{loc}{msg}")

    if not isinstance(value, list | tuple):
        raise fail(f"{field} is invalid, it should be a list, got {value!r}")
    if len(value) > MAX_LENGTH:
        raise fail(f"{field} is invalid, its length must be at most {MAX_LENGTH}")
    out: set[int] = set()
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int | str):
            raise fail(f"{field} is invalid, each element must be an int or a 'a-b' string, got {item!r}")
        if isinstance(item, int):
            _check_range(item, field, fail)
            out.add(item)
            continue
        match = _RANGE.match(item)
        if not match:
            raise fail(
                f"{field} element {item!r} is invalid: the hyphen(-) must start and end with decimal "
                'numbers, only formats like "3-5" are supported'
            )
        if max(len(match.group(1)), len(match.group(2))) > len(str(MAX_VALUE)):
            raise fail(
                f"Each element of {field} must be between 0 and {MAX_VALUE}, currently it is "
                f"{item[:20]}... ({len(item)} characters)."
            )
        lo, hi = int(match.group(1)), int(match.group(2))
        _check_range(lo, field, fail)
        _check_range(hi, field, fail)
        if lo > hi:
            raise fail(
                f"{field} element {item!r} is invalid: the left boundary ({lo}) cannot be greater "
                f"than the right boundary ({hi})"
            )
        out.update(range(lo, hi + 1))
        if len(out) > MAX_LENGTH:
            raise fail(f"{field} is invalid, it expands to more than {MAX_LENGTH} values")
    return tuple(sorted(out))


def _check_range(v: int, field: str, fail: object) -> None:
    if not 0 <= v <= MAX_VALUE:
        raise fail(  # type: ignore[operator]
            f"Each element of {field} must be between 0 and {MAX_VALUE}, currently it is {v}."
        )


def format_index_list(values: Iterable[int]) -> str:
    """Compact human form for logs: ``[0, 2-5]``."""
    vals = sorted(set(values))
    parts: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        parts.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return "[" + ", ".join(parts) + "]"
