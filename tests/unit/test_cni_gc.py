"""CNI GC through the flannel plugin, against Debian's bridge and host-local (no netns needed:
GC runs DEL without one, which releases the IPAM side), plus the pure planning rules."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyflannel_runtime.cni.delegate import build_delegate, encode_delegate
from pyflannel_runtime.cni.gc import narrowest_ranges, plan_gc, valid_container_ids
from pyflannel_runtime.cni.hostlocal_store import Allocation, parse_address
from pyflannel_runtime.cni.netconf import NetConfError, parse_netconf
from pyflannel_runtime.cni.plugin import run
from pyflannel_runtime.cni.state import save_config
from pyflannel_runtime.model.subnet_env import parse_cni_subnet_env

PLUGINS = Path("/usr/lib/cni")
SUBNET_ENV = (
    "FLANNEL_NETWORK=10.5.0.0/16\nFLANNEL_SUBNET=10.5.3.1/24\n"
    "FLANNEL_IPV6_NETWORK=fd05::/48\nFLANNEL_IPV6_SUBNET=fd05:0:3::1/64\n"
    "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
)
# records GC's stdin; answers VERSION with what FAKE_VERSIONS lists
FAKE_DELEGATE = """#!/bin/sh
if [ "$CNI_COMMAND" = VERSION ]; then
  printf '{"cniVersion":"1.1.0","supportedVersions":[%s]}' "$FAKE_VERSIONS"; exit 0
fi
cat > "$FAKE_LOG/$CNI_COMMAND.stdin"
"""
CI = settings(deadline=None, suppress_health_check=list(HealthCheck), max_examples=200)

pytestmark = pytest.mark.skipif(
    not (PLUGINS / "host-local").exists(), reason="containernetworking-plugins missing"
)


class Node:
    """One node's flannel network in a scratch dir, with the real plugins on its CNI path."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        for name in ("bridge", "host-local"):
            (self.bin / name).symlink_to(PLUGINS / name)
        self.state = root / "state"
        self.store = root / "ipam" / "gcnet"
        (root / "subnet.env").write_text(SUBNET_ENV)

    def conf(self, **extra: object) -> dict[str, object]:
        conf: dict[str, object] = {
            "name": "gcnet",
            "type": "flannel",
            "cniVersion": "1.1.0",
            "subnetFile": str(self.root / "subnet.env"),
            "dataDir": str(self.state),
            "ipam": {"dataDir": str(self.root / "ipam")},
        }
        conf.update(extra)
        return conf

    def delegate(self, **delegate: object) -> bytes:
        conf = self.conf(cniVersion="0.3.1", delegate=delegate or None)
        env = parse_cni_subnet_env(SUBNET_ENV, "subnet.env")
        return encode_delegate(build_delegate(parse_netconf(json.dumps(conf).encode()), env))

    def attach(self, container_id: str, saved: bool = True, ifname: str = "eth0") -> None:
        """What a flannel ADD leaves on disk: host-local's files and the saved config."""
        import subprocess

        config = self.delegate()
        env = {
            "CNI_COMMAND": "ADD",
            "CNI_CONTAINERID": container_id,
            "CNI_IFNAME": ifname,
            "CNI_NETNS": "/nonexistent",
            "CNI_PATH": str(self.bin),
        }
        done = subprocess.run(
            [str(self.bin / "host-local")], input=config, env=env, capture_output=True, check=False
        )
        assert done.returncode == 0, done.stdout
        if saved:
            save_config(str(self.state), container_id, config)

    def allocated(self) -> dict[str, tuple[str, str]]:
        """address -> (container ID, ifname)"""
        if not self.store.exists():
            return {}
        found = {}
        for path in self.store.iterdir():
            if parse_address(path.name) is not None:
                cid, _, ifname = path.read_bytes().decode().partition("\r\n")
                found[path.name] = (cid, ifname)
        return found

    def holders(self) -> set[str]:
        return {cid for cid, _ in self.allocated().values()}

    def saved(self) -> list[str]:
        return sorted(os.listdir(self.state)) if self.state.exists() else []

    def gc(
        self, valid: list[str] | None, env: dict[str, str] | None = None, **extra: object
    ) -> tuple[int, bytes, bytes]:
        conf = self.conf(**extra)
        if valid is not None:
            conf["cni.dev/valid-attachments"] = [
                {"containerID": c, "ifname": "eth0"} for c in valid
            ]
        environ = {"CNI_COMMAND": "GC", "CNI_PATH": str(self.bin), "PATH": "/usr/bin:/bin"}
        stdout, stderr = io.BytesIO(), io.BytesIO()
        status = run(environ | (env or {}), io.BytesIO(json.dumps(conf).encode()), stdout, stderr)
        return status, stdout.getvalue(), stderr.getvalue()


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_gc_releases_every_invalid_attachment_and_nothing_valid(node: Node) -> None:
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


def test_gc_releases_legacy_files_and_other_interfaces(node: Node) -> None:
    node.attach("multi")
    node.attach("multi", saved=False, ifname="net1")
    node.store.joinpath("10.5.3.200").write_text("legacy")  # written before ifnames
    assert node.holders() == {"multi", "legacy"}
    status, _, stderr = node.gc([])
    assert status == 0, stderr
    assert node.allocated() == {}
    assert node.saved() == []


def test_gc_without_the_list_releases_nothing(node: Node) -> None:
    node.attach("c1")
    status, stdout, stderr = node.gc(None)
    assert (status, stdout) == (0, b"")
    assert b"nothing is released" in stderr
    assert node.holders() == {"c1"} and node.saved() == ["c1"]


def test_gc_reads_the_attachments_alias_libcni_sends(node: Node) -> None:
    node.attach("c1")
    node.attach("c2")
    attachments = [{"containerID": "c1", "ifname": "eth0"}]
    assert node.gc(None, **{"cni.dev/attachments": attachments})[0] == 0
    assert node.holders() == {"c1"}


def test_one_failure_does_not_stop_the_others(node: Node) -> None:
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


def test_a_saved_config_del_cannot_parse_is_dropped_and_reported(node: Node) -> None:
    node.attach("garbled")
    (node.state / "garbled").write_bytes(b'{"type": ')
    status, stdout, _ = node.gc([])
    assert status == 1
    assert "saved config dropped: failed to parse netconf" in json.loads(stdout)["msg"]
    assert node.saved() == [] and node.allocated() == {}


def test_gc_is_forwarded_to_a_delegate_that_speaks_1_1_0(node: Node, tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.mkdir()
    fake = node.bin / "fakebr"
    fake.write_text(FAKE_DELEGATE)
    fake.chmod(0o755)
    for versions in ('"1.0.0"', '"1.0.0","1.1.0"'):
        env = {"FAKE_LOG": str(log), "FAKE_VERSIONS": versions}
        assert node.gc(["c1"], env, delegate={"type": "fakebr"})[0] == 0
        assert (log / "GC.stdin").exists() == ("1.1.0" in versions)
    forwarded = json.loads((log / "GC.stdin").read_bytes())
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
