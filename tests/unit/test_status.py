"""`pyflannel status`: expected-vs-actual comparison, own-lease detection and the renderings."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from ipaddress import IPv4Address, IPv4Network, IPv6Network, ip_address, ip_network
from pathlib import Path

import pytest

from pyflannel_runtime.agent.cli_flags import AgentFlagsError, agent_environment, agent_options
from pyflannel_runtime.agent.flags import Options
from pyflannel_runtime.backend.host import HostDatapath
from pyflannel_runtime.backend.hostgw.peers import hostgw_peer_entries
from pyflannel_runtime.backend.peers import VxlanDevices
from pyflannel_runtime.backend.vxlan.peers import vxlan_peer_entries
from pyflannel_runtime.cli.status import (
    AGENT_FLAGS,
    Attempt,
    Status,
    StatusFailed,
    add_arguments,
    remaining,
    render_json,
    render_table,
    report_dict,
    wait_for_health,
)
from pyflannel_runtime.ipam.node import FamilyUsage, PodAddresses
from pyflannel_runtime.netlink.entries import (
    DatapathState,
    Fdb,
    IPAddress,
    IPNetwork,
    Neigh,
    Route,
)
from pyflannel_runtime.ops.node_check import summary
from pyflannel_runtime.ops.verify import (
    Datapath,
    VerifyReport,
    compare,
    describe,
    find_host_lease,
)
from pyflannel_runtime.subnet.manager import ListedLease, UnreadableLease
from pyflannel_runtime.subnet.watcher import LeaseScope
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data

DEV, ETH0 = 4, 2
NAMES = {DEV: "flannel.1", ETH0: "eth0"}
VXLAN_HOST = HostDatapath("vxlan", devices=VxlanDevices(DEV, None), names=NAMES)
HOSTGW_HOST = HostDatapath("host-gw", ext_index=ETH0, names=NAMES)


def vxlan_lease(n: int, expiration: float | None = None) -> Lease:
    attrs = LeaseAttrs(
        IPv4Address(f"192.0.2.1{n}"), None, "vxlan", vxlan_backend_data(1, f"0a:58:0a:f4:0{n}:00")
    )
    return Lease(IPv4Network(f"10.244.{n}.0/24"), None, attrs, expiration=expiration)


def hostgw_lease(n: int) -> Lease:
    return Lease(IPv4Network(f"10.244.{n}.0/24"), None, LeaseAttrs(IPv4Address(f"192.0.2.1{n}"),
                 None, "host-gw"))  # fmt: skip


def rows(*leases: Lease) -> list[ListedLease]:
    return [ListedLease(lease) for lease in leases]


def vxlan_entries(lease: Lease) -> set[Route | Neigh | Fdb]:
    return set(vxlan_peer_entries(lease, VxlanDevices(DEV, None)))


ROUTE3 = Route(ip_network("10.244.3.0/24"), ip_address("10.244.3.0"), DEV, onlink=True)
STALE_FDB = Fdb(DEV, "0a:58:0a:f4:09:00", ip_address("192.0.2.19"))


def drifted_report() -> VerifyReport:
    """Three vxlan leases; the host lacks the third peer's route and has one stale FDB entry."""
    own, peer2, peer3 = vxlan_lease(1), vxlan_lease(2), vxlan_lease(3)
    peers = vxlan_entries(peer2) | (vxlan_entries(peer3) - {ROUTE3})
    actual = DatapathState.of(peers | {STALE_FDB})
    return compare(rows(own, peer2, peer3), own, VXLAN_HOST, actual, "etcd")


def test_programmed_missing_and_stale_entries_are_told_apart() -> None:
    own, peer2, peer3 = vxlan_lease(1), vxlan_lease(2), vxlan_lease(3)
    report = drifted_report()
    states = [(s.row.lease.subnet, s.datapath, s.missing) for s in report.leases]
    assert states == [
        (own.subnet, Datapath.OWN, ()),
        (peer2.subnet, Datapath.PROGRAMMED, ()),
        (peer3.subnet, Datapath.MISSING, (ROUTE3,)),
    ]
    assert report.stale == (STALE_FDB,)
    assert not report.ok
    assert summary(report) == "3 leases, 1 peer programmed, 1 missing, 1 stale"


def test_all_programmed_is_ok_and_the_own_lease_needs_nothing() -> None:
    own, peer = vxlan_lease(1), vxlan_lease(2)
    report = compare(
        rows(own, peer), own, VXLAN_HOST, DatapathState.of(vxlan_entries(peer)), "etcd"
    )
    assert report.ok
    assert summary(report) == "2 leases, 1 peer programmed, 0 missing, 0 stale"


def test_entries_of_the_own_lease_are_stale() -> None:
    own, peer = vxlan_lease(1), vxlan_lease(2)
    actual = DatapathState.of(vxlan_entries(peer) | vxlan_entries(own))
    report = compare(rows(own, peer), own, VXLAN_HOST, actual, "etcd")
    assert set(report.stale) == vxlan_entries(own)


def test_host_gw_peers_and_a_lease_of_another_backend() -> None:
    own, peer, odd = hostgw_lease(1), hostgw_lease(2), vxlan_lease(3)
    actual = DatapathState.of(hostgw_peer_entries(peer, ETH0, True, False))
    report = compare(rows(own, peer, odd), own, HOSTGW_HOST, actual, "etcd")
    assert [s.datapath for s in report.leases] == [
        Datapath.OWN,
        Datapath.PROGRAMMED,
        Datapath.SKIPPED,
    ]
    assert report.leases[2].note == "Ignoring non-host-gw subnet: type=vxlan"
    assert report.ok
    assert summary(report).endswith(", 1 skipped")


def test_a_missing_device_makes_every_entry_on_it_missing() -> None:
    own, peer = vxlan_lease(1), vxlan_lease(2)
    host = HostDatapath(
        "vxlan",
        devices=VxlanDevices(-1, None),
        names={-1: "flannel.1"},
        problems=("device flannel.1 does not exist",),
    )
    report = compare(rows(own, peer), own, host, DatapathState(), "etcd")
    assert report.leases[1].datapath is Datapath.MISSING
    assert len(report.leases[1].missing) == 3
    assert report.problems == ("device flannel.1 does not exist",)
    assert "route 10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink" in render_table(report, 0)


def test_without_a_host_nothing_is_checked_and_problems_still_fail() -> None:
    own, peer = vxlan_lease(1), vxlan_lease(2)
    listing = compare(rows(own, peer), None, None, None, "etcd")
    assert [s.datapath for s in listing.leases] == [Datapath.UNCHECKED] * 2 and listing.ok
    lost = compare(rows(peer), None, None, None, "etcd", ["no lease belongs to this host"])
    assert not lost.ok


def test_the_own_lease_is_found_by_public_ip_or_by_subnet() -> None:
    leases = rows(vxlan_lease(1), vxlan_lease(2))
    assert find_host_lease(leases, ip_address("192.0.2.12"), []) == vxlan_lease(2)
    assert find_host_lease(leases, None, [ip_network("10.244.1.0/24")]) == vxlan_lease(1)
    assert find_host_lease(leases, ip_address("192.0.2.99"), [ip_network("10.244.1.0/24")]) is None
    dual = Lease(None, IPv6Network("fd00:10:244:5::/64"), LeaseAttrs(), enable_ipv4=False)
    assert find_host_lease(rows(dual), None, [ip_network("fd00:10:244:5::/64")]) == dual


def test_entries_are_described_in_ip_syntax() -> None:
    assert (
        describe(Route(ip_network("fd00::/64"), ip_address("fd00::"), 9, True, 1024), NAMES)
        == "route fd00::/64 via fd00:: dev if9 onlink metric 1024"
    )
    assert describe(Route(ip_network("10.244.5.0/24"), None, ETH0), NAMES) == (
        "route 10.244.5.0/24 dev eth0"
    )
    assert describe(Neigh(DEV, ip_address("10.244.2.0"), "0a:58:00:00:00:02"), NAMES) == (
        "neigh 10.244.2.0 lladdr 0a:58:00:00:00:02 dev flannel.1"
    )
    assert describe(Fdb(DEV, "0a:58:00:00:00:02", ip_address("192.0.2.12")), NAMES) == (
        "fdb 0a:58:00:00:00:02 dev flannel.1 dst 192.0.2.12"
    )


@pytest.mark.parametrize(
    ("left", "store", "text"),
    [(None, "etcd", "never"), (None, "kube", "-"), (-5, "etcd", "expired"), (42, "etcd", "42s"),
     (3599, "etcd", "59m59s"), (86399, "etcd", "23h59m"), (90000, "etcd", "1d1h")],
)  # fmt: skip
def test_remaining_lease_time(left: int | None, store: str, text: str) -> None:
    now = 1_800_000_000.0
    assert remaining(None if left is None else now + left, now, store) == text


def test_the_table_has_aligned_columns_details_and_the_summary_last() -> None:
    own, peer2, peer3 = vxlan_lease(1, expiration=1000.0 + 7200), vxlan_lease(2), vxlan_lease(3)
    actual = DatapathState.of(vxlan_entries(peer2) | (vxlan_entries(peer3) - {
        Neigh(DEV, ip_address("10.244.3.0"), "0a:58:0a:f4:03:00")}))  # fmt: skip
    report = compare(rows(own, peer2, peer3), own, VXLAN_HOST, actual, "etcd")
    assert render_table(report, now=1000.0) == (
        "+---------------+------------+---------+-------------------+---------+-----+-------------+\n"
        "| SUBNET        | PUBLIC IP  | BACKEND | VTEP MAC          | EXPIRES | OWN | DATAPATH    |\n"
        "+---------------+------------+---------+-------------------+---------+-----+-------------+\n"
        "| 10.244.1.0/24 | 192.0.2.11 | vxlan   | 0a:58:0a:f4:01:00 | 2h00m   | yes | own         |\n"
        "| 10.244.2.0/24 | 192.0.2.12 | vxlan   | 0a:58:0a:f4:02:00 | never   |     | programmed  |\n"
        "| 10.244.3.0/24 | 192.0.2.13 | vxlan   | 0a:58:0a:f4:03:00 | never   |     | missing 1/3 |\n"
        "+---------------+------------+---------+-------------------+---------+-----+-------------+\n"
        "\n"
        "Missing on this host:\n"
        "  10.244.3.0/24: neigh 10.244.3.0 lladdr 0a:58:0a:f4:03:00 dev flannel.1\n"
        "\n"
        "3 leases, 1 peer programmed, 1 missing, 0 stale\n"
    )


def test_kube_tables_name_the_nodes() -> None:
    own, peer = vxlan_lease(1), vxlan_lease(2)
    listing = [ListedLease(own, "node-a"), ListedLease(peer, "node-b")]
    report = compare(listing, own, VXLAN_HOST, DatapathState.of(vxlan_entries(peer)), "kube")
    lines = render_table(report, 0).splitlines()
    assert lines[1].split("|")[1:3] == [" NODE   ", " SUBNET        "]
    assert lines[4].startswith("| node-b | 10.244.2.0/24 |") and " -       |" in lines[4]


def test_json_output_for_scripts() -> None:
    own, peer = vxlan_lease(1, expiration=0.0), vxlan_lease(2)
    stale = Route(ip_network("10.244.9.0/24"), ip_address("10.244.9.0"), DEV, onlink=True)
    actual = DatapathState.of(vxlan_entries(peer) | {stale})
    report = compare(rows(own, peer), own, VXLAN_HOST, actual, "etcd")
    data = json.loads(render_json(report))
    assert data == report_dict(report)
    assert data["leases"][0] == {
        "node": None,
        "subnet": "10.244.1.0/24",
        "ipv6_subnet": None,
        "public_ip": "192.0.2.11",
        "public_ipv6": None,
        "backend": "vxlan",
        "vtep_mac": "0a:58:0a:f4:01:00",
        "vtep_mac_v6": None,
        "expires": "1970-01-01T00:00:00Z",
        "own": True,
        "datapath": "own",
        "missing": [],
        "note": None,
    }
    assert data["leases"][1]["datapath"] == "programmed"
    assert data["stale"] == ["route 10.244.9.0/24 via 10.244.9.0 dev flannel.1 onlink"]
    assert data["summary"] == {
        "datapath_checked": True,
        "leases": 2,
        "programmed": 1,
        "missing": 0,
        "stale": 1,
        "skipped": 0,
        "rejected": 0,
    }
    assert data["ok"] is False


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def options(*argv: str, env: dict[str, str]) -> Options:
    args = parse(*argv)
    return agent_options(args, AGENT_FLAGS, agent_environment(args, env))


def test_settings_default_to_the_agents_environment_and_flags_win() -> None:
    env = {"FLANNELD_ETCD_ENDPOINTS": "http://192.0.2.5:2379", "FLANNELD_KUBE_SUBNET_MGR": "true",
           "FLANNELD_SUBNET_FILE": "/tmp/x.env", "FLANNELD_HEALTHZ_PORT": "8081"}  # fmt: skip
    opts = options("--agent-env=", env=env)
    assert (opts.etcd_endpoints, opts.kube_subnet_mgr, opts.subnet_file, opts.healthz_port) == (
        "http://192.0.2.5:2379",
        True,
        "/tmp/x.env",
        8081,
    )
    opts = options("--etcd-endpoints=http://192.0.2.6:2379", "--etcd-prefix=/x",
                   "--healthz-port=9", "--agent-env=", env=env)  # fmt: skip
    assert (opts.etcd_endpoints, opts.etcd_prefix, opts.healthz_port) == (
        "http://192.0.2.6:2379",
        "/x",
        9,
    )
    assert options("--agent-env=", env={}).subnet_file == "/run/flannel/subnet.env"
    with pytest.raises(AgentFlagsError, match="FLANNELD_KUBE_SUBNET_MGR"):
        options("--agent-env=", env={"FLANNELD_KUBE_SUBNET_MGR": "maybe"})
    with pytest.raises(AgentFlagsError, match="-healthz-port: out of range"):
        options("--healthz-port=70000", "--agent-env=", env={})


def test_the_agents_environment_file_is_read_below_the_environment_and_the_flags(
    tmp_path: Path,
) -> None:
    env_file = tmp_path / "pyflanneld.env"
    env_file.write_text(
        "# rendered\nFLANNELD_ETCD_ENDPOINTS=https://192.0.2.5:2379\n"
        'FLANNELD_ETCD_PASSWORD="pa ss\\"word"\nFLANNELD_HEALTHZ_PORT=8081\n'
        "FLANNELD_SUBNET_FILE=/run/flannel/subnet.env\n"
    )
    opts = options(f"--agent-env={env_file}", env={"FLANNELD_HEALTHZ_PORT": "9090"})
    assert (opts.etcd_endpoints, opts.etcd_password, opts.healthz_port) == (
        "https://192.0.2.5:2379",
        'pa ss"word',
        9090,
    )
    opts = options(f"--agent-env={env_file}", "--etcd-endpoints=http://192.0.2.6:2379", env={})
    assert opts.etcd_endpoints == "http://192.0.2.6:2379"
    with pytest.raises(AgentFlagsError, match=r"file: open .*nope\.env: no such file"):
        options(f"--agent-env={tmp_path}/nope.env", env={})


def test_leases_outside_the_network_and_unreadable_ones_are_rejected() -> None:
    own, peer = vxlan_lease(1), vxlan_lease(2)
    underlay = Lease(IPv4Network("192.0.2.0/24"), None, vxlan_lease(9).attrs)
    scope = LeaseScope(IPv4Network("10.244.0.0/16"))
    bad = UnreadableLease("10.244.15.0-24", "invalid character 'x' looking for beginning of value")
    actual = DatapathState.of(vxlan_entries(peer))
    report = compare(
        rows(own, peer, underlay), own, VXLAN_HOST, actual, "etcd", scope=scope, unreadable=[bad]
    )
    assert [s.datapath for s in report.leases] == [
        Datapath.OWN,
        Datapath.PROGRAMMED,
        Datapath.REJECTED,
    ]
    assert report.rejected == 2 and not report.ok
    table = render_table(report, 0)
    assert (
        "| 192.0.2.0/24  | 192.0.2.19 | vxlan   | 0a:58:0a:f4:09:00 | never   |     | rejected"
        in table
    )
    assert table.endswith(
        "\nRejected (never programmed):\n"
        "  192.0.2.0/24: subnet 192.0.2.0/24 is outside the network 10.244.0.0/16\n"
        "  10.244.15.0-24: invalid character 'x' looking for beginning of value\n"
        "\n"
        "3 leases, 1 peer programmed, 0 missing, 0 stale, 2 rejected\n"
    )
    data = report_dict(report)
    assert data["summary"]["rejected"] == 2 and data["ok"] is False
    assert data["unreadable"] == [
        {"name": "10.244.15.0-24", "reason": "invalid character 'x' looking for beginning of value"}
    ]
    assert data["leases"][2]["datapath"] == "rejected"
    assert data["leases"][2]["note"] == "subnet 192.0.2.0/24 is outside the network 10.244.0.0/16"


def test_leases_only_still_rejects_what_lies_outside_the_network() -> None:
    stray = Lease(IPv4Network("10.99.0.0/24"), None, vxlan_lease(9).attrs)
    scope = LeaseScope(IPv4Network("10.244.0.0/16"))
    report = compare(rows(vxlan_lease(1), stray), None, None, None, "etcd", scope=scope)
    assert [s.datapath for s in report.leases] == [Datapath.UNCHECKED, Datapath.REJECTED]
    assert summary(report) == "2 leases, agent and datapath not checked, 1 rejected"


def udp_lease(n: int) -> Lease:
    return Lease(IPv4Network(f"10.244.{n}.0/24"), None, LeaseAttrs(IPv4Address(f"192.0.2.1{n}"),
                 None, "udp"))  # fmt: skip


def udp_host(forwarder: Mapping[IPNetwork, IPAddress] | None) -> HostDatapath:
    return HostDatapath(
        "udp",
        names={7: "flannel0"},
        mtu_devices=frozenset({7}),
        checked=("flannel0 is up with 10.244.1.0/32", "route 10.244.0.0/16 dev flannel0"),
        forwarder=forwarder,
    )


def test_udp_peers_are_checked_against_the_forwarders_routes() -> None:
    own, peer2, peer3, peer4 = udp_lease(1), udp_lease(2), udp_lease(3), udp_lease(4)
    forwarder: dict[IPNetwork, IPAddress] = {
        peer2.subnet: peer2.attrs.public_ip,
        peer3.subnet: IPv4Address("192.0.2.99"),
    }
    report = compare(rows(own, peer2, peer3, peer4), own, udp_host(forwarder), DatapathState(),
                     "etcd")  # fmt: skip
    assert [(s.datapath, s.note) for s in report.leases] == [
        (Datapath.OWN, ""),
        (Datapath.PROGRAMMED, ""),
        (Datapath.MISSING, "the forwarder sends 10.244.3.0/24 to 192.0.2.99, not 192.0.2.13"),
        (Datapath.MISSING, "the forwarder has no route for 10.244.4.0/24 (to 192.0.2.14)"),
    ]
    assert not report.ok
    table = render_table(report, 0)
    assert (
        "| 10.244.4.0/24 | 192.0.2.14 | udp     | -        | never   |     | missing    |" in table
    )
    assert (
        "Missing on this host:\n"
        "  10.244.3.0/24: the forwarder sends 10.244.3.0/24 to 192.0.2.99, not 192.0.2.13\n"
        "  10.244.4.0/24: the forwarder has no route for 10.244.4.0/24 (to 192.0.2.14)\n"
    ) in table
    assert (
        "Checked on this host:\n  flannel0 is up with 10.244.1.0/32\n"
        "  route 10.244.0.0/16 dev flannel0\n"
    ) in table
    assert table.endswith("\n4 leases, 1 peer programmed, 2 missing, 0 stale\n")
    data = report_dict(report)
    assert data["leases"][3]["missing"] == [
        "the forwarder has no route for 10.244.4.0/24 (to 192.0.2.14)"
    ]


def test_udp_peers_without_the_forwarders_routes_are_not_counted_as_checked() -> None:
    own, peer = udp_lease(1), udp_lease(2)
    report = compare(rows(own, peer), own, udp_host(None), DatapathState(), "etcd")
    assert report.leases[1].datapath is Datapath.UNCHECKED and report.ok
    assert summary(report) == "2 leases, peers not checked, 0 stale"
    assert report.notes[-1] == (
        "udp peers not checked: the agent does not publish its forwarder's routes "
        "(pyflanneld does on /statusz)"
    )


def test_summaries_claim_only_what_was_checked_and_name_the_agents_state() -> None:
    from pyflannel_runtime.ops.agent import AgentEndpoint, AgentHealth, AgentState, unchecked

    own, peer = vxlan_lease(1), vxlan_lease(2)
    listing = compare(rows(own, peer), None, None, None, "etcd")
    assert summary(listing) == "2 leases, agent and datapath not checked"
    checked = compare(rows(own, peer), own, VXLAN_HOST, DatapathState.of(vxlan_entries(peer)),
                      "etcd")  # fmt: skip
    down = AgentHealth(AgentEndpoint("127.0.0.1", 8081), AgentState.DOWN, "connection refused")
    assert summary(checked, down) == ("2 leases, 1 peer programmed, 0 missing, 0 stale; agent down")
    assert summary(checked, unchecked("healthz off")).endswith("; agent health not checked")
    table = render_table(checked, 0, down)
    assert table.startswith("Agent down: connection refused\n\n+---")
    data = report_dict(checked, down)
    assert data["agent"]["state"] == "down" and data["ok"] is False
    assert report_dict(checked, unchecked("healthz off"))["ok"] is True


def test_this_hosts_pod_addresses_are_listed_or_said_to_be_unchecked() -> None:
    own, peer = vxlan_lease(1), vxlan_lease(2)
    report = compare(
        rows(own, peer), own, VXLAN_HOST, DatapathState.of(vxlan_entries(peer)), "etcd"
    )
    summary = "2 leases, 1 peer programmed, 0 missing, 0 stale"
    usage = FamilyUsage(4, "10.244.1.0/24", capacity=253, used=3, leaked=1)
    table = render_table(report, 0, pods=PodAddresses((usage,)))
    assert table.endswith(
        "\nPod addresses on this host:\n"
        "  IPv4 10.244.1.0/24: 3 of 253 addresses in use, 250 free, 1 of them look leaked\n"
        f"\n{summary}\n"
    )
    unread = PodAddresses((), "cannot read /etc/cni/net.d/10-flannel.conflist: No such file")
    assert render_table(report, 0, pods=unread).endswith(
        "\nNotes:\n"
        "  pod addresses not checked: cannot read /etc/cni/net.d/10-flannel.conflist: No such file\n"
        f"\n{summary}\n"
    )
    assert "Pod addresses" not in render_table(report, 0) and "pod addresses" not in (
        render_table(report, 0)
    )

    assert report_dict(report)["pod_addresses"] is None  # --leases-only: not asked
    assert report_dict(report, pods=PodAddresses((usage,)))["pod_addresses"] == {
        "checked": True,
        "reason": None,
        "usage": [
            {"family": "ipv4", "subnet": "10.244.1.0/24", "capacity": 253, "used": 3,
             "free": 250, "leaked": 1}
        ],
    }  # fmt: skip
    assert json.loads(render_json(report, pods=unread))["pod_addresses"] == {
        "checked": False,
        "reason": unread.unchecked,
        "usage": [],
    }


# --- status --wait: the loop, with an injected clock, sleep and check --------------------------


class FakeTime:
    """A clock that only moves when slept on, or when a check takes time."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def attempt(*problems: str, error: str | None = None) -> Attempt:
    if error is not None:
        return Attempt(error=StatusFailed(error))
    return Attempt(Status(VerifyReport("etcd", (), problems=problems), agent=None))


def scripted(
    time_: FakeTime, answers: list[Attempt], cost: float = 0.5
) -> tuple[Callable[[float], Attempt], list[float]]:
    """A check that answers in turn (the last one for ever), each taking `cost` seconds; and
    the seconds left it was given each time."""
    given: list[float] = []

    def check(left: float) -> Attempt:
        given.append(left)
        time_.now += cost
        return answers[min(len(given) - 1, len(answers) - 1)]

    return check, given


def test_wait_returns_the_first_healthy_check_and_says_each_change_once() -> None:
    time_ = FakeTime()
    answers = [
        attempt(error="cannot read leases from etcd http://10.0.0.1:2379: no answer in 10s\nhint"),
        attempt("agent down"),
        attempt("agent down"),
        attempt(),
    ]
    check, given = scripted(time_, answers)
    said: list[str] = []
    last = wait_for_health(check, 30, time_.clock, time_.sleep, said.append)
    assert last is answers[3] and last.healthy
    assert given == [30.0, 27.5, 25.0, 22.5]
    assert time_.slept == [2.0, 2.0, 2.0]
    assert said == [
        "waiting, 30s left: cannot read leases from etcd http://10.0.0.1:2379: no answer in 10s",
        "waiting, 27s left: 0 leases, agent and datapath not checked",
    ]


def test_wait_gives_up_at_its_deadline_with_the_last_check() -> None:
    time_ = FakeTime()
    check, given = scripted(time_, [attempt("no lease belongs to this host")], cost=1.0)
    said: list[str] = []
    last = wait_for_health(check, 7, time_.clock, time_.sleep, said.append)
    assert not last.healthy and time_.now == 1007.0
    assert given == [7.0, 4.0, 1.0]
    assert time_.slept == [2.0, 2.0]  # never past the deadline: the last check ends at it
    assert said == ["waiting, 6s left: 0 leases, agent and datapath not checked"]


def test_wait_zero_checks_once() -> None:
    time_ = FakeTime()
    check, given = scripted(time_, [attempt("x")], cost=0.0)
    assert not wait_for_health(check, 0, time_.clock, time_.sleep).healthy
    assert given == [0.0] and time_.slept == []


def test_status_takes_wait_in_seconds_and_refuses_anything_else() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["--wait", "90"]).wait == 90.0
    assert parser.parse_args([]).wait is None
    for wrong in ("-1", "nan", "inf", "soon"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--wait", wrong])
