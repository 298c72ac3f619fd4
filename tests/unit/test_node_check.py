"""ops.node_check: the texts `pyflannel status` and the routes module share, and the node's
subnet.env as the module returns it (the live checks run in tests/integration/test_status_live.py
and through site.yml)."""

from __future__ import annotations

from dataclasses import replace
from ipaddress import IPv4Network
from pathlib import Path

import pytest

from pyflannel_runtime.cli.status import render_table
from pyflannel_runtime.netlink.entries import DatapathState
from pyflannel_runtime.ops.agent import AgentEndpoint
from pyflannel_runtime.ops.node_check import (
    DeviceOffload,
    ask_agent,
    drift_diff,
    lease_counts,
    lease_rows,
    problems,
    read_subnet_env,
    rejected,
)
from pyflannel_runtime.ops.verify import DeviceMtu, VerifyError, compare
from pyflannel_runtime.subnet.manager import UnreadableLease
from pyflannel_runtime.subnet.watcher import LeaseScope
from pyflannel_runtime.wire.lease import Lease

from .test_status import (
    VXLAN_HOST,
    drifted_report,
    rows,
    udp_host,
    udp_lease,
    vxlan_entries,
    vxlan_lease,
)


def test_the_drift_diff_shows_flannels_entries_before_and_after_a_repair() -> None:
    diff = drift_diff(drifted_report())
    assert diff is not None
    before, after = diff["before"].splitlines(), diff["after"].splitlines()
    assert set(after) - set(before) == {"route 10.244.3.0/24 via 10.244.3.0 dev flannel.1 onlink"}
    assert set(before) - set(after) == {"fdb 0a:58:0a:f4:09:00 dev flannel.1 dst 192.0.2.19"}
    assert before == sorted(before) and after == sorted(after) and len(after) == 6
    assert (diff["before_header"], diff["after_header"]) == (
        "kernel (flannel's entries)",
        "what the leases need",
    )


# What the verify role's summary and the agent role's roll read of a lease.
SUMMARY_KEYS = ("subnet", "ipv6_subnet", "public_ip", "public_ipv6", "node", "expires_in", "state")


def test_the_lease_list_names_each_nodes_subnet_public_ip_and_expiry() -> None:
    """The verify role's summary finds a node outside the run by these (a held lease)."""
    own = vxlan_lease(1, expiration=1_000.0 + 3_600.4)
    reservation = vxlan_lease(2)  # no expiry: a reservation
    watched = vxlan_lease(3, expiration=float("inf"))  # its TTL was not looked up
    report = compare(rows(own, reservation, watched), own, None, None, "etcd")
    listed = lease_rows(report, now=1_000.0)
    assert [{key: row[key] for key in SUMMARY_KEYS} for row in listed] == [
        {
            "subnet": f"10.244.{n}.0/24",
            "ipv6_subnet": None,
            "public_ip": f"192.0.2.1{n}",
            "public_ipv6": None,
            "node": None,
            "expires_in": expires,
            "state": "unchecked" if n > 1 else "own",
        }
        for n, expires in ((1, 3600), (2, None), (3, None))
    ]
    # Each lease as status -o json and leases_info show it, besides.
    assert [row["backend"] for row in listed] == ["vxlan"] * 3
    assert listed[0]["vtep_mac"] and listed[1]["expires"] is None
    expired = replace(own, expiration=900.0)
    assert (
        lease_rows(compare(rows(expired), expired, None, None, "etcd"), 1_000.0)[0]["expires_in"]
        == 0
    )


def test_no_drift_no_diff() -> None:
    own, peer = vxlan_lease(1), vxlan_lease(2)
    report = compare(
        rows(own, peer), own, VXLAN_HOST, DatapathState.of(vxlan_entries(peer)), "etcd"
    )
    assert drift_diff(report) is None


def test_counts_and_problems_say_what_status_says() -> None:
    own, peer = vxlan_lease(1), vxlan_lease(2)
    underlay = Lease(IPv4Network("192.0.2.0/24"), None, vxlan_lease(9).attrs)
    bad = UnreadableLease("10.244.15.0-24", "invalid character 'x' looking for beginning of value")
    report = compare(
        rows(own, peer, underlay),
        own,
        VXLAN_HOST,
        DatapathState(),
        "etcd",
        problems=["the network config is not usable: bad"],
        scope=LeaseScope(IPv4Network("10.244.0.0/16")),
        unreadable=[bad],
    )
    report = replace(report, mtus=(DeviceMtu("flannel.1", 1500, 1450),), subnet_env=("env off",))
    assert lease_counts(report) == {
        "total": 3, "programmed": 0, "missing": 1, "skipped": 0, "rejected": 2, "unchecked": 0
    }  # fmt: skip
    found = problems(report)
    assert found == [
        "the network config is not usable: bad",
        "flannel.1 has MTU 1500, expected 1450",
        "env off",
    ]
    # The store's leases, not this host's problems: listed apart (the routes module does not
    # fail a node for them).
    refused = rejected(report)
    assert refused == [
        "192.0.2.0/24: subnet 192.0.2.0/24 is outside the network 10.244.0.0/16",
        "10.244.15.0-24: invalid character 'x' looking for beginning of value",
    ]
    table = render_table(report, 0)
    problems_at, rejected_at = (
        table.index("Problems:\n"),
        table.index("Rejected (never programmed):\n"),
    )
    assert all(f"  {line}\n" in table[problems_at:] for line in found)
    assert all(f"  {line}\n" in table[rejected_at:problems_at] for line in refused)


def test_each_lease_says_where_the_node_stands_with_it() -> None:
    own, peer, lacking = vxlan_lease(1), vxlan_lease(2), vxlan_lease(3)
    report = compare(
        rows(own, peer, lacking), own, VXLAN_HOST, DatapathState.of(vxlan_entries(peer)), "etcd"
    )
    assert [(row["subnet"], row["state"]) for row in lease_rows(report, 0.0)] == [
        (f"10.244.{n}.0/24", state) for n, state in ((1, "own"), (2, "programmed"), (3, "missing"))
    ]


def test_udp_peers_count_as_unchecked_only_without_the_forwarders_routes() -> None:
    own, peer = udp_lease(1), udp_lease(2)
    blind = compare(rows(own, peer), own, udp_host(None), DatapathState(), "etcd")
    assert lease_counts(blind)["unchecked"] == 1 and lease_counts(blind)["programmed"] == 0
    routes = {peer.subnet: peer.attrs.public_ip}
    seen = compare(rows(own, peer), own, udp_host(routes), DatapathState(), "etcd")
    assert lease_counts(seen)["unchecked"] == 0 and lease_counts(seen)["programmed"] == 1
    assert problems(seen) == [] and drift_diff(seen) is None


def test_subnet_env_is_read_as_flanneld_reads_it(tmp_path: Path) -> None:
    env = tmp_path / "subnet.env"
    env.write_text(
        "# written by the agent\nFLANNEL_NETWORK=10.244.0.0/16\n"
        "FLANNEL_SUBNET=10.244.7.1/24 # inline comment\nFLANNEL_MTU=1450\r\n"
        "FLANNEL_IPMASQ=true\n"
    )
    assert read_subnet_env(str(env)) == {
        "FLANNEL_NETWORK": "10.244.0.0/16",
        "FLANNEL_SUBNET": "10.244.7.1/24",
        "FLANNEL_MTU": "1450",
        "FLANNEL_IPMASQ": "true",
    }
    assert read_subnet_env(str(tmp_path / "absent")) == {}
    env.write_bytes(b"A=" + b"x" * (64 * 1024))
    assert read_subnet_env(str(env)) == {}


def test_the_agent_of_a_namespace_that_does_not_exist_is_not_asked() -> None:
    with pytest.raises(VerifyError, match="network namespace pfl-nope-h9 does not exist"):
        ask_agent(AgentEndpoint("127.0.0.1", 8081), "pfl-nope-h9")


def test_a_vxlan_devices_offload_says_where_its_state_comes_from() -> None:
    off = DeviceOffload("flannel.1", False, "off")
    assert off.describe() == "flannel.1: tx checksum offload off (--vxlan-tx-checksum-offload=off)"
    stale = DeviceOffload("flannel.1", True, "auto", "UDP checksums failed")
    assert not stale.as_wanted
    assert stale.describe().endswith(
        "(auto: UDP checksums failed); the agent applies its setting when it next creates or "
        "finds the device"
    )
    unread = DeviceOffload("flannel.1", None, "on", error="No such device")
    assert unread.as_wanted and unread.describe().endswith(": No such device")
    assert off.as_dict() == {"device": "flannel.1", "enabled": False, "mode": "off",
                             "auto_verdict": None}  # fmt: skip
