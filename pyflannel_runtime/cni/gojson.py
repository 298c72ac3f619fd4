"""Go encoding/json as flannel's CNI plugin sees it, on a start-up budget.

The plugin runs once per pod operation, so this module avoids the ``json`` package (which
pulls in ``re`` and ``enum``) and drives the C scanner in ``_json`` directly.

Decoding follows Go's ``interface{}`` rules: objects become dicts (the last duplicate key
wins), numbers are float64 values (kept as ``int`` when exactly representable), NaN and
Infinity are syntax errors, lone UTF-16 surrogates and invalid UTF-8 become U+FFFD.
Encoding follows ``json.Marshal`` of maps: sorted keys, compact, HTML-safe escapes and Go's
float formatting. ``GoStruct`` values keep their field order, like a marshalled Go struct.
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_MAX_SAFE_INT = 2**53
_WHITESPACE = " \t\n\r"
_MAX_DEPTH = 10000


class GoJSONError(ValueError):
    """A decoding error with Go's message text."""


class GoStruct(list["tuple[str, Any]"]):
    """A Go struct value: its fields in declaration order, zero-valued fields already left out."""


class _ScannerContext:
    """The attributes ``_json.make_scanner`` reads from ``json.JSONDecoder``."""

    strict = True
    object_hook = None
    memo: dict[str, str]

    def __init__(self) -> None:
        self.memo = {}
        self.object_pairs_hook = None

    @staticmethod
    def parse_int(text: str) -> int | float:
        value = int(text)
        return value if abs(value) < _MAX_SAFE_INT else _finite_float(text)

    @staticmethod
    def parse_float(text: str) -> float:
        return _finite_float(text)

    @staticmethod
    def parse_constant(text: str) -> Any:
        raise GoJSONError(f"invalid character '{text[0]}' looking for beginning of value")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise GoJSONError(f"json: cannot unmarshal number {text} into Go value of type float64")
    return value


_scan = _json.make_scanner(_ScannerContext())  # type: ignore[arg-type]


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index] in _WHITESPACE:
        index += 1
    return index


def _syntax_error(text: str, index: int, context: str) -> GoJSONError:
    if index >= len(text):
        return GoJSONError("unexpected end of JSON input")
    return GoJSONError(f"invalid character {_quote_char(text[index])} {context}")


def _quote_char(char: str) -> str:
    if char == "'":
        return "'\\''"
    if char == '"':
        return "'\"'"
    if char.isprintable():
        return f"'{char}'"
    return "'" + ascii(char)[1:-1] + "'"


def _replace_surrogates(value: Any) -> Any:
    """Go decodes an unpaired \\uD800-\\uDFFF escape as U+FFFD."""
    if isinstance(value, str):
        if any("\ud800" <= c <= "\udfff" for c in value):
            return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in value)
        return value
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    return value


def decode(data: bytes) -> Any:
    """Decode one JSON document with Go's value rules; raises GoJSONError."""
    text = data.decode("utf-8", errors="replace")
    start = _skip_space(text, 0)
    try:
        value, end = _scan(text, start)
    except StopIteration as stop:
        raise _syntax_error(text, stop.value, "looking for beginning of value") from None
    except RecursionError:
        raise GoJSONError(f"exceeded max depth of {_MAX_DEPTH}") from None
    except GoJSONError:
        raise
    except ValueError as err:  # json.JSONDecodeError, raised by the C scanner
        position = getattr(err, "pos", len(text))
        raise _syntax_error(text, position, "in JSON document") from None
    end = _skip_space(text, end)
    if end < len(text):
        raise _syntax_error(text, end, "after top-level value")
    if "\\u" in text or "\\U" in text:
        value = _replace_surrogates(value)
    return value


# --- encoding ---------------------------------------------------------------------------------

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
    if value.is_integer() and magnitude < _MAX_SAFE_INT:
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
        out.append(str(value) if abs(value) < _MAX_SAFE_INT else _float(float(value)))
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


def go_kind(value: Any) -> str:
    """Go's name for a JSON value's kind, as its unmarshal errors print it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "null"
