"""CNI GC through the flannel plugin, against Debian's bridge and host-local (no netns needed:
GC runs DEL without one, which releases the IPAM side), plus the pure planning rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyflannel_runtime.cni.gc import narrowest_ranges, plan_gc, valid_container_ids
from pyflannel_runtime.cni.hostlocal_store import Allocation
from pyflannel_runtime.cni.plugin_config import NetConfError
from tests.unit.cni_site import PLUGINS, CniSite, install_fake_delegate

CI = settings(deadline=None, suppress_health_check=list(HealthCheck), max_examples=200)

pytestmark = pytest.mark.skipif(
    not (PLUGINS / "host-local").exists(), reason="containernetworking-plugins missing"
)


@pytest.fixture
def node(tmp_path: Path) -> CniSite:
    return CniSite(tmp_path)


def test_gc_releases_every_invalid_attachment_and_nothing_valid(node: CniSite) -> None:
    for cid in ("live1", "live2", "gone1", "gone2"):
        node.attach(cid)
    node.attach("lostconf", saved=False)  # its DEL never came and its config is gone
    node.attach("livenoconf", saved=False)  # valid: untouched although nothing backs it
    kept = {a: h for a, h in node.allocated().items() if h[0] in ("live1", "live2", "livenoconf")}
    kept_files = {cid: (node.state / cid).read_bytes() for cid in ("live1", "live2")}
    assert len(node.allocated()) == 12  # dual stack: two addresses each

    status, stdout, stderr = node.gc(["live1", "live2", "livenoconf"])
    assert (status, stdout) == (0, b""), stderr
    assert node.allocated() == kept
    assert node.saved() == ["live1", "live2"]
    assert {cid: (node.state / cid).read_bytes() for cid in kept_files} == kept_files
    log = stderr.decode()
    assert log.count("GC released") == 3
    assert "gone1" in log and "gone2" in log and "lostconf (eth0" in log

    # a second GC is a no-op
    assert node.gc(["live1", "live2", "livenoconf"]) == (0, b"", b"")
    assert node.allocated() == kept


def test_gc_releases_legacy_files_and_other_interfaces(node: CniSite) -> None:
    node.attach("multi")
    node.attach("multi", saved=False, ifname="net1")
    node.store.joinpath("10.5.3.200").write_text("legacy")  # written before ifnames
    assert node.holders() == {"multi", "legacy"}
    status, _, stderr = node.gc([])
    assert status == 0, stderr
    assert node.allocated() == {}
    assert node.saved() == []


def test_gc_without_the_list_releases_nothing(node: CniSite) -> None:
    node.attach("c1")
    status, stdout, stderr = node.gc(None)
    assert (status, stdout) == (0, b"")
    assert b"nothing is released" in stderr
    assert node.holders() == {"c1"} and node.saved() == ["c1"]


def test_gc_reads_the_attachments_alias_libcni_sends(node: CniSite) -> None:
    node.attach("c1")
    node.attach("c2")
    attachments = [{"containerID": "c1", "ifname": "eth0"}]
    assert node.gc(None, **{"cni.dev/attachments": attachments})[0] == 0
    assert node.holders() == {"c1"}


def test_one_failure_does_not_stop_the_others(node: CniSite) -> None:
    node.attach("good")
    node.attach("broken")
    node.attach("orphan", saved=False)
    # a saved config naming a delegate that is not installed
    (node.state / "broken").write_bytes(node.delegate(type="nosuchplugin"))
    status, stdout, stderr = node.gc([])
    error = json.loads(stdout)
    assert status == 1
    assert error["code"] == 999
    assert error["msg"].startswith("GC of network gcnet: 1 failed: container broken")
    assert 'failed to find plugin \\"nosuchplugin\\"' in json.dumps(error["msg"])
    # its saved config is gone, as after flannel's DEL, and the second pass freed its address
    assert node.allocated() == {}
    assert node.saved() == []
    assert stderr.decode().count("GC released") == 3


def test_a_saved_config_del_cannot_parse_is_dropped_and_reported(node: CniSite) -> None:
    node.attach("garbled")
    (node.state / "garbled").write_bytes(b'{"type": ')
    status, stdout, _ = node.gc([])
    assert status == 1
    assert "saved config dropped: failed to parse netconf" in json.loads(stdout)["msg"]
    assert node.saved() == [] and node.allocated() == {}


def test_gc_is_forwarded_to_a_delegate_that_speaks_1_1_0(node: CniSite) -> None:
    install_fake_delegate(node.bin, "fakebr")
    for versions in ('"1.0.0"', '"1.0.0","1.1.0"'):
        assert node.gc(["c1"], {"FAKE_VERSIONS": versions}, delegate={"type": "fakebr"})[0] == 0
        assert (node.log / "GC.stdin").exists() == ("1.1.0" in versions)
    forwarded = json.loads((node.log / "GC.stdin").read_bytes())
    assert forwarded["cniVersion"] == "1.1.0"
    assert forwarded["type"] == "fakebr"
    assert forwarded["cni.dev/valid-attachments"] == [{"containerID": "c1", "ifname": "eth0"}]
    assert forwarded["ipam"]["ranges"] == [
        [{"subnet": "10.5.3.0/24"}],
        [{"subnet": "fd05:0:3::/64"}],
    ]


@pytest.mark.parametrize(
    "attachments",
    [{"containerID": "x"}, [1], [{"containerID": 5}], [{"ContainerID": ["x"]}]],
)
def test_malformed_attachments_are_refused(attachments: object) -> None:
    conf = json.dumps({"name": "n", "cni.dev/valid-attachments": attachments}).encode()
    with pytest.raises(NetConfError, match="cannot unmarshal"):
        valid_container_ids(conf)


def test_attachment_fields_match_as_go_does() -> None:
    conf = {"name": "n", "CNI.dev/Valid-Attachments": [{"CONTAINERID": "a"}, {"ifname": "e"}]}
    given = valid_container_ids(json.dumps(conf).encode())
    assert given is not None and given[0] == {"a"}


def test_narrowest_ranges_are_ranges_host_local_takes() -> None:
    assert narrowest_ranges(["10.5.3.7", "fd05:0:3::9", "10.5.3.2"]) == [
        [{"subnet": "10.5.3.4/30"}],
        [{"subnet": "fd05:0:3::8/126"}],
    ]


# --- planning, as properties ---------------------------------------------------------------------

ids = st.sampled_from(["a", "b", "c", "d", "e"])


@st.composite
def node_states(draw: st.DrawFn) -> tuple[set[str], set[str], list[Allocation]]:
    valid = draw(st.sets(ids))
    saved = draw(st.sets(ids))
    holders = draw(st.lists(st.tuples(ids, st.sampled_from(["", "eth0", "net1"])), max_size=12))
    allocations = [Allocation(f"10.0.0.{i + 2}", 4, c, f) for i, (c, f) in enumerate(holders)]
    return valid, saved, allocations


@CI
@given(node_states())
def test_plan_touches_only_invalid_containers_and_covers_all(
    state: tuple[set[str], set[str], list[Allocation]],
) -> None:
    valid, saved, allocations = state
    plan = plan_gc(valid, sorted(saved), allocations)
    assert not {r.container_id for r in plan} & valid
    assert sorted(r.container_id for r in plan if r.replay) == sorted(saved - valid)
    planned = [a for r in plan for a in r.addresses]
    assert len(planned) == len(set(planned))
    invalid = {a.address for a in allocations if a.container_id not in valid}
    assert set(planned) == invalid
    assert all(r.ifname for r in plan if r.replay)

    # after releasing it all, a second plan is empty
    released = set(planned)
    left = [a for a in allocations if a.address not in released]
    assert plan_gc(valid, sorted(saved & valid), left) == []
