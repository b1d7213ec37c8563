"""A fast writer of exactly ``json.dumps(obj, indent=1)`` for dump records.

dump.json is rewritten at every stop/step, and the stdlib's indenting encoder is pure Python with a
generator per level. Records are encoded once, when collected, by this direct recursive writer; a
flush only joins the cached texts. Output is byte-identical to ``json.dumps(obj, indent=1)``
(including ``NaN``/``Infinity`` literals), which the tests check with hypothesis.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

_INF = float("inf")
_float_repr = float.__repr__
_int_repr = int.__repr__


def _float(o: float) -> str:
    if o != o:
        return "NaN"
    if o == _INF:
        return "Infinity"
    if o == -_INF:
        return "-Infinity"
    return _float_repr(o)


class Summary(dict):  # type: ignore[type-arg]
    """A flat dict of scalars plus a ``shape`` list of ints (a tensor summary): rendered by template."""

    __slots__ = ()


_templates: dict[tuple[int, tuple[str, ...]], str] = {}


def _scalar(v: Any, ind: int) -> str:
    t = type(v)
    if t is float:
        return _float(v)
    if t is str:
        return encode_basestring_ascii(v)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if t is int:
        return _int_repr(v)
    return dumps(v, ind)


def _summary(o: Summary, ind: int) -> str:
    keys = tuple(o)
    key = (ind, keys)
    tmpl = _templates.get(key)
    if tmpl is None:
        nl = "\n" + " " * (ind + 1)
        body = ("," + nl).join(
            encode_basestring_ascii(k).replace("{", "{{").replace("}", "}}") + ": {}" for k in keys
        )
        tmpl = _templates[key] = "{{" + nl + body + "\n" + " " * ind + "}}"
    vals = []
    for k, v in o.items():
        if k == "shape" and type(v) is list:
            if v:
                nl2 = ",\n" + " " * (ind + 2)
                vals.append(
                    "[\n" + " " * (ind + 2) + nl2.join(map(_int_repr, v)) + "\n" + " " * (ind + 1) + "]"
                )
            else:
                vals.append("[]")
        else:
            vals.append(_scalar(v, ind + 1))
    return tmpl.format(*vals)


def _enc(o: Any, ind: int, out: list[str]) -> None:
    t = type(o)
    if t is Summary:
        out.append(_summary(o, ind))
    elif t is str:
        out.append(encode_basestring_ascii(o))
    elif o is None:
        out.append("null")
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif t is int:
        out.append(_int_repr(o))
    elif t is float:
        out.append(_float(o))
    elif t is dict:
        if not o:
            out.append("{}")
            return
        nl = "\n" + " " * (ind + 1)
        sep = "{" + nl
        for k, v in o.items():
            out.append(sep)
            sep = "," + nl
            out.append(encode_basestring_ascii(k if type(k) is str else _key(k)))
            out.append(": ")
            _enc(v, ind + 1, out)
        out.append("\n" + " " * ind + "}")
    elif t is list or t is tuple:
        if not o:
            out.append("[]")
            return
        nl = "\n" + " " * (ind + 1)
        sep = "[" + nl
        for v in o:
            out.append(sep)
            sep = "," + nl
            _enc(v, ind + 1, out)
        out.append("\n" + " " * ind + "]")
    else:  # subclasses and anything exotic: let the stdlib decide (same format)
        text = json.dumps(o, indent=1)
        out.append(text.replace("\n", "\n" + " " * ind))


def _key(k: Any) -> str:
    if k is True:
        return "true"
    if k is False:
        return "false"
    if k is None:
        return "null"
    if isinstance(k, float):
        return _float(k)
    if isinstance(k, int):
        return _int_repr(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


def dumps(o: Any, indent_level: int = 0) -> str:
    """``json.dumps(o, indent=1)``, as if nested ``indent_level`` levels deep."""
    out: list[str] = []
    _enc(o, indent_level, out)
    return "".join(out)


def object_text(items: list[tuple[str, str]], indent_level: int) -> str:
    """Join pre-encoded ``(key, value_text)`` pairs into an object at ``indent_level``."""
    if not items:
        return "{}"
    nl = "\n" + " " * (indent_level + 1)
    parts = [nl + encode_basestring_ascii(k) + ": " + v for k, v in items]
    return "{" + ",".join(parts) + "\n" + " " * indent_level + "}"
