"""The Kubernetes Node API test double, driven by the real ``kubernetes`` client."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.watch import Watch

from tests.fakes.kube_api import FLANNEL_AGENT, MERGE_PATCH, STRATEGIC_MERGE, FakeKubeApi

ANN = "flannel.alpha.coreos.com/"


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        yield fake


@pytest.fixture
def core(api: FakeKubeApi) -> Iterator[kubernetes.client.CoreV1Api]:
    client = kubernetes.client.ApiClient(kubernetes.client.Configuration(host=api.url))
    yield kubernetes.client.CoreV1Api(client)
    client.close()


def test_list_reports_nodes_and_the_current_resource_version(api, core):
    api.add_node("n2", pod_cidr="10.244.2.0/24")
    api.add_node("n1", pod_cidr="10.244.1.0/24", annotations={"a": "b"})
    listing = core.list_node()
    assert [n.metadata.name for n in listing.items] == ["n1", "n2"]
    assert listing.metadata.resource_version == str(api.resource_version)
    assert listing.items[0].spec.pod_cidr == "10.244.1.0/24"
    assert listing.items[0].metadata.annotations == {"a": "b"}


def test_resource_versions_increase_with_every_write(api, core):
    first = int(api.add_node("n1")["metadata"]["resourceVersion"])
    api.annotate("n1", {"x": "1"})
    second = int(core.read_node("n1").metadata.resource_version)
    api.add_node("n2")
    assert first < second < int(core.list_node().metadata.resource_version)


def test_unknown_node_and_pod_are_404_status_objects(api, core):
    with pytest.raises(ApiException) as err:
        core.read_node("nope")
    assert err.value.status == 404
    status = json.loads(err.value.body)
    assert (status["kind"], status["reason"]) == ("Status", "NotFound")
    assert status["message"] == 'nodes "nope" not found'
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("p", "kube-flannel")
    assert json.loads(err.value.body)["message"] == 'pods "p" not found'


def test_pod_read_gives_the_node_name(api, core):
    api.add_pod("kube-flannel", "kube-flannel-ds-abcde", "worker-1")
    pod = core.read_namespaced_pod("kube-flannel-ds-abcde", "kube-flannel")
    assert pod.spec.node_name == "worker-1"
    assert api.requests("GET", "/api/v1/namespaces/kube-flannel/pods/kube-flannel-ds-abcde")


def _collect(core: Any, count: int, **kwargs: Any) -> list[dict[str, Any]]:
    events = []
    watch = Watch()
    for event in watch.stream(core.list_node, timeout_seconds=10, **kwargs):
        events.append(event)
        if len(events) == count:
            watch.stop()
    return events


def test_watch_streams_changes_after_the_resource_version(api, core):
    api.add_node("old")
    since = str(api.resource_version)
    result: list[dict[str, Any]] = []
    watcher = threading.Thread(
        target=lambda: result.extend(_collect(core, 3, resource_version=since))
    )
    watcher.start()
    api.wait_for_watches(1)
    api.add_node("n1")
    api.annotate("n1", {ANN + "public-ip": "192.0.2.1"})
    api.delete_node("n1")
    watcher.join(timeout=20)
    assert [(e["type"], e["object"].metadata.name) for e in result] == [
        ("ADDED", "n1"),
        ("MODIFIED", "n1"),
        ("DELETED", "n1"),
    ]
    assert result[1]["raw_object"]["metadata"]["annotations"] == {ANN + "public-ip": "192.0.2.1"}
    versions = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in result]
    assert versions == sorted(versions) and versions[0] > int(since)


def test_watch_without_a_resource_version_starts_with_every_node(api, core):
    api.add_node("a")
    api.add_node("b")
    events = _collect(core, 2)
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]


def test_watch_replays_history_kept_since_the_resource_version(api, core):
    since = str(api.resource_version)
    api.add_node("a")
    api.delete_node("a")
    events = _collect(core, 2, resource_version=since)
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]


def test_watch_from_a_compacted_resource_version_is_410_gone(api, core):
    api.add_node("a")
    since = str(api.resource_version)
    api.annotate("a", {"x": "y"})
    api.compact()
    with pytest.raises(ApiException) as err:
        _collect(core, 1, resource_version=since)
    assert err.value.status == 410
    assert "too old resource version" in err.value.reason
    # The raw stream is a 200 with one ERROR event carrying the Status, as the real server sends.
    response = core.list_node(watch=True, resource_version=since, _preload_content=False)
    lines = response.data.decode().splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    # Watching from the list's resourceVersion works again.
    fresh = core.list_node().metadata.resource_version
    api.add_node("b")
    assert [e["object"].metadata.name for e in _collect(core, 1, resource_version=fresh)] == ["b"]


def test_410_can_be_an_http_status_instead(core, api):
    api.gone_as_http_status = True
    since = str(api.resource_version)
    api.add_node("a")
    api.compact()
    with pytest.raises(ApiException) as err:
        core.list_node(watch=True, resource_version=since, _preload_content=False)
    assert err.value.status == 410
    assert json.loads(err.value.body)["reason"] == "Expired"


def test_watch_timeout_seconds_ends_the_stream(api, core):
    # An idle watch with a 1 s timeout finishes by itself (with no events).
    assert list(Watch().stream(core.list_node, resource_version="1000", timeout_seconds=1)) == []


def test_strategic_merge_patch_of_node_status(api, core):
    api.add_node(
        "n1",
        pod_cidr="10.244.1.0/24",
        annotations={ANN + "keep": "k", ANN + "drop": "d", ANN + "change": "old"},
    )
    api.update_node(
        "n1",
        lambda n: n["status"].update(
            conditions=[
                {"type": "Ready", "status": "True"},
                {"type": "NetworkUnavailable", "status": "True", "reason": "NoRouteCreated"},
            ]
        ),
    )
    before = api.resource_version
    body = {
        "metadata": {"annotations": {ANN + "drop": None, ANN + "change": "new", ANN + "add": "a"}},
        "status": {"conditions": [{"type": "NetworkUnavailable", "status": "False"}]},
        "spec": {"podCIDR": "10.9.9.0/24"},
    }
    core.patch_node_status("n1", body)
    node = api.node("n1")
    assert node is not None
    assert node["metadata"]["annotations"] == {
        ANN + "keep": "k",
        ANN + "change": "new",
        ANN + "add": "a",
    }
    assert node["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "NetworkUnavailable", "status": "False", "reason": "NoRouteCreated"},
    ]
    assert node["spec"]["podCIDR"] == "10.244.1.0/24"  # the status subresource keeps the spec
    assert int(node["metadata"]["resourceVersion"]) == before + 1
    (request,) = api.requests("PATCH", "/api/v1/nodes/n1/status")
    assert request.content_type == STRATEGIC_MERGE
    assert request.json() == body


def test_patch_that_changes_nothing_writes_nothing(api, core):
    api.add_node("n1", annotations={"a": "b"})
    before = api.resource_version
    core.patch_node_status("n1", {"metadata": {"annotations": {"a": "b"}}})
    assert api.resource_version == before


def test_patch_creates_a_missing_annotations_map(api, core):
    api.add_node("n1")
    core.patch_node_status("n1", {"metadata": {"annotations": {"a": "b"}}})
    node = api.node("n1")
    assert node is not None and node["metadata"]["annotations"] == {"a": "b"}


def test_json_merge_patch_replaces_lists(api, core):
    api.add_node("n1")
    api.update_node("n1", lambda n: n["status"].update(conditions=[{"type": "Ready"}]))
    core.patch_node_status(
        "n1",
        {"status": {"conditions": [{"type": "NetworkUnavailable", "status": "False"}]}},
        _content_type=MERGE_PATCH,
    )
    node = api.node("n1")
    assert node is not None
    assert node["status"]["conditions"] == [{"type": "NetworkUnavailable", "status": "False"}]
    assert api.requests("PATCH")[0].content_type == MERGE_PATCH


def test_patch_of_the_main_resource_keeps_status(api, core):
    api.add_node("n1", pod_cidr="10.244.1.0/24")
    core.patch_node(
        "n1",
        {"spec": {"unschedulable": True}, "status": {"conditions": [{"type": "X"}]}},
    )
    node = api.node("n1")
    assert node is not None
    assert node["spec"]["unschedulable"] is True
    assert node["status"]["conditions"] == []


def test_patch_unknown_node_and_invalid_annotation_key(api, core):
    with pytest.raises(ApiException) as err:
        core.patch_node_status("ghost", {"metadata": {"annotations": {"a": "b"}}})
    assert err.value.status == 404
    api.add_node("n1")
    with pytest.raises(ApiException) as err:
        core.patch_node_status("n1", {"metadata": {"annotations": {"Org.com/x": "b"}}})
    assert err.value.status == 422


def test_injected_failures_are_answered_then_cleared(api, core):
    api.add_node("n1")
    api.fail_next("GET", "/api/v1/nodes/n1", 503)
    with pytest.raises(ApiException) as err:
        core.read_node("n1")
    assert err.value.status == 503
    assert core.read_node("n1").metadata.name == "n1"


METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


def test_a_list_in_pages_is_one_snapshot(api, core):
    for name in ("a", "b", "c"):
        api.add_node(name, pod_cidr="10.244.1.0/24")
    first = core.list_node(limit=2)
    assert [n.metadata.name for n in first.items] == ["a", "b"]
    assert first.metadata.remaining_item_count == 1 and first.metadata._continue
    api.delete_node("c")  # after the first page: the snapshot still has it
    api.add_node("d")
    rest = core.list_node(limit=2, _continue=first.metadata._continue)
    assert [n.metadata.name for n in rest.items] == ["c"]
    assert rest.metadata._continue is None
    assert rest.metadata.resource_version == first.metadata.resource_version
    # a snapshot older than the history kept is gone
    again = core.list_node(limit=1)
    api.compact()
    with pytest.raises(ApiException) as err:
        core.list_node(limit=1, _continue=again.metadata._continue)
    assert err.value.status == 410


def test_metadata_only_answers_are_negotiated_from_the_accept_header(api, core):
    api.add_node("a", pod_cidr="10.244.1.0/24", annotations={ANN + "public-ip": "192.0.2.1"})
    listing = json.loads(
        core.list_node(_headers={"Accept": METADATA_LIST}, _preload_content=False).data
    )
    assert (listing["kind"], listing["apiVersion"]) == (
        "PartialObjectMetadataList",
        "meta.k8s.io/v1",
    )
    (item,) = listing["items"]
    assert (
        set(item) == {"kind", "apiVersion", "metadata"} and item["kind"] == "PartialObjectMetadata"
    )
    assert item["metadata"]["annotations"] == {ANN + "public-ip": "192.0.2.1"}
    one = json.loads(
        core.read_node("a", _headers={"Accept": METADATA}, _preload_content=False).data
    )
    assert one == {**item}
    # the first servable clause wins: a list cannot answer as a single object's kind
    whole = core.list_node(
        _headers={"Accept": f"{METADATA},application/json"}, _preload_content=False
    )
    assert json.loads(whole.data)["kind"] == "NodeList"
    with pytest.raises(ApiException) as err:
        core.list_node(_headers={"Accept": METADATA})
    assert err.value.status == 406
    assert json.loads(err.value.body)["reason"] == "NotAcceptable"
    assert api.requests("GET", "/api/v1/nodes")[0].accept == METADATA_LIST


def test_a_metadata_watch_sends_objects_without_spec_or_status(api, core):
    api.add_node("a", pod_cidr="10.244.1.0/24")
    since = str(api.resource_version)
    response = core.list_node(
        watch=True,
        resource_version=since,
        timeout_seconds=1,
        _headers={"Accept": METADATA},
        _preload_content=False,
    )
    api.update_node("a", lambda n: n["status"].update(conditions=[{"type": "Ready"}]))
    (line,) = response.data.decode().splitlines()
    event = json.loads(line)
    assert event["type"] == "MODIFIED"
    assert set(event["object"]) == {"kind", "apiVersion", "metadata"}
    assert int(event["object"]["metadata"]["resourceVersion"]) > int(since)
    assert api.bytes_sent("watch") >= len(line)


# --- faults and authorization ---------------------------------------------------------------


def test_a_cut_event_is_half_a_line_then_the_connection_goes(api, core):
    since = str(api.resource_version)
    api.cut_next_event()
    api.add_node("a")
    response = core.list_node(watch=True, resource_version=since, _preload_content=False)
    raw = b""
    with pytest.raises(urllib3.exceptions.ProtocolError):
        for segment in response.stream(amt=None, decode_content=False):
            raw += segment
    assert raw and b"\n" not in raw and raw.startswith(b'{"type":"ADDED"')
    # The next stream from the same resourceVersion has the whole event.
    events = _collect(core, 1, resource_version=since)
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "a")]


@pytest.mark.parametrize(
    ("first", "code", "reason"), [(10, 504, "Timeout"), (5000, 410, "Expired")]
)
def test_a_restart_on_another_history(first: int, code: int, reason: str) -> None:
    with FakeKubeApi(too_large_wait=0.1) as api:
        client = kubernetes.client.ApiClient(kubernetes.client.Configuration(host=api.url))
        core = kubernetes.client.CoreV1Api(client)
        api.add_node("a")
        old = str(api.resource_version)
        api.restart(first_resource_version=first)
        assert int(core.read_node("a").metadata.resource_version) == first + 1
        response = core.list_node(watch=True, resource_version=old, _preload_content=False)
        (line,) = response.data.decode().splitlines()
        status = json.loads(line)["object"]
        assert (status["code"], status["reason"]) == (code, reason)
        if code == 504:
            assert status["message"] == f"Too large resource version: {old}, current: {first + 1}"
            assert status["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
        # The new history's own resourceVersions work.
        fresh = core.list_node().metadata.resource_version
        api.add_node("b")
        assert [e["object"].metadata.name for e in _collect(core, 1, resource_version=fresh)] == [
            "b"
        ]
        client.close()


def test_tokens_get_what_their_rules_allow(api):
    api.tokens = {"agent": FLANNEL_AGENT}
    api.add_node("n1")

    def client(token: str | None) -> kubernetes.client.CoreV1Api:
        config = kubernetes.client.Configuration(host=api.url)
        if token is not None:
            config.api_key = {"authorization": token}
            config.api_key_prefix = {"authorization": "Bearer"}
        return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(config))

    agent = client("agent")
    assert [n.metadata.name for n in agent.list_node().items] == ["n1"]
    assert agent.read_node("n1").metadata.name == "n1"
    since = str(api.resource_version - 1)
    assert list(Watch().stream(agent.list_node, resource_version=since, timeout_seconds=1))
    agent.patch_node_status("n1", {"metadata": {"annotations": {ANN + "public-ip": "192.0.2.1"}}})

    user = FLANNEL_AGENT.user
    refused = {
        "patch the node": (
            lambda: agent.patch_node("n1", {"metadata": {"labels": {"x": "y"}}}),
            f'nodes "n1" is forbidden: User "{user}" cannot patch resource "nodes" in API '
            'group "" at the cluster scope',
        ),
        "read a pod": (
            lambda: agent.read_namespaced_pod("p", "kube-flannel"),
            f'pods "p" is forbidden: User "{user}" cannot get resource "pods" in API group "" '
            "at the cluster scope",
        ),
        "delete the node": (
            lambda: agent.delete_node("n1"),
            f'nodes "n1" is forbidden: User "{user}" cannot delete resource "nodes" in API '
            'group "" at the cluster scope',
        ),
    }
    for what, (call, message) in refused.items():
        with pytest.raises(ApiException) as err:
            call()
        assert err.value.status == 403, what
        assert json.loads(err.value.body)["message"] == message, what
    for token in (None, "stolen"):
        with pytest.raises(ApiException) as err:
            client(token).list_node()
        assert err.value.status == 401
        assert json.loads(err.value.body)["reason"] == "Unauthorized"


def test_wait_delivered_waits_for_every_open_watch_to_write_the_event(api, core):
    api.add_node("n1")
    api.wait_delivered(api.resource_version)  # no watch open: nothing to wait for
    result: list[dict[str, Any]] = []
    since = str(api.resource_version)
    watcher = threading.Thread(
        target=lambda: result.extend(_collect(core, 3, resource_version=since))
    )
    watcher.start()
    api.wait_for_watches(1)
    for address in ("192.0.2.1", "192.0.2.2"):
        node = api.annotate("n1", {ANN + "public-ip": address})
        api.wait_delivered(int(node["metadata"]["resourceVersion"]))
    with pytest.raises(TimeoutError):  # a version not written yet, the stream still open
        api.wait_delivered(api.resource_version + 1, timeout=0.3)
    api.delete_node("n1")
    watcher.join(timeout=20)
    assert [e["type"] for e in result] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert [e["raw_object"]["metadata"]["annotations"] for e in result[:2]] == [
        {ANN + "public-ip": "192.0.2.1"},
        {ANN + "public-ip": "192.0.2.2"},
    ]
