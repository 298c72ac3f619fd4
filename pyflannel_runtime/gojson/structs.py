"""Go's struct decoding on top of the core: the layer flannel's own formats use.

Go matches object keys to struct fields case-insensitively (an exact match first), lets the
last duplicate win, and ignores unknown keys. So objects are decoded as ordered pair lists
(``JSONObject``) and folded onto field names here; integers stay exact for Go's integer
fields to judge. Decoding is the core's, with its limits and Go's error messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pyflannel_runtime.gojson.core import Decoder, GoJSONError, JSONObject, fold_fields, go_kind

_PAIRS = Decoder(object_pairs_hook=JSONObject, exact_ints=True)
# Built once: json.dumps makes a new encoder on every call that passes options, which is most
# of the cost of re-encoding thousands of small lease values.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def loads_pairs(data: str | bytes) -> Any:
    """One JSON document with objects as JSONObject pair lists; raises GoJSONError."""
    return _PAIRS.decode(data)


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
    return fold_fields(obj, fields)


def compact(value: Any) -> str:
    """Go's json.Marshal layout for plain values: compact, non-ASCII kept, HTML-safe escapes."""
    text = _ENCODER.encode(to_plain(value))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
