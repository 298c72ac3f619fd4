"""Go's strconv.Quote, the ``%q`` verb in the error messages flannel and libcni print.

Imported by the CNI plugin on every pod operation: standard library built-ins only.
"""

from __future__ import annotations

_NAMED_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NAMED_ESCAPES["\v"] = "\\v"


def _escaped(char: str) -> str:
    point = ord(char)
    if char in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[char]
    if point < 0x20 or point == 0x7F:
        return f"\\x{point:02x}"
    if 0xD800 <= point <= 0xDFFF:
        # Not a character: bytes that were not UTF-8. Go prints each such byte as \xNN; a
        # surrogateescape'd byte stands for itself, any other surrogate for its own 3 bytes.
        raw = bytes([point - 0xDC00]) if point >= 0xDC80 else char.encode("utf-8", "surrogatepass")
        return "".join(f"\\x{byte:02x}" for byte in raw)
    if point < 0x10000:
        return f"\\u{point:04x}"
    return f"\\U{point:08x}"


def go_quote(text: str) -> str:
    """strconv.Quote: double quotes, backslash escapes, non-printable runes escaped.

    Printable means Go's unicode.IsPrint, which is Python's str.isprintable: letters, marks,
    numbers, punctuation, symbols and the ASCII space.
    """
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        else:
            out.append(_escaped(char))
    out.append('"')
    return "".join(out)
