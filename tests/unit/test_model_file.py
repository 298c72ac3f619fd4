"""A cluster model file's text: YAML and JSON within the gojson core's size and nesting limits,
YAML aliases within what an alias-free file of that size could hold, and errors that say where."""

from __future__ import annotations

import pytest

from pyflannel_controller.model.model_file import (
    MAX_EXPANDED_NODES,
    ModelFileError,
    parse_model_text,
)
from pyflannel_runtime.gojson.core import MAX_DEPTH, MAX_DOCUMENT_BYTES


def error_of(text: str, *, is_json: bool = False) -> str:
    with pytest.raises(ModelFileError) as err:
        parse_model_text(text, is_json=is_json)
    return str(err.value)


def test_both_formats_give_plain_data_and_anchors_work() -> None:
    assert parse_model_text('{"a": [1, {"b": null}]}', is_json=True) == {"a": [1, {"b": None}]}
    assert parse_model_text("a: &x [1]\nb: *x\n", is_json=False) == {"a": [1], "b": [1]}
    assert parse_model_text("a: &m {x: 1}\nb: *m\n", is_json=False) == {
        "a": {"x": 1},
        "b": {"x": 1},
    }


@pytest.mark.parametrize("is_json", [True, False])
def test_the_size_limit_counts_bytes_up_to_the_limit_itself(is_json: bool) -> None:
    padding = MAX_DOCUMENT_BYTES - len('{"a":""}')
    at_limit = '{"a":"' + "x" * padding + '"}'
    assert len(at_limit.encode()) == MAX_DOCUMENT_BYTES
    assert parse_model_text(at_limit, is_json=is_json) == {"a": "x" * padding}
    over = '{"a":"' + "x" * (padding + 1) + '"}'
    assert error_of(over, is_json=is_json) == f"larger than {MAX_DOCUMENT_BYTES} bytes"
    # Two bytes a character: fewer characters than the limit, more bytes.
    assert error_of("# " + "é" * (MAX_DOCUMENT_BYTES // 2)) == (
        f"larger than {MAX_DOCUMENT_BYTES} bytes"
    )


def test_a_lone_surrogate_is_a_model_file_error_in_either_format() -> None:
    assert "unacceptable character #xd800" in error_of("a: '\ud800'")
    assert error_of('{"\ud800": x}', is_json=True).startswith(
        "invalid character 'x' looking for beginning of value (line 1, column"
    )


def test_json_errors_give_line_and_column_in_characters() -> None:
    assert error_of('{\n  "a": 1,\n  x}', is_json=True) == (
        "invalid character 'x' looking for beginning of object key string (line 3, column 3)"
    )
    assert error_of('{\n  "é": 1,\n  "b": x}', is_json=True) == (
        "invalid character 'x' looking for beginning of value (line 3, column 8)"
    )


def test_a_json_error_without_a_position_has_none_appended() -> None:
    assert error_of('{"a":1e999}', is_json=True) == (
        "json: cannot unmarshal number 1e999 into Go value of type float64"
    )


def test_yaml_errors_are_model_file_errors() -> None:
    assert error_of("when: 2001-13-45\n") == "month must be in 1..12"
    assert "expected ',' or ']'" in error_of("a: [1")


def test_yaml_nesting_may_reach_the_limit_and_not_beyond() -> None:
    deep = parse_model_text("# c\n" + "[" * MAX_DEPTH + "]" * MAX_DEPTH, is_json=False)
    for _ in range(MAX_DEPTH - 1):
        (deep,) = deep
    assert deep == []
    too_deep = "# c\n" + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    assert error_of(too_deep) == f"it nests deeper than {MAX_DEPTH} levels (line 2)"


def test_nesting_is_counted_from_each_level_left_not_from_the_top() -> None:
    """Leaving a collection returns to its parent's depth, whatever siblings came before."""
    after_siblings = "- []\n- []\n- " + "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert error_of(after_siblings) == f"it nests deeper than {MAX_DEPTH} levels (line 3)"
    after_a_nested_sibling = "[[[], " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "]]"
    assert error_of(after_a_nested_sibling) == (f"it nests deeper than {MAX_DEPTH} levels (line 1)")


def alias_bomb(values: int) -> str:
    """A sequence whose aliases expand to exactly ``values`` nodes (each scalar and collection
    is one): 2 + 73 * 7182 = 524288 with no extra scalars."""
    base = ", ".join(["0"] * 7181)  # a sequence of 7182 nodes
    aliases = ", ".join(["*a"] * 72)
    extra = values - (2 + 73 * 7182)
    return f"# c\n- &a [{base}]\n- [{aliases}]\n" + "- 0\n" * extra


def test_aliases_may_expand_to_the_limit_and_not_beyond() -> None:
    assert MAX_EXPANDED_NODES == MAX_DOCUMENT_BYTES // 2
    assert len(parse_model_text(alias_bomb(MAX_EXPANDED_NODES), is_json=False)) == 2
    assert error_of(alias_bomb(MAX_EXPANDED_NODES + 1)) == (
        f"its aliases expand to more than {MAX_EXPANDED_NODES} values (line 2)"
    )


def alias_chain(links: int) -> str:
    """a0 is [0]; each next one is a sequence holding the one before: nesting grows by one
    per line while the text itself stays two levels deep."""
    lines = ["# c", "a0: &a0 [0]", *(f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, links + 1))]
    return "\n".join(lines) + "\n"


def test_aliases_may_nest_to_the_limit_and_not_beyond() -> None:
    parsed = parse_model_text(alias_chain(62), is_json=False)
    assert parsed["a1"] == [[0]]
    # a63 itself is within the limit; the mapping holding it (line 2) is one level too deep.
    assert error_of(alias_chain(63)) == f"its aliases nest deeper than {MAX_DEPTH} levels (line 2)"
    assert error_of(alias_chain(64)) == (
        f"its aliases nest deeper than {MAX_DEPTH} levels (line {64 + 2})"
    )


def test_an_alias_inside_its_own_anchor_is_refused() -> None:
    assert error_of("# c\na: &a [*a]\n") == "an alias refers to itself (line 2)"
