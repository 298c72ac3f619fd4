"""pyflannel.network.verify_summary: the end-of-play table per node from what the verify role
registered."""

from __future__ import annotations

from typing import Any

from ansible_collections.pyflannel.network.plugins.filter.verify_summary import verify_summary


def registered(subnet: str, pods: list[str]) -> dict[str, Any]:
    env = {"FLANNEL_NETWORK": "10.244.0.0/16", "FLANNEL_SUBNET": subnet, "FLANNEL_MTU": "1450"}
    return {
        "__flannel_verify_routes": {
            "subnet_env": env,
            "summary": "3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready",
            "missing": [],
            "stale": [],
            "writes": 0,
        },
        "__flannel_verify_suite": {
            "pods": [{"ip": pod} for pod in pods],
            "offload": {"device": "flannel.1", "enabled": False, "mode": "off"},
        },
    }


def test_every_node() -> None:
    hostvars = {
        "h1": registered("10.244.1.1/24", ["10.244.1.2", "10.244.1.3"]),
        "h2": registered("10.244.2.1/24", ["10.244.2.2", "10.244.2.3"]),
    }
    lines = verify_summary(["h1", "h2"], hostvars)
    assert "  subnet        10.244.1.1/24" in lines and "  MTU           1450" in lines
    assert "  datapath      3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready" in lines
    assert lines[-2:] == [
        "  probe pods    10.244.2.2, 10.244.2.3",
        "  tx offload    flannel.1 off (flannel_vxlan_tx_checksum_offload: off)",
    ]


def test_the_offload_is_shown_as_the_suite_left_it() -> None:
    hostvars = {"h1": registered("10.244.1.1/24", ["10.244.1.2"])}
    hostvars["h1"]["__flannel_verify_connectivity"] = {
        "rows": [],
        "offload": {"device": "flannel.1", "enabled": False, "mode": "auto"},
    }
    assert verify_summary(["h1"], hostvars)[-1] == (
        "  tx offload    flannel.1 off (flannel_vxlan_tx_checksum_offload: auto)"
    )


def test_a_check_mode_run_without_probes_says_so() -> None:
    hostvars = {"h1": {"__flannel_verify_suite": {"skipped": True}}}
    assert verify_summary(["h1"], hostvars) == [
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


def test_the_stores_rejected_leases_are_listed_under_the_datapath() -> None:
    why = "0.0.0.0-0: no subnet in either family (IPv4 part 0.0.0.0/0, no IPv6 part)"
    routes = {
        "summary": "4 leases, 2 peers programmed, 0 missing, 0 stale, 1 rejected; agent ready",
        "stale": ["neigh 10.244.9.0 lladdr 0a:58:0a:f4:09:00 dev flannel.1"],
        "rejected": [why],
    }
    lines = verify_summary(["h1"], {"h1": {"__flannel_verify_routes": routes}})
    assert lines[3:6] == [
        "  datapath      4 leases, 2 peers programmed, 0 missing, 0 stale, 1 rejected; agent ready",
        "    stale       neigh 10.244.9.0 lladdr 0a:58:0a:f4:09:00 dev flannel.1",
        f"    rejected    {why}",
    ]
