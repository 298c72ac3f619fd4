"""The Go-JSON core: Go's syntax errors word for word, the depth and size limits, strconv.Quote,
and the struct layer on top of the same decoder."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.cni.install import isolated_prelude
from pyflannel_runtime.gojson.core import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    GoJSONError,
    JSONObject,
    decode,
    fold_fields,
    go_kind,
    lookup,
)
from pyflannel_runtime.gojson.strconv import go_quote
from pyflannel_runtime.gojson.structs import compact, fold_object, loads_pairs, to_plain
from pyflannel_runtime.gojson.syntax import first_error


def nested(depth: int, opener: str = "[", closer: str = "]") -> str:
    return opener * depth + closer * depth


# What Go 1.22's json.Unmarshal into interface{} says, byte for byte.
GO_SYNTAX_ERRORS = [
    (b"", "unexpected end of JSON input"),
    (b" \n", "unexpected end of JSON input"),
    (b'{"cniVersion":"0.3.1","name":"cb', "unexpected end of JSON input"),
    (b"[1,", "unexpected end of JSON input"),
    (b"{not json", "invalid character 'n' looking for beginning of object key string"),
    (b"{}x", "invalid character 'x' after top-level value"),
    (b"0123", "invalid character '1' after top-level value"),
    (b"NaN", "invalid character 'N' looking for beginning of value"),
    (b"[-Infinity]", "invalid character 'I' in numeric literal"),
    (b"1.", "invalid character ' ' after decimal point in numeric literal"),
    (b"1.x", "invalid character 'x' after decimal point in numeric literal"),
    (b"1e+", "invalid character ' ' in exponent of numeric literal"),
    (b"-", "invalid character ' ' in numeric literal"),
    (b"tru", "invalid character ' ' in literal true (expecting 'e')"),
    (b"nul!", "invalid character '!' in literal null (expecting 'l')"),
    (b"[1,]", "invalid character ']' looking for beginning of value"),
    (b'{"a":1,}', "invalid character '}' looking for beginning of object key string"),
    (b'{"a" 1}', "invalid character '1' after object key"),
    (b'{"a":1 "b":2}', "invalid character '\"' after object key:value pair"),
    (b"[1 2]", "invalid character '2' after array element"),
    (b'"\\x"', "invalid character 'x' in string escape code"),
    (b'"\\u12g4"', "invalid character 'g' in \\u hexadecimal character escape"),
    (b'"a\tb"', "invalid character '\\t' in string literal"),
    (b"'a'", "invalid character '\\'' looking for beginning of value"),
    (b"\xff", "invalid character '\xff' looking for beginning of value"),
    (b"\x7f", "invalid character '\\x7f' looking for beginning of value"),
    (b"[" * 65 + b"]" * 65, "invalid character '[' exceeded max depth"),
    (b'{"a":' * 70, "invalid character '{' exceeded max depth"),
    (b"[1,x" + b"[" * 100, "invalid character 'x' looking for beginning of value"),
]


@pytest.mark.parametrize(("data", "message"), GO_SYNTAX_ERRORS)
def test_syntax_errors_are_gos(data: bytes, message: str) -> None:
    with pytest.raises(GoJSONError) as err:
        decode(data)
    assert str(err.value) == message
    # the struct layer decodes through the same core
    with pytest.raises(GoJSONError) as err:
        loads_pairs(data)
    assert str(err.value) == message


def test_errors_need_no_json_package() -> None:
    """The CNI plugin never imports json; the C scanner cannot raise its own error without it
    and used to fail with SystemError ("returned NULL without setting an exception")."""
    probe = isolated_prelude() + (
        "from pyflannel_runtime.gojson.core import GoJSONError, decode\n"
        "for data in sys.argv[1:]:\n"
        "    try:\n"
        "        decode(data.encode())\n"
        "    except GoJSONError as err:\n"
        "        print(err)\n"
        "print('json' in sys.modules)\n"
    )
    cases = ['{"cniVersion":"0.3.1","type":"bridge","name":"cb', "{not json", '"abc', "[1,x]"]
    done = subprocess.run(
        [sys.executable, "-IS", "-c", probe, *cases], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == [
        "unexpected end of JSON input",
        "invalid character 'n' looking for beginning of object key string",
        "unexpected end of JSON input",
        "invalid character 'x' looking for beginning of value",
        "False",
    ]


def test_depth_limit_is_exact() -> None:
    assert decode(nested(MAX_DEPTH)) == decode(nested(MAX_DEPTH).encode())
    with pytest.raises(GoJSONError):
        decode(nested(MAX_DEPTH + 1))
    mixed = '{"a":' * (MAX_DEPTH - 1) + "[]" + "}" * (MAX_DEPTH - 1)
    assert isinstance(loads_pairs(mixed), JSONObject)


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps(["[" * 5000, '\\"[[[' * 100, {"{": "}" * 50}])
    assert decode(text) == json.loads(text)
    # an escaped backslash before the closing quote ends the string: what follows is structure
    shallow = '["\\\\", "' + "[" * 100 + '", ' + nested(MAX_DEPTH - 1) + "]"
    assert decode(shallow) == json.loads(shallow)
    with pytest.raises(GoJSONError, match="exceeded max depth"):
        decode('["\\\\", ' + nested(MAX_DEPTH) + "]")


def test_the_first_error_wins_as_in_go() -> None:
    """Go checks the syntax before it decodes: a syntax error ahead of a deep part or a number
    float64 cannot hold is what it reports."""
    with pytest.raises(GoJSONError, match=r"^invalid character 'x'"):
        decode("[x," + nested(200) + "]")
    with pytest.raises(GoJSONError, match=r"^invalid character 'x'"):
        decode("[1e999,x]")
    with pytest.raises(GoJSONError, match="exceeded max depth"):
        decode(nested(200) + "x")


def test_size_limit() -> None:
    padding = " " * (MAX_DOCUMENT_BYTES - 2)
    assert decode(padding + "[]") == []
    for document in (padding + "[] ", (padding + "[] ").encode(), "é" * MAX_DOCUMENT_BYTES):
        with pytest.raises(GoJSONError) as err:
            decode(document)
        assert str(err.value) == f"document too large: more than {MAX_DOCUMENT_BYTES} bytes"


def test_go_values() -> None:
    assert decode(b'{"a":1,"a":2,"b":[true,null,1.5,9007199254740993]}') == {
        "a": 2,
        "b": [True, None, 1.5, 9007199254740992.0],
    }
    assert decode(b'"\\ud800x\xff"') == "\ufffdx\ufffd"
    with pytest.raises(GoJSONError, match=r"^json: cannot unmarshal number 1e400 into Go value"):
        decode(b"1e400")


def test_struct_layer_keeps_pairs_and_exact_integers() -> None:
    pairs = loads_pairs('{"Network":"a","network":"b","n":123456789012345678901234}')
    assert pairs == [("Network", "a"), ("network", "b"), ("n", 123456789012345678901234)]
    assert fold_object(pairs, ["Network"], "T") == {"Network": "b"}
    assert to_plain(loads_pairs('{"a":{"b":[{"c":1}]}}')) == {"a": {"b": [{"c": 1}]}}
    assert compact(loads_pairs('{"x": "<&>", "y": [1, 2.5]}')) == (
        '{"x":"\\u003c\\u0026\\u003e","y":[1,2.5]}'
    )
    assert go_kind(pairs) == "object" and go_kind([]) == "array" and go_kind(None) == "null"


def test_field_matching() -> None:
    pairs = [("TYPE", 1), ("type", 2), ("Other", 3)]
    assert fold_fields(pairs, ["type"]) == {"type": 2}
    assert fold_fields([("type", 2), ("TYPE", 1)], ["type"]) == {"type": 1}
    assert lookup({"type": 2, "TYPE": 1}, "type") == 2  # an exact key wins in a decoded dict
    assert lookup({"Type": 1, "TYPE": 2}, "type") == 2
    assert lookup({}, "type") is None


# strconv.Quote's output for each, from Go 1.22
GO_QUOTES = [
    ("plain text", '"plain text"'),
    ('say "hi" \\ bye', '"say \\"hi\\" \\\\ bye"'),
    ("\a\b\f\n\r\t\v", '"\\a\\b\\f\\n\\r\\t\\v"'),
    ("\x00\x1f\x7f", '"\\x00\\x1f\\x7f"'),
    ("é→😀", '"é→😀"'),
    ("\u00a0\u00ad\u2028\ufeff", '"\\u00a0\\u00ad\\u2028\\ufeff"'),
    ("\ue000", '"\\ue000"'),
    ("\U000e0001", '"\\U000e0001"'),
    ("\U0010ffff", '"\\U0010ffff"'),
    ("a\udcffb", '"a\\xffb"'),  # a byte that was not UTF-8 (surrogateescape)
    ("\ud800", '"\\xed\\xa0\\x80"'),
]


@pytest.mark.parametrize(("text", "quoted"), GO_QUOTES)
def test_go_quote_is_strconv_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


@given(st.text())
def test_go_quote_round_trips_printable_text(text: str) -> None:
    quoted = go_quote(text)
    assert quoted[0] == quoted[-1] == '"'
    assert all(c.isprintable() for c in quoted)
    # Go's escapes are a subset of Python's string-literal escapes (\xNN aside, same meaning)
    assert eval(quoted) == text


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=20,
    )
)
def test_valid_documents_decode_as_json_module_does(value: object) -> None:
    text = json.dumps(value)
    assert first_error(text.encode(), MAX_DEPTH) is None
    assert to_plain(loads_pairs(text)) == json.loads(text)
