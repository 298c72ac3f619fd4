"""The Kubernetes API's answers decoded into what the agent reads (subnet/kube/decode.py), and
read within their size limits (subnet/kube/client.py): no API server, real JSON."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.subnet.kube import kube
from pyflannel_runtime.subnet.kube.annotations import Annotations
from pyflannel_runtime.subnet.kube.client import ResponseTooLarge, lines, read_limited
from pyflannel_runtime.subnet.kube.decode import DecodedNode, DecodeError, NodeDecoder
from pyflannel_runtime.subnet.kube.nodes import NodeLeaseTracker, UnreadableNode

KEYS = Annotations.for_prefix()
DECODER = NodeDecoder(KEYS)
P = "flannel.alpha.coreos.com/"
DEEP = 100_000  # far past any recursion limit


def real_node(name: str = "n1", n: int = 1, **changes: Any) -> dict[str, Any]:
    """A Node with the fields a real one has around what the agent reads (bench/realistic_node.py
    has the whole of one)."""
    at = "2026-01-01T00:00:00Z"
    annotations = {
        P + "backend-data": '{"VNI":1,"VtepMAC":"0e:00:00:00:00:01"}',
        P + "backend-type": "vxlan",
        P + "kube-subnet-manager": "true",
        P + "public-ip": f"192.0.2.{n}",
        "node.alpha.kubernetes.io/ttl": "0",
    }
    metadata = {
        "name": name,
        "uid": f"00000000-0000-0000-0000-{n + 1:012d}",
        "resourceVersion": str(100 + n),
        "creationTimestamp": at,
        "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        "annotations": annotations,
        "managedFields": [
            {"manager": "kubelet", "time": at, "fieldsV1": {"f:status": {"f:images": {}}}}
        ],
    }
    metadata.update(changes)
    status = {
        "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": at}],
        "addresses": [{"type": "InternalIP", "address": f"192.0.2.{n}"}],
        "images": [{"names": [f"registry.k8s.io/pause:3.{n}"], "sizeBytes": 320_000}],
    }
    cidr = f"10.244.{n}.0/24"
    spec = {"podCIDR": cidr, "podCIDRs": [cidr], "providerID": f"aws:///i-{n}"}
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


def page(*items: Any, resource_version: str = "900", token: str = "") -> bytes:
    metadata = {"resourceVersion": resource_version, **({"continue": token} if token else {})}
    body = {"kind": "NodeList", "apiVersion": "v1", "metadata": metadata, "items": list(items)}
    return json.dumps(body).encode()


def test_a_realistic_node_is_read_as_its_few_fields() -> None:
    node = DECODER.node(json.dumps(real_node()).encode())
    assert node.name == "n1"
    assert node.uid == "00000000-0000-0000-0000-000000000002"
    assert node.resource_version == "101"
    assert node.cidrs == ("10.244.1.0/24", "10.244.1.0/24")
    assert DECODER.slim(node, node.cidrs) == {
        "metadata": {
            "name": "n1",
            "annotations": {
                P + "kube-subnet-manager": "true",
                P + "backend-data": '{"VNI":1,"VtepMAC":"0e:00:00:00:00:01"}',
                P + "backend-type": "vxlan",
                P + "public-ip": "192.0.2.1",
            },
        },
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]},
    }


def test_only_the_configured_prefix_is_read() -> None:
    other = NodeDecoder(Annotations.for_prefix("example.com/net"))
    data = real_node(annotations={P + "public-ip": "192.0.2.1", "example.com/net-public-ip": "x"})
    node = other.node(json.dumps(data).encode())
    slim = other.slim(node, ("",))
    assert slim["metadata"]["annotations"] == {"example.com/net-public-ip": "x"}
    assert slim["spec"] == {}


def test_metadata_only_answers_have_no_cidrs() -> None:
    partial = {"kind": "PartialObjectMetadata", "metadata": real_node()["metadata"]}
    event = DECODER.event(json.dumps({"type": "MODIFIED", "object": partial}).encode())
    assert event.type == "MODIFIED" and event.resource_version == "101"
    assert event.node is not None and event.node.cidrs is None


def test_watch_errors_and_bookmarks() -> None:
    status = {"kind": "Status", "metadata": {}, "status": "Failure", "message": "too old"}
    error = DECODER.event(
        json.dumps(
            {"type": "ERROR", "object": {**status, "code": 410, "reason": "Expired"}}
        ).encode()
    )
    assert (error.node, error.error) == (None, "410 Expired: too old")
    mark = {"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "7"}}}
    bookmark = DECODER.event(json.dumps(mark).encode())
    assert (bookmark.node, bookmark.resource_version) == (None, "7")
    with pytest.raises(DecodeError, match="without a resourceVersion"):
        DECODER.event(b'{"type":"MODIFIED","object":{"metadata":{"name":"n1"}}}')


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{not json",
        b'{"type":"MODIFIED","object":{"metadata":{"name":"n1","resourceVersion":"1"}}',
        b"[]",
        b'{"object":{}}',
        b'{"type":"MODIFIED","object":{"metadata":{"name":5,"resourceVersion":"1"}}}',
        b'{"type":"ADDED","object":{"metadata":{"resourceVersion":"1"},"spec":{"podCIDRs":"x"}}}',
    ],
)
def test_a_watch_line_that_is_not_an_event_is_a_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        DECODER.event(data)


@pytest.mark.parametrize("where", ["skipped", "named"])
def test_deep_nesting_is_refused_without_a_crash(where: str) -> None:
    """msgspec counts skipped levels too: a 200 KB bomb in a field nobody reads is refused."""
    if where == "skipped":
        bomb = "[" * DEEP + "]" * DEEP
        text = '{"metadata":{"name":"n1","resourceVersion":"1"},"status":' + bomb + "}"
    else:  # objects inside the annotations, which are read
        bomb = '{"x":' * DEEP + "1" + "}" * DEEP
        text = '{"metadata":{"name":"n1","resourceVersion":"1","annotations":' + bomb + "}}"
    with pytest.raises(DecodeError, match="nested too deep"):
        DECODER.node(text.encode())
    with pytest.raises(DecodeError, match="nested too deep"):
        DECODER.event(('{"type":"ADDED","object":' + text + "}").encode())
    with pytest.raises(DecodeError, match="nested too deep"):
        DECODER.page(('{"metadata":{"resourceVersion":"1"},"items":[' + text + "]}").encode())


def test_a_node_with_a_field_of_the_wrong_type_costs_only_itself() -> None:
    wrong_value = real_node("a", 1, annotations={P + "public-ip": 7})
    wrong_name = real_node("b", 2)
    wrong_name["metadata"]["name"] = ["b"]
    no_metadata = {"kind": "Node", "spec": {}}
    good = real_node("c", 3)
    decoded = DECODER.page(page(wrong_value, wrong_name, no_metadata, good, token="next"))
    assert (decoded.resource_version, decoded.continue_token) == ("900", "next")
    first, second, third, fourth = decoded.nodes
    assert isinstance(first, UnreadableNode) and first.name == "a"
    assert "Expected `str | null`, got `int`" in first.reason
    assert isinstance(second, UnreadableNode) and second.name == ""
    assert third == UnreadableNode("", "a Node without metadata")
    assert isinstance(fourth, DecodedNode) and fourth.name == "c"


def test_an_unreadable_node_keeps_its_last_good_lease(caplog: pytest.LogCaptureFixture) -> None:
    tracker = NodeLeaseTracker(KEYS, enable_ipv4=True, enable_ipv6=False)
    good = DECODER.node(json.dumps(real_node()).encode())
    (added,) = tracker.update("n1", DECODER.slim(good, good.cidrs or ("",)))
    with caplog.at_level(logging.WARNING):
        assert tracker.update("n1", UnreadableNode("n1", "bad")) == []
        assert tracker.reset([UnreadableNode("n1", "bad")]) == (added.lease,)
    assert 'Error reading node "n1": bad' in caplog.text


@pytest.mark.parametrize(
    "data",
    [b"{}", b'{"metadata":{}}', b'{"items":[]}', b'{"metadata":{"resourceVersion":""}}'],
)
def test_a_page_without_a_resource_version_is_a_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError, match="without a resourceVersion"):
        DECODER.page(data)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)
PLACES = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "uid"),
    ("metadata", "resourceVersion"),
    ("metadata", "annotations"),
    ("metadata", "annotations", P + "backend-data"),
    ("spec",),
    ("spec", "podCIDR"),
    ("spec", "podCIDRs"),
    ("status",),
    ("code",),
]


@given(value=JSON, place=st.sampled_from(PLACES))
def test_any_value_anywhere_is_read_or_refused(value: Any, place: tuple[str, ...]) -> None:
    node = real_node()
    target = node
    for key in place[:-1]:
        target = target[key]
    target[place[-1]] = value
    data = json.dumps(node).encode()
    with contextlib.suppress(DecodeError):
        DECODER.node(data)
    for item in DECODER.page(page(node, real_node("b", 2))).nodes:
        assert isinstance(item, DecodedNode | UnreadableNode)
    with contextlib.suppress(DecodeError):
        DECODER.event(json.dumps({"type": "MODIFIED", "object": node}).encode())


# --- reading answers within their limits ----------------------------------------------------


class Streamed:
    """A response whose body arrives in the chunks given (urllib3's stream())."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    def stream(self, size: int, decode_content: bool) -> Iterator[bytes]:
        yield from self.chunks


def test_an_answer_past_its_limit_is_refused_or_cut() -> None:
    response: Any = Streamed(b"a" * 6, b"b" * 6)
    assert read_limited(response, 12) == b"a" * 6 + b"b" * 6
    with pytest.raises(ResponseTooLarge):
        read_limited(response, 11)
    assert read_limited(response, 8, truncate=True) == b"a" * 6 + b"bb"


def test_a_watch_line_past_the_limit_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    response: Any = Streamed(b"one\ntw", b"o\n" + b"x" * 9, b"x" * 9, b"x\nthree\nfo", b"ur\n")
    with caplog.at_level(logging.WARNING):
        batches = list(lines(response, limit=8))
    assert batches == [[b"one"], [b"two"], [b"three"], [b"four"]]
    assert caplog.text.count("Dropped a watch event larger than 8 bytes") == 1
    short: Any = Streamed(b"ok\n" + b"y" * 10 + b"\nok\n")
    with caplog.at_level(logging.WARNING):
        assert list(lines(short, limit=8)) == [[b"ok", b"ok"]]


# --- what the node watch keeps of each node -------------------------------------------------

cidr_lists = st.lists(st.text(max_size=8), min_size=1, max_size=3).map(tuple)
annotation_values = st.lists(st.none() | st.text(max_size=8), min_size=10, max_size=10).map(tuple)


@given(a=st.tuples(cidr_lists, annotation_values), b=st.tuples(cidr_lists, annotation_values))
def test_a_nodes_material_is_one_string_that_tells_any_change(
    a: tuple[tuple[str, ...], tuple[str | None, ...]],
    b: tuple[tuple[str, ...], tuple[str | None, ...]],
) -> None:
    assert (kube._material(*a) == kube._material(*b)) == (a == b)
    assert kube._material_cidrs(kube._material(*a)) == a[0]
