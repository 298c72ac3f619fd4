"""pyflannel.network.verify_summary: the end-of-play tables from what the verify role
registered."""

from __future__ import annotations

from typing import Any

from ansible_collections.pyflannel.network.plugins.filter.verify_summary import verify_summary


def registered(subnet: str, pod: str, reachable: dict[str, bool]) -> dict[str, Any]:
    env = {"FLANNEL_NETWORK": "10.244.0.0/16", "FLANNEL_SUBNET": subnet, "FLANNEL_MTU": "1450"}
    return {
        "__flannel_verify_routes": {
            "subnet_env": env,
            "summary": "3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready",
            "missing": [],
            "stale": [],
            "writes": 0,
        },
        "__flannel_verify_pod": {"ip": pod},
        "__flannel_verify_ping": {"reachable": reachable},
    }


def test_every_node_and_the_matrix() -> None:
    hostvars = {
        "h1": registered("10.244.1.1/24", "10.244.1.2", {"10.244.2.2": True}),
        "h2": registered("10.244.2.1/24", "10.244.2.2", {"10.244.1.2": False}),
    }
    lines = verify_summary(["h1", "h2"], hostvars)
    assert "  subnet        10.244.1.1/24" in lines and "  MTU           1450" in lines
    assert "  datapath      3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready" in lines
    assert lines[-3:] == [
        "h1    -     ok    ",
        "h2    FAIL  -     ",
        "SOME PODS CANNOT REACH EACH OTHER",
    ]


def test_a_check_mode_run_without_probes_says_so() -> None:
    hostvars = {"h1": {"__flannel_verify_pod": {"skipped": True}}}
    assert verify_summary(["h1"], hostvars) == [
        "h1:",
        "  subnet        unknown",
        "  MTU           unknown",
        "  probe pod     not run",
    ]


def test_pod_address_usage_per_family_with_leaks() -> None:
    usage = [
        {"family": "ipv4", "subnet": "10.244.1.0/24", "capacity": 253, "used": 12, "free": 241},
        {"family": "ipv6", "subnet": "fd00:1::/64", "capacity": 99, "used": 9, "free": 90},
    ]
    usage[1]["leaked"] = 2
    hostvars = {"h1": {"__flannel_verify_ipam": {"usage": usage}}}
    lines = verify_summary(["h1"], hostvars)
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
    lines = verify_summary(["h1"], {"h1": {"__flannel_verify_routes": routes}})
    assert lines[3:5] == [
        "  datapath      3 leases, peers not checked, 0 stale; agent health not checked",
        f"    note        {UDP_UNCHECKED}",
    ]


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
    hostvars = {"h1": {"__flannel_verify_leases": found}, "h2": {"__flannel_verify_leases": found}}
    lines = verify_summary(["h1", "h2"], hostvars)
    assert lines[-4:] == [
        "leases        2, 1 orphans",
        "  orphan      10.244.9.0/24 (public IP 192.0.2.9)",
        "subnets       10.244.0.0/16: 2 of 255 used, 253 free",
        "subnets       fd00::/56: 1 of 255 used, 254 free, 1 leases outside them",
    ]
    skipped = {"h1": {"__flannel_verify_leases": {"skipped": True}}}
    assert not any(line.startswith("leases") for line in verify_summary(["h1"], skipped))
