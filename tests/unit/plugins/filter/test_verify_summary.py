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


# A limited run (--limit node1): node2 answered and got a probe pod, node3 is powered off.
NODES = {
    name: {"subnet": None, "ipv6_subnet": None, "public_ip": ip, "public_ipv6": None, "address": ip}
    for name, ip in (("node1", "192.0.2.11"), ("node2", "192.0.2.12"), ("node3", None))
}
NODES["node3"]["address"] = "192.0.2.13"  # no facts: found by its inventory address
LEASES = [
    {"subnet": f"10.244.{n}.0/24", "ipv6_subnet": None, "public_ip": f"192.0.2.1{n}",
     "public_ipv6": None, "node": None, "expires_in": 86_000}
    for n in (1, 2, 3)
]  # fmt: skip
UNREACHABLE = (
    'Task failed: Data could not be sent to remote host "192.0.2.13". Make sure this host can '
    "be reached over ssh: ssh: connect to host 192.0.2.13 port 22: No route to host"
)
OTHER_PODS = {
    "results": [
        {"item": "node2", "ip": "10.244.2.5"},
        {"item": "node3", "unreachable": True, "msg": UNREACHABLE},
    ]
}


def limited_run(reached_from_node2: bool = True) -> list[str]:
    node1 = registered("10.244.1.1/24", "10.244.1.2", {"10.244.2.5": True})
    node1["__flannel_verify_routes"]["lease_list"] = LEASES
    pings = {"results": [{"item": "node2", "reachable": {"10.244.1.2": reached_from_node2}}]}
    return verify_summary(
        ["node1"], {"node1": node1}, nodes=NODES, other_pods=OTHER_PODS, other_pings=pings
    )


def test_a_limited_run_lists_the_other_nodes_and_their_pods_join_the_matrix() -> None:
    lines = limited_run()
    assert lines[lines.index("node2 (not in this run):") :] == [
        "node2 (not in this run):",
        "  lease         10.244.2.0/24 (192.0.2.12), expires in 23 h 53 min",
        "  probe pod     10.244.2.5",
        "node3 (not in this run): unreachable (Data could not be sent to remote host"
        ' "192.0.2.13". Make sure this host can be reached over ssh: ssh: connect to host'
        " 192.0.2.13 port 22: No route to host)",
        "  lease         10.244.3.0/24 (192.0.2.13) still held, expires in 23 h 53 min",
        "pod reachability (row pings column):",
        "       node1  node2  ",
        "node1  -      ok     ",
        "node2  ok     -      ",
        "every pod reaches every other pod",
    ]


def test_a_ping_from_another_nodes_pod_that_fails_shows_in_the_matrix() -> None:
    lines = limited_run(reached_from_node2=False)
    assert lines[-2:] == ["node2  FAIL   -      ", "SOME PODS CANNOT REACH EACH OTHER"]


def test_an_other_node_without_a_lease_and_a_reservation_say_so() -> None:
    node1 = registered("10.244.1.1/24", "10.244.1.2", {})
    reservation = {**LEASES[1], "expires_in": None}
    node1["__flannel_verify_routes"]["lease_list"] = [LEASES[0], reservation]
    nodes = {**NODES, "node4": {**NODES["node2"], "public_ip": "192.0.2.14"}}
    lines = verify_summary(["node1"], {"node1": node1}, nodes=nodes)
    assert "  lease         10.244.2.0/24 (192.0.2.12), a reservation" in lines
    assert lines[lines.index("node4 (not in this run):") + 1] == (
        "  lease         none in the lease store"
    )
