"""Go's JSON syntax check (encoding/json scanner.go, checkValid): the error Go reports.

The C scanner the core decodes with knows where a document went wrong but not how Go words
it (and without the ``json`` package loaded it cannot even say where). Only a document that
failed one of the core's checks comes here, so a byte-at-a-time scan is affordable: this
module is imported on that path alone. It recurses once per open array or object and stops
at ``max_depth``, as Go's scanner does at its own limit.
"""

from __future__ import annotations

from pyflannel_runtime.gojson.strconv import go_quote

_SPACE = frozenset(b" \t\r\n")
_DIGITS = frozenset(b"0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESCAPES = frozenset(b'bfnrt\\/"')
_LITERALS = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}
_END = -1  # what peek() returns past the last byte


def quote_char(byte: int) -> str:
    """scanner.go's quoteChar: a byte as Go names it in ``invalid character ...``."""
    if byte == ord("'"):
        return "'\\''"
    if byte == ord('"'):
        return "'\"'"
    return "'" + go_quote(chr(byte))[1:-1] + "'"


class _Stop(Exception):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


class _Scanner:
    """Go's scanner, one method per kind of value."""

    def __init__(self, data: bytes, max_depth: int) -> None:
        self.data = data
        self.max_depth = max_depth
        self.depth = 0

    def peek(self, index: int) -> int:
        return self.data[index] if index < len(self.data) else _END

    def need(self, index: int) -> int:
        """A byte a structural position needs: running out there is "unexpected end"."""
        if index >= len(self.data):
            raise _Stop("unexpected end of JSON input", len(self.data))
        return self.data[index]

    def invalid(self, index: int, context: str) -> _Stop:
        # Inside a token, Go's eof() feeds one space, which the token's state rejects.
        char = self.peek(index)
        byte = ord(" ") if char == _END else char
        return _Stop(f"invalid character {quote_char(byte)} {context}", index)

    def space(self, index: int) -> int:
        data = self.data
        while index < len(data) and data[index] in _SPACE:
            index += 1
        return index

    def document(self) -> None:
        index = self.space(self.value(self.space(0)))
        if index < len(self.data):
            raise self.invalid(index, "after top-level value")

    def value(self, index: int) -> int:
        """Scan the value at ``index`` (whitespace skipped); the index just after it."""
        char = self.need(index)
        if char in (ord("{"), ord("[")):
            return self.container(index)
        if char == ord('"'):
            return self.string(index + 1)
        if char == ord("-") or char in _DIGITS:
            return self.number(index)
        if char in _LITERALS:
            return self.literal(index, _LITERALS[char])
        raise self.invalid(index, "looking for beginning of value")

    def container(self, index: int) -> int:
        is_object = self.data[index] == ord("{")
        self.depth += 1
        if self.depth > self.max_depth:
            raise self.invalid(index, "exceeded max depth")
        closer = ord("}") if is_object else ord("]")
        index = self.space(index + 1)
        if self.need(index) != closer:
            while True:
                if is_object:
                    if self.need(index) != ord('"'):
                        raise self.invalid(index, "looking for beginning of object key string")
                    index = self.space(self.string(index + 1))
                    if self.need(index) != ord(":"):
                        raise self.invalid(index, "after object key")
                    index = self.space(index + 1)
                index = self.space(self.value(index))
                char = self.need(index)
                if char == closer:
                    break
                if char != ord(","):
                    context = "after object key:value pair" if is_object else "after array element"
                    raise self.invalid(index, context)
                index = self.space(index + 1)
        self.depth -= 1
        return index + 1

    def string(self, index: int) -> int:
        """From just after the opening quote to just after the closing one."""
        while True:
            char = self.need(index)
            if char == ord('"'):
                return index + 1
            if char == ord("\\"):
                index += 1
                escape = self.peek(index)
                if escape == ord("u"):
                    for digit in range(index + 1, index + 5):
                        if self.peek(digit) not in _HEX:
                            raise self.invalid(digit, "in \\u hexadecimal character escape")
                    index += 4
                elif escape not in _ESCAPES:
                    raise self.invalid(index, "in string escape code")
            elif char < 0x20:
                raise self.invalid(index, "in string literal")
            index += 1

    def digits(self, index: int) -> int:
        while self.peek(index) in _DIGITS:
            index += 1
        return index

    def number(self, index: int) -> int:
        if self.peek(index) == ord("-"):
            index += 1
            if self.peek(index) not in _DIGITS:
                raise self.invalid(index, "in numeric literal")
        index = index + 1 if self.peek(index) == ord("0") else self.digits(index)
        if self.peek(index) == ord("."):
            index += 1
            if self.peek(index) not in _DIGITS:
                raise self.invalid(index, "after decimal point in numeric literal")
            index = self.digits(index)
        if self.peek(index) in (ord("e"), ord("E")):
            index += 1
            if self.peek(index) in (ord("+"), ord("-")):
                index += 1
            if self.peek(index) not in _DIGITS:
                raise self.invalid(index, "in exponent of numeric literal")
            index = self.digits(index)
        return index

    def literal(self, index: int, word: bytes) -> int:
        for offset in range(1, len(word)):
            if self.peek(index + offset) != word[offset]:
                expected = quote_char(word[offset])
                raise self.invalid(
                    index + offset, f"in literal {word.decode()} (expecting {expected})"
                )
        return index + len(word)


def first_error(data: bytes, max_depth: int) -> tuple[str, int] | None:
    """The error Go's Unmarshal reports for ``data`` with nesting limited to ``max_depth``, and
    the index of the byte it stopped at (the length of ``data`` when it ran out); None when Go
    finds the document well-formed."""
    try:
        _Scanner(data, max_depth).document()
    except _Stop as stop:
        return stop.message, stop.offset
    return None
