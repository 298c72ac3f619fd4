"""pyflannel.network.verify_summary: the end-of-play table per node from its verify results."""

from __future__ import annotations

from typing import Any

from ansible_collections.pyflannel.network.plugins.filter.verify_summary import verify_summary


def registered(subnet: str, pods: list[str]) -> dict[str, Any]:
    env = {"FLANNEL_NETWORK": "10.244.0.0/16", "FLANNEL_SUBNET": subnet, "FLANNEL_MTU": "1450"}
    return {
        "routes": {
            "subnet_env": env,
            "summary": "3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready",
            "missing": [],
            "stale": [],
            "writes": 0,
        },
        "suite": {
            "pods": [{"ip": pod} for pod in pods],
            "offload": {"device": "flannel.1", "enabled": False, "mode": "off"},
        },
    }


def test_every_node() -> None:
    reports = {
        "h1": registered("10.244.1.1/24", ["10.244.1.2", "10.244.1.3"]),
        "h2": registered("10.244.2.1/24", ["10.244.2.2", "10.244.2.3"]),
    }
    lines = verify_summary(reports)
    assert "  subnet        10.244.1.1/24" in lines and "  MTU           1450" in lines
    assert "  datapath      3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready" in lines
    assert lines[-2:] == [
        "  probe pods    10.244.2.2, 10.244.2.3",
        "  tx offload    flannel.1 off (flannel_vxlan_tx_checksum_offload: off)",
    ]


def test_the_offload_is_shown_as_the_suite_left_it() -> None:
    reports = {"h1": registered("10.244.1.1/24", ["10.244.1.2"])}
    reports["h1"]["connectivity"] = {
        "rows": [],
        "offload": {"device": "flannel.1", "enabled": False, "mode": "auto"},
    }
    assert verify_summary(reports)[-1] == (
        "  tx offload    flannel.1 off (flannel_vxlan_tx_checksum_offload: auto)"
    )


def test_a_check_mode_run_without_probes_says_so() -> None:
    reports = {"h1": {"suite": {"skipped": True}}}
    assert verify_summary(reports) == [
        "h1:",
        "  subnet        unknown",
        "  MTU           unknown",
        "  probe pods    not run",
    ]


def test_pod_address_usage_per_family_with_leaks() -> None:
    usage = [
        {"family": "ipv4", "subnet": "10.244.1.0/24", "capacity": 253, "used": 12, "free": 241},
        {"family": "ipv6", "subnet": "fd00:1::/64", "capacity": 99, "used": 9, "free": 90},
    ]
    usage[1]["leaked"] = 2
    reports = {"h1": {"ipam": {"usage": usage}}}
    lines = verify_summary(reports)
    assert "  pod addresses 12 of 253 in use, 241 free" in lines
    assert "  pod addresses 9 of 99 in use, 90 free, 2 look leaked" in lines


UDP_UNCHECKED = (
    "udp peers not checked: the agent does not publish its forwarder's routes "
    "(pyflanneld does on /statusz)"
)


def test_what_was_not_checked_is_noted_under_the_datapath() -> None:
    routes = {
        "summary": "3 leases, peers not checked, 0 stale; agent health not checked",
        "notes": [UDP_UNCHECKED],
    }
    lines = verify_summary({"h1": {"routes": routes}})
    assert lines[3:5] == [
        "  datapath      3 leases, peers not checked, 0 stale; agent health not checked",
        f"    note        {UDP_UNCHECKED}",
    ]


def test_the_stores_rejected_leases_are_listed_under_the_datapath() -> None:
    why = "0.0.0.0-0: no subnet in either family (IPv4 part 0.0.0.0/0, no IPv6 part)"
    routes = {
        "summary": "4 leases, 2 peers programmed, 0 missing, 0 stale, 1 rejected; agent ready",
        "stale": ["neigh 10.244.9.0 lladdr 0a:58:0a:f4:09:00 dev flannel.1"],
        "rejected": [why],
    }
    lines = verify_summary({"h1": {"routes": routes}})
    assert lines[3:6] == [
        "  datapath      4 leases, 2 peers programmed, 0 missing, 0 stale, 1 rejected; agent ready",
        "    stale       neigh 10.244.9.0 lladdr 0a:58:0a:f4:09:00 dev flannel.1",
        f"    rejected    {why}",
    ]


# A limited run (--limit node1): node2 answered and got the suite's probe pods, node3 is
# powered off.
NODES = {
    name: {"subnet": None, "ipv6_subnet": None, "public_ip": ip, "public_ipv6": None, "address": ip}
    for name, ip in (("node1", "192.0.2.11"), ("node2", "192.0.2.12"), ("node3", None))
}
NODES["node3"]["address"] = "192.0.2.13"  # no facts: found by its inventory address
LEASES = [
    {"subnet": f"10.244.{n}.0/24", "ipv6_subnet": None, "public_ip": f"192.0.2.1{n}",
     "public_ipv6": None, "node": None, "expires_in": 86_000, "state": "programmed"}
    for n in (1, 2, 3)
]  # fmt: skip
UNREACHABLE = (
    'Task failed: Data could not be sent to remote host "192.0.2.13". Make sure this host can '
    "be reached over ssh: ssh: connect to host 192.0.2.13 port 22: No route to host"
)
OTHER_SUITES = {
    "results": [
        {"item": "node2", "pods": [{"ip": "10.244.2.5"}, {"ip": "10.244.2.6"}]},
        {"item": "node3", "unreachable": True, "msg": UNREACHABLE},
    ]
}


def test_a_limited_run_lists_the_other_nodes_with_their_leases_and_probe_pods() -> None:
    node1 = registered("10.244.1.1/24", ["10.244.1.2", "10.244.1.3"])
    node1["routes"]["lease_list"] = LEASES
    lines = verify_summary({"node1": node1}, nodes=NODES, other_suites=OTHER_SUITES)
    assert lines[lines.index("node2 (not in this run):") :] == [
        "node2 (not in this run):",
        "  lease         10.244.2.0/24 (192.0.2.12), expires in 23 h 53 min",
        "  probe pods    10.244.2.5, 10.244.2.6",
        "node3 (not in this run): unreachable (Data could not be sent to remote host"
        ' "192.0.2.13". Make sure this host can be reached over ssh: ssh: connect to host'
        " 192.0.2.13 port 22: No route to host)",
        "  lease         10.244.3.0/24 (192.0.2.13) still held, expires in 23 h 53 min",
    ]


def test_an_other_node_without_a_lease_and_a_reservation_say_so() -> None:
    node1 = registered("10.244.1.1/24", [])
    reservation = {**LEASES[1], "expires_in": None}
    node1["routes"]["lease_list"] = [LEASES[0], reservation]
    nodes = {**NODES, "node4": {**NODES["node2"], "public_ip": "192.0.2.14"}}
    lines = verify_summary({"node1": node1}, nodes=nodes)
    assert "  lease         10.244.2.0/24 (192.0.2.12), a reservation" in lines
    assert lines[lines.index("node4 (not in this run):") + 1] == (
        "  lease         none in the lease store"
    )


def test_the_leases_orphans_and_free_subnets_once_for_the_cluster() -> None:
    orphan = {"subnet": "10.244.9.0/24", "ipv6_subnet": None, "public_ip": "192.0.2.9"}
    found = {
        "leases": [{"subnet": "10.244.1.0/24"}, orphan],
        "orphans": [orphan],
        "utilisation": [
            {"network": "10.244.0.0/16", "total": 255, "used": 2, "free": 253, "outside": 0},
            {"network": "fd00::/56", "total": 255, "used": 1, "free": 254, "outside": 1},
        ],
    }
    lines = verify_summary({"h1": {}, "h2": {}}, leases=found)
    assert lines[-4:] == [
        "leases        2, 1 orphans",
        "  orphan      10.244.9.0/24 (public IP 192.0.2.9)",
        "subnets       10.244.0.0/16: 2 of 255 used, 253 free",
        "subnets       fd00::/56: 1 of 255 used, 254 free, 1 leases outside them",
    ]
    skipped = verify_summary({"h1": {}}, leases={"skipped": True})
    assert not any(line.startswith("leases") for line in skipped)
