"""A fast writer of exactly ``json.dumps(obj, indent=1)`` for dump records.

dump.json is rewritten at every stop/step, and the stdlib's indenting encoder is pure Python with a
generator per level. Records are encoded once, when collected, by this direct recursive writer; a
flush only joins the cached texts. Output is byte-identical to ``json.dumps(obj, indent=1)``
(including ``NaN``/``Infinity`` literals), which the tests check with hypothesis.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

_float_repr = float.__repr__
_int_repr = int.__repr__


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _float(o: float) -> str:
    r = _float_repr(o)
    if r[-1] in "nf":  # only 'nan', 'inf' and '-inf' end in a letter
        return _NON_FINITE[r]
    return r


class Summary(dict):  # type: ignore[type-arg]
    """A flat dict of scalars plus a ``shape`` list of ints: rendered by template. A plain dict whose
    first keys are a tensor summary's is rendered by the same template."""

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


_TENSOR_KEYS = ("type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad")
_heads: dict[tuple[Any, ...], str] = {}  # text up to "Max": of a tensor summary
_joints: dict[int, tuple[str, ...]] = {}  # the text between its values, per indent


def _summary(o: Summary, ind: int) -> str:
    keys = tuple(o)
    if _is_tensor_summary(o, keys):
        return _tensor_summary(o, ind, keys)
    key = (ind, keys)
    tmpl = _templates.get(key)
    if tmpl is None:
        nl = "\n" + " " * (ind + 1)
        body = ("," + nl).join(
            encode_basestring_ascii(k).replace("{", "{{").replace("}", "}}") + ": {}" for k in keys
        )
        tmpl = _templates[key] = "{{" + nl + body + "\n" + " " * ind + "}}"
    return tmpl.format(*[_value_text(k, v, ind) for k, v in o.items()])


def _is_tensor_summary(o: dict[str, Any], keys: tuple[str, ...]) -> bool:
    """The eight tensor keys first, with the types the cached head text is keyed by."""
    if keys[:8] != _TENSOR_KEYS or type(o["type"]) is not str or type(o["dtype"]) is not str:
        return False
    shape = o["shape"]
    return type(shape) is list and all(type(n) is int for n in shape)


def _tensor_summary(o: dict[str, Any], ind: int, keys: tuple[str, ...]) -> str:
    """The common summary (the eight tensor keys first) without a format call: the text up to Max
    is cached by indent, type, dtype and shape."""
    shape = o["shape"]
    key = (ind, o["type"], o["dtype"], *shape)
    head = _heads.get(key)
    joints = _joints.get(ind)
    if head is None or joints is None:
        nl = "," + "\n" + " " * (ind + 1)
        joints = _joints[ind] = tuple(nl + encode_basestring_ascii(k) + ": " for k in _TENSOR_KEYS)
        head = (
            "{" + joints[0][1:] + _value_text("type", o["type"], ind) + joints[1]
            + _value_text("dtype", o["dtype"], ind) + joints[2] + _shape_text(shape, ind) + joints[3]
        )  # fmt: skip
        if len(_heads) < 4096:
            _heads[key] = head
    text = (
        head + _scalar(o["Max"], ind + 1) + joints[4] + _scalar(o["Min"], ind + 1) + joints[5]
        + _scalar(o["Mean"], ind + 1) + joints[6] + _scalar(o["Norm"], ind + 1) + joints[7]
        + _value_text("requires_grad", o["requires_grad"], ind)
    )  # fmt: skip
    nl = ",\n" + " " * (ind + 1)
    for k in keys[8:]:
        text += nl + encode_basestring_ascii(k) + ": " + _value_text(k, o[k], ind)
    return text + "\n" + " " * ind + "}"


def _value_text(k: str, v: Any, ind: int) -> str:
    tv = type(v)
    if tv is float:
        return _float(v)
    if tv is str:
        return _str_text(v)
    if k == "shape" and tv is list:
        return _shape_text(v, ind)
    return _scalar(v, ind + 1)


_strings: dict[str, str] = {}  # dtype and type names repeat in every summary
_shapes: dict[tuple[int, tuple[int, ...]], str] = {}


def _str_text(v: str) -> str:
    text = _strings.get(v)
    if text is None:
        text = encode_basestring_ascii(v)
        if len(_strings) < 4096:
            _strings[v] = text
    return text


def _shape_text(v: list[int], ind: int) -> str:
    if not v:
        return "[]"
    if not all(type(n) is int for n in v):
        return dumps(v, ind + 1)
    key = (ind, tuple(v))
    text = _shapes.get(key)
    if text is None:
        nl2 = ",\n" + " " * (ind + 2)
        text = "[\n" + " " * (ind + 2) + nl2.join(map(_int_repr, v)) + "\n" + " " * (ind + 1) + "]"
        if len(_shapes) < 4096:
            _shapes[key] = text
    return text


_NL = ["\n" + " " * i for i in range(64)]  # newline and indent, per level
_key_texts: dict[str, str] = {}  # '"key": ' of the keys records repeat


def _newline(ind: int) -> str:
    return _NL[ind] if ind < 64 else "\n" + " " * ind


def _key_text(k: Any) -> str:
    if type(k) is not str:
        return encode_basestring_ascii(_key(k)) + ": "
    text = _key_texts.get(k)
    if text is None:
        text = encode_basestring_ascii(k) + ": "
        if len(_key_texts) < 4096:
            _key_texts[k] = text
    return text


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
        if "Max" in o:  # a tensor summary (a plain dict pickles several times faster than Summary)
            keys = tuple(o)
            if _is_tensor_summary(o, keys):
                out.append(_tensor_summary(o, ind, keys))
                return
        nl = _newline(ind + 1)
        sep = "{" + nl
        for k, v in o.items():
            out.append(sep + _key_text(k))
            sep = "," + nl
            _enc(v, ind + 1, out)
        out.append(_newline(ind) + "}")
    elif t is list or t is tuple:
        if not o:
            out.append("[]")
            return
        nl = _newline(ind + 1)
        sep = "[" + nl
        for v in o:
            out.append(sep)
            sep = "," + nl
            _enc(v, ind + 1, out)
        out.append(_newline(ind) + "]")
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


def object_pieces(items: Iterable[tuple[str, str]], indent_level: int) -> Iterator[str]:
    """Pre-encoded ``(key, value_text)`` pairs as an object at ``indent_level``, in pieces (one an item):
    written without ever holding the whole text."""
    nl = "\n" + " " * (indent_level + 1)
    sep = "{" + nl
    for key, value in items:
        yield sep + encode_basestring_ascii(key) + ": " + value
        sep = "," + nl
    yield "{}" if sep.startswith("{") else "\n" + " " * indent_level + "}"
