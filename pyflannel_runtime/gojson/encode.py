"""Go's json.Marshal for the values the CNI plugin builds and passes on.

Maps marshal with sorted keys, ``GoStruct`` values in their field order; output is compact
with Go's HTML-safe string escapes and Go's float formatting. Imported by the CNI plugin on
every pod operation: it uses the C string encoder in ``_json`` rather than the json package.
"""

from __future__ import annotations

import _json

from pyflannel_runtime.gojson.core import EXACT_INT_LIMIT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class GoStruct(list["tuple[str, Any]"]):
    """A Go struct value: its fields in declaration order, zero-valued fields already left out."""


_HTML_SAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028"}
_HTML_SAFE["\u2029"] = "\\u2029"


def _string(value: str) -> str:
    quoted: str = _json.encode_basestring(value)
    if any(c in quoted for c in "<>&\u2028\u2029"):
        quoted = "".join(_HTML_SAFE.get(c, c) for c in quoted)
    return quoted


def _float(value: float) -> str:
    """strconv.FormatFloat as encoding/json uses it: 'f' in [1e-6, 1e21), else 'e'."""
    magnitude = abs(value)
    if value.is_integer() and magnitude < EXACT_INT_LIMIT:
        return ("-" if str(value).startswith("-") else "") + str(int(magnitude))
    text = repr(value)
    if magnitude < 1e-6 or magnitude >= 1e21:
        mantissa, _, exponent = text.partition("e")
        sign, digits = exponent[0], exponent[1:].lstrip("0")
        return f"{mantissa}e{sign}{digits.zfill(2) if sign == '+' else digits}"
    if "e" not in text:
        return text
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.lstrip("-").partition(".")
    digits, point = whole + fraction, len(whole) + int(exponent)
    sign = "-" if value < 0 else ""
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point < len(digits):
        return f"{sign}{digits[:point]}.{digits[point:]}"
    return sign + digits + "0" * (point - len(digits))


def _encode(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_string(value))
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif value is None:
        out.append("null")
    elif isinstance(value, int):
        out.append(str(value) if abs(value) < EXACT_INT_LIMIT else _float(float(value)))
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, GoStruct):
        _encode_pairs(list(value), out)
    elif isinstance(value, dict):
        _encode_pairs(sorted(value.items()), out)
    elif isinstance(value, list):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _encode(item, out)
        out.append("]")
    else:
        raise TypeError(f"cannot encode {type(value).__name__}")


def _encode_pairs(pairs: list[tuple[str, Any]], out: list[str]) -> None:
    out.append("{")
    for index, (key, item) in enumerate(pairs):
        if index:
            out.append(",")
        out.append(_string(key))
        out.append(":")
        _encode(item, out)
    out.append("}")


def marshal(value: Any) -> bytes:
    """Go's json.Marshal of a decoded value: compact, map keys sorted."""
    out: list[str] = []
    _encode(value, out)
    return "".join(out).encode("utf-8")
