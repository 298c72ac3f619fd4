"""The Go-JSON core: one bounded decoder for every document that comes from outside.

net-conf, lease values, node annotations, backend data, CNI stdin and state files and the
cluster model are all decoded here, and every one of them is held to the same two limits
before the C scanner in ``_json`` sees it:

* ``MAX_DOCUMENT_BYTES`` (1 MiB). flannel's own documents are a few hundred bytes (a lease
  value, net-conf.json, subnet.env); the largest legitimate one is a CNI plugin's stdin with a
  ``prevResult`` and runtime port mappings, a few KiB. 1 MiB passes anything real with a wide
  margin, while what decoding a document may cost (its objects take 10-20 times its size)
  stays bounded.
* ``MAX_DEPTH`` (64 nested arrays and objects). flannel's documents nest at most 3 levels and
  CNI stdin about 5 (``prevResult.interfaces[]`` or ``ipam.ranges[][]`` inside the config).
  Go stops at 10000, far deeper than Python's recursion limit of 1000, which the C scanner
  and every recursive walk over a decoded value (Go's type checks, re-encoding) share with
  the caller's own stack: 64 keeps all of them far from it, whoever calls.

A document over either limit, or not JSON at all, raises ``GoJSONError`` with the message
Go's encoding/json prints (``invalid character '[' exceeded max depth`` for the depth), never
RecursionError, MemoryError or the scanner's own exceptions.

Values follow Go's rules: NaN and Infinity are syntax errors, a number beyond float64 is an
error, lone UTF-16 surrogate escapes become U+FFFD, invalid UTF-8 inside strings becomes
U+FFFD. ``decode`` builds Go ``interface{}`` values (objects as dicts, the last duplicate
key winning; numbers as float64, kept as ``int`` while exactly representable); the struct
layer (``gojson.structs``) builds its own profile on the same ``Decoder``.

The CNI plugin imports this module on every pod operation, so it avoids the ``json`` package
(which pulls in ``re`` and ``enum``) and drives the C scanner directly.
"""

from __future__ import annotations

import _json

from pyflannel_runtime import PyflannelError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any

MAX_DOCUMENT_BYTES = 1 << 20
MAX_DEPTH = 64

EXACT_INT_LIMIT = 2**53  # float64 holds every integer below this exactly
_SAFE_INT_DIGITS = 16  # a longer integer literal is beyond 2**53 (and int() of it may be slow)
_WHITESPACE = " \t\n\r"
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_OPENERS = b"[{"


class GoJSONError(PyflannelError, ValueError):
    """A decoding error with Go's message text. ``offset`` is the index of the byte where Go
    stopped (the document's length when it ran out), or None when no byte is to blame."""

    def __init__(self, msg: str, offset: int | None = None) -> None:
        super().__init__(msg)
        self.offset = offset


class JSONObject(list["tuple[str, Any]"]):
    """A decoded JSON object as its (key, value) pairs, in document order, duplicates kept."""


def go_kind(value: Any) -> str:
    """Go's name for a JSON value's kind, as its unmarshal errors print it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict | JSONObject):
        return "object"
    if isinstance(value, list):
        return "array"
    return "null"


def fold_fields(pairs: Iterable[tuple[str, Any]], fields: Iterable[str]) -> dict[str, Any]:
    """The struct fields Go fills from an object's (key, value) pairs: the exact field name
    first, else a case-insensitive match; the last key for a field wins; other keys are ignored.
    """
    names = set(fields)
    folded_names = {name.casefold(): name for name in names}
    values: dict[str, Any] = {}
    for key, value in pairs:
        field = key if key in names else folded_names.get(key.casefold())
        if field is not None:
            values[field] = value
    return values


def lookup(obj: Mapping[str, Any], field: str) -> Any:
    """One field of a decoded object, Go-style: the exact key, else the last case-insensitive
    match; None when there is none."""
    if field in obj:
        return obj[field]
    return fold_fields(obj.items(), (field,)).get(field)


# --- numbers ----------------------------------------------------------------------------------


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise GoJSONError(f"json: cannot unmarshal number {text} into Go value of type float64")
    return value


def _float64_int(text: str) -> int | float:
    """An integer literal as Go's float64 holds it: an ``int`` while exactly representable."""
    if len(text.lstrip("-")) <= _SAFE_INT_DIGITS:
        value = int(text)
        if abs(value) < EXACT_INT_LIMIT:
            return value
    return _finite_float(text)


def _exact_int(text: str) -> int | float:
    """An integer literal kept exact, for Go struct fields of integer type to judge."""
    try:
        return int(text)
    except ValueError:  # more digits than Python converts: no Go integer holds it either
        return _finite_float(text)


class _NotGoJSON(Exception):
    """NaN, Infinity or -Infinity: Python's scanner accepts them, Go's does not."""


class _ScannerContext:
    """The attributes ``_json.make_scanner`` reads from ``json.JSONDecoder``."""

    strict = True  # control characters inside strings are errors, as in Go
    object_hook = None

    def __init__(
        self,
        object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None,
        parse_int: Callable[[str], int | float],
    ) -> None:
        self.memo: dict[str, str] = {}
        self.object_pairs_hook = object_pairs_hook
        self.parse_int = parse_int

    parse_float = staticmethod(_finite_float)

    @staticmethod
    def parse_constant(text: str) -> Any:
        raise _NotGoJSON(text)


# --- the limits -------------------------------------------------------------------------------


def _document_text(data: bytes | str) -> str:
    """The document as text, once its size is within the limit."""
    size = len(data)
    if isinstance(data, str) and size * 4 > MAX_DOCUMENT_BYTES:
        size = len(data.encode("utf-8", "surrogatepass"))
    if size > MAX_DOCUMENT_BYTES:
        raise GoJSONError(f"document too large: more than {MAX_DOCUMENT_BYTES} bytes")
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def _utf8(data: bytes | str) -> bytes:
    return data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")


def _deeper_than_limit(data: bytes | str) -> bool:
    """True when arrays and objects nest deeper than MAX_DEPTH somewhere in ``data``.

    The count of opening brackets bounds the depth and settles nearly every document at C
    speed. Otherwise brackets inside strings are set aside (with escaped backslashes and
    quotes removed, every other run between quotes is string content) and the rest walked.
    """
    opened = (
        data.count("[") + data.count("{")
        if isinstance(data, str)
        else (data.count(b"[") + data.count(b"{"))
    )
    if opened <= MAX_DEPTH:
        return False
    unescaped = _utf8(data).replace(b"\\\\", b"").replace(b'\\"', b"")
    structure = b"".join(unescaped.split(b'"')[::2]).translate(None, _NOT_BRACKETS)
    depth = 0
    for byte in structure:
        depth += 1 if byte in _OPENERS else -1
        if depth > MAX_DEPTH:
            return True
    return False


def _go_error(data: bytes | str) -> GoJSONError | None:
    """What Go's syntax check says about ``data`` (None: it is well-formed)."""
    from pyflannel_runtime.gojson.syntax import first_error

    found = first_error(_utf8(data), MAX_DEPTH)
    return None if found is None else GoJSONError(*found)


def _rejected(data: bytes | str, reason: str) -> GoJSONError:
    """The Go error for a document one of the fast checks refused."""
    error = _go_error(data)
    if error is None:  # Go's grammar is Python's without NaN and Infinity: never reached
        raise AssertionError(f"Go accepts a document the core refused: {reason}")
    return error


# --- decoding ---------------------------------------------------------------------------------


def _replace_surrogates(value: Any) -> Any:
    """Go decodes an unpaired \\uD800-\\uDFFF escape as U+FFFD."""
    if isinstance(value, str):
        if any("\ud800" <= c <= "\udfff" for c in value):
            return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in value)
        return value
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_replace_surrogates(v) for v in value)
    return value


class Decoder:
    """Go's Unmarshal over the C scanner, within MAX_DOCUMENT_BYTES and MAX_DEPTH.

    ``object_pairs_hook`` gets each object's (key, value) pairs, as with ``json.loads``;
    without it objects are dicts. ``exact_ints`` keeps integers exact instead of float64.
    """

    def __init__(
        self,
        *,
        object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
        exact_ints: bool = False,
    ) -> None:
        parse_int = _exact_int if exact_ints else _float64_int
        context = _ScannerContext(object_pairs_hook, parse_int)
        self._scan = _json.make_scanner(context)  # type: ignore[arg-type]

    def decode(self, data: bytes | str) -> Any:
        """Decode one JSON document; raises GoJSONError with Go's message."""
        text = _document_text(data)
        if _deeper_than_limit(data):
            raise _rejected(data, "nested too deep")
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = self._scan(text, start)
        except GoJSONError as err:  # a number Go cannot hold, unless the syntax fails first
            raise _go_error(data) or err from None
        except (StopIteration, ValueError, _NotGoJSON, SystemError) as err:
            # SystemError: the C scanner builds its JSONDecodeError from the json package,
            # which the CNI plugin does not load, and fails without one (CPython 3.11).
            raise _rejected(data, repr(err)) from None
        if text[end:].strip(_WHITESPACE):
            raise _rejected(data, "data after the value")
        if "\\u" in text:
            value = _replace_surrogates(value)
        return value


_GO_VALUES = Decoder()


def decode(data: bytes | str) -> Any:
    """Decode one JSON document into Go ``interface{}`` values; raises GoJSONError."""
    return _GO_VALUES.decode(data)
