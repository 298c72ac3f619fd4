"""A cluster model file's text as plain data: YAML or JSON, within the gojson core's limits.

JSON goes through the gojson core. YAML is composed with PyYAML's safe loader, held to the
same nesting limit while it is composed (PyYAML recurses once per level), and refused when
its aliases would expand it beyond what an alias-free file within the size limit can hold:
a few hundred bytes of nested aliases otherwise become millions of values (an "alias bomb").
Ordinary anchors and merge keys stay usable.
"""

from __future__ import annotations

from typing import Any

import yaml

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.gojson.core import MAX_DEPTH, MAX_DOCUMENT_BYTES, GoJSONError
from pyflannel_runtime.gojson.structs import loads_pairs, to_plain

# Every YAML node takes at least two bytes of text ("1," or "- "), so this many nodes is more
# than an alias-free file of MAX_DOCUMENT_BYTES holds.
MAX_EXPANDED_NODES = MAX_DOCUMENT_BYTES // 2


class ModelFileError(PyflannelError, ValueError):
    """The text is not a well-formed, bounded YAML or JSON document; ``str()`` says why."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    return []


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a node graph whose aliases expand past MAX_EXPANDED_NODES or MAX_DEPTH.

    Sizes and depths are computed once per node, bottom-up, with an explicit stack: the graph
    an alias bomb builds is small, only its expansion is huge, and a chain of aliases can be
    deeper than Python's recursion limit.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            children = _children(node)
            size[key] = 1 + sum(size[id(child)] for child in children)
            depth[key] = 1 + max((depth[id(child)] for child in children), default=0)
            open_nodes.discard(key)
            if size[key] > MAX_EXPANDED_NODES:
                raise ModelFileError(
                    f"its aliases expand to more than {MAX_EXPANDED_NODES} values "
                    f"(line {node.start_mark.line + 1})"
                )
            if depth[key] > MAX_DEPTH + 1:  # + 1: scalars are nodes too
                raise ModelFileError(
                    f"its aliases nest deeper than {MAX_DEPTH} levels "
                    f"(line {node.start_mark.line + 1})"
                )
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise ModelFileError(f"an alias refers to itself (line {node.start_mark.line + 1})")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in size)


class _BoundedLoader(yaml.SafeLoader):  # type: ignore[misc]
    """PyYAML's safe loader, with the nesting and alias limits above."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def _nested(self, compose: Any, anchor: Any) -> Any:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise ModelFileError(f"it nests deeper than {MAX_DEPTH} levels (line {mark.line + 1})")
        try:
            return compose(anchor)
        finally:
            self._depth -= 1

    def compose_sequence_node(self, anchor: Any) -> Any:
        return self._nested(super().compose_sequence_node, anchor)

    def compose_mapping_node(self, anchor: Any) -> Any:
        return self._nested(super().compose_mapping_node, anchor)

    def compose_document(self) -> Any:
        node = super().compose_document()
        _check_expansion(node)
        return node


def _json_position(text: str, offset: int) -> str:
    before = text.encode("utf-8", "surrogatepass")[:offset].decode("utf-8", "replace")
    line = before.count("\n") + 1
    return f"line {line}, column {len(before) - before.rfind(chr(10))}"


def parse_model_text(text: str, *, is_json: bool) -> Any:
    """The plain data (dicts, lists, scalars) of a model file; raises ModelFileError."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_DOCUMENT_BYTES:
        raise ModelFileError(f"larger than {MAX_DOCUMENT_BYTES} bytes")
    if is_json:
        try:
            return to_plain(loads_pairs(text))
        except GoJSONError as err:
            where = "" if err.offset is None else f" ({_json_position(text, err.offset)})"
            raise ModelFileError(f"{err}{where}") from None
    try:
        return yaml.load(text, Loader=_BoundedLoader)
    except ModelFileError:
        raise
    except (yaml.YAMLError, ValueError, OverflowError) as err:
        # ValueError: values the safe constructor cannot build, e.g. the date 2001-13-45
        raise ModelFileError(str(err)) from None
