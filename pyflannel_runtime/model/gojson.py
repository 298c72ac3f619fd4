"""The parts of Go's encoding/json that flannel's formats depend on.

Go matches object keys to struct fields case-insensitively (an exact match first), lets the
last duplicate win, and ignores unknown keys. Python's json module does none of that, so
objects are decoded as ordered pair lists and folded onto field names here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any


class GoJSONError(ValueError):
    pass


class JSONObject(list[tuple[str, Any]]):
    """A decoded JSON object as its (key, value) pairs, in document order, duplicates kept."""


# Built once: json.loads makes a new decoder (or encoder) on every call that passes options,
# which is most of the cost of decoding thousands of small lease values.
_DECODER = json.JSONDecoder(object_pairs_hook=JSONObject)
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def loads_pairs(data: str | bytes) -> Any:
    try:
        text = data.decode() if isinstance(data, bytes) else data
        return _DECODER.decode(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise GoJSONError(str(err)) from None


def to_plain(value: Any) -> Any:
    """Turn JSONObjects into dicts (the last duplicate wins), recursively."""
    if isinstance(value, JSONObject):
        return {k: to_plain(v) for k, v in value}
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    return value


def match_field(key: str, fields: Iterable[str]) -> str | None:
    """The struct field Go would store ``key`` in: the exact name first, then case-folded."""
    names = list(fields)
    if key in names:
        return key
    folded = key.casefold()
    return next((name for name in names if name.casefold() == folded), None)


def fold_object(obj: Any, fields: Iterable[str], type_name: str) -> dict[str, Any]:
    """Map a decoded JSON object onto struct fields the way Go does; the last key wins."""
    if not isinstance(obj, JSONObject):
        raise GoJSONError(
            f"json: cannot unmarshal {go_kind(obj)} into Go value of type {type_name}"
        )
    names = list(fields)
    folded: dict[str, Any] = {}
    for key, value in obj:
        field = match_field(key, names)
        if field is not None:
            folded[field] = value
    return folded


def lookup(mapping: Mapping[str, Any], field: str) -> Any:
    """Case-insensitive lookup in a decoded dict, Go-style: an exact key wins, else the last fold."""
    if field in mapping:
        return mapping[field]
    found = None
    for key, value in mapping.items():
        if key.casefold() == field.casefold():
            found = value
    return found


def go_kind(value: Any) -> str:
    """Go's name for a JSON value's kind, as its unmarshal errors print it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, JSONObject | dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "null"


def compact(value: Any) -> str:
    """Go's json.Marshal layout for plain values: compact, non-ASCII kept, HTML-safe escapes."""
    text = _ENCODER.encode(to_plain(value))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
