"""The connectivity suite's verdicts, causes and summary: pure, from rows and node views."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.connectivity.causes import NodeView, likely_cause, view_of
from pyflannel_runtime.connectivity.firewall_facts import FirewallFacts
from pyflannel_runtime.connectivity.probes import Probe
from pyflannel_runtime.connectivity.run import Endpoint, Outside, SuiteRun, mtu_verdict
from pyflannel_runtime.connectivity.scenarios import (
    BY_NAME,
    GROUPS,
    OUTSIDE,
    SCENARIOS,
    Kind,
    Row,
    Verdict,
    combine,
)
from pyflannel_runtime.connectivity.summary import (
    ALL_PODS_REACHED,
    SOME_PODS_UNREACHED,
    failure_lines,
    matrix_lines,
    summary_lines,
    timing_line,
    verdict_line,
)

NODES = ["node1", "node2", "node3"]
HEALTHY_FIREWALL = FirewallFacts(forward_rules=True, masquerade=True)


def view(name: str, n: int, **changes: Any) -> NodeView:
    base: dict[str, Any] = {
        "name": name,
        "agent": "ready",
        "subnet": f"10.244.{n}.0/24",
        "public_ip": f"198.51.100.1{n}",
        "flannel_mtu": 1450,
        "pod_mtu": 1450,
        "ip_masq": True,
        "forward_rules_setting": True,
        "firewall": HEALTHY_FIREWALL,
        "offload_device": "flannel.1",
        "offload_enabled": True,
        "offload_mode": "on",
    }
    return NodeView(**{**base, **changes})


def views(**per_node: dict[str, Any]) -> dict[str, NodeView]:
    return {name: view(name, n, **per_node.get(name, {})) for n, name in enumerate(NODES, 1)}


def failed(scenario: str, source: str = "node1", target: str = "node2", **data: Any) -> Row:
    target = source if BY_NAME[scenario].kind is Kind.NODE else target
    return Row(scenario, source, target, Verdict.FAIL, "lost", data)


def every_row(verdict: Verdict = Verdict.OK) -> list[Row]:
    rows = []
    for scenario in SCENARIOS:
        for source in NODES:
            if scenario.kind is Kind.NODE:
                target = OUTSIDE if scenario.name == "pod-outside" else source
                rows.append(Row(scenario.name, source, target, verdict, "", {"path_mtu": 1450}))
            else:
                rows += [
                    Row(scenario.name, source, t, verdict, "", {"path_mtu": 1450})
                    for t in NODES
                    if t != source
                ]
    return rows


# --- causes ---------------------------------------------------------------------------------


def test_a_down_agent_explains_before_anything_else() -> None:
    nodes = views(
        node2={"agent": "down", "firewall": FirewallFacts(forward_drop=("ip filter FORWARD",))}
    )
    assert likely_cause(failed("pod-icmp"), nodes) == "the agent on node2 is down"


def test_a_missing_route_for_the_peer_is_named() -> None:
    entry = "route 10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink"
    other = "route 10.244.20.0/24 via 10.244.20.0 dev flannel.1 onlink"
    nodes = views(node1={"missing": (other, entry)})
    assert likely_cause(failed("pod-tcp"), nodes) == (
        "node1 lacks the route, neighbour or FDB entry for node2's subnet 10.244.2.0/24: " + entry
    )
    # The peer that is not the row's other end is not blamed.
    assert "lacks" not in likely_cause(failed("pod-tcp", target="node3"), nodes)


def test_a_missing_fdb_entry_names_the_peers_address() -> None:
    entry = "fdb 5e:14:e1:32:8c:81 dev flannel.1 dst 198.51.100.12"
    nodes = views(node1={"missing": (entry,)})
    assert likely_cause(failed("pod-icmp"), nodes).endswith(entry)


def test_checksum_errors_at_the_receiver_blame_the_senders_offload() -> None:
    cause = likely_cause(failed("udp-checksum", pod_csum_errors=200), views())
    assert cause.startswith("UDP from node1 arrives with bad checksums")
    assert "node1's flannel.1 sends with tx checksum offload on" in cause
    assert "flannel_vxlan_tx_checksum_offload: off" in cause


def test_suite_wide_checksum_errors_blame_the_other_end() -> None:
    # node1 counted errors: what it received broke, so node2 sent it (the replies, here).
    nodes = views(node1={"csum_errors": {"pod": 4}})
    assert likely_cause(failed("pod-udp", "node1", "node2"), nodes).startswith("UDP from node2 ")
    # the target counted: the row's own datagrams broke on their way from the source.
    assert likely_cause(failed("pod-udp", "node2", "node1"), nodes).startswith("UDP from node2 ")
    assert likely_cause(failed("host-pod", "node3", "node1"), nodes).startswith("UDP from node3 ")


def test_with_offload_already_off_the_cause_is_elsewhere_on_the_path() -> None:
    nodes = views(node1={"offload_enabled": False})
    assert likely_cause(failed("udp-checksum", pod_csum_errors=3), nodes).endswith(
        "something else on the path damages them"
    )


DROP = FirewallFacts(forward_drop=("ip filter FORWARD",), forward_rules=False, masquerade=True)


@pytest.mark.parametrize(
    ("scenario", "source", "target", "blamed"),
    [
        ("pod-icmp", "node1", "node2", True),  # forwarded at the target
        ("pod-tcp", "node2", "node3", True),  # forwarded at the source
        ("pod-udp-local", "node2", "node2", True),  # bridged, through br_netfilter
        ("host-pod", "node1", "node2", True),
        ("host-pod", "node2", "node1", False),  # the sending host does not forward it
        ("pod-host", "node1", "node2", False),  # the receiving host does not forward it
        ("pod-icmp", "node1", "node3", False),
    ],
)
def test_a_drop_policy_without_forward_rules_is_named_where_packets_are_forwarded(
    scenario: str, source: str, target: str, blamed: bool
) -> None:
    nodes = views(node2={"firewall": DROP, "forward_rules_setting": False})
    cause = likely_cause(Row(scenario, source, target, Verdict.FAIL, "lost"), nodes)
    expected = (
        "node2: the FORWARD policy is DROP (ip filter FORWARD) and flannel's forward rules are "
        "off (flannel_iptables_forward_rules: false)"
    )
    assert (cause == expected) is blamed


def test_a_drop_policy_with_forward_rules_in_place_is_no_cause() -> None:
    firewall = FirewallFacts(
        forward_drop=("ip filter FORWARD",), forward_rules=True, masquerade=True
    )
    assert "FORWARD" not in likely_cause(failed("pod-icmp"), views(node2={"firewall": firewall}))


def test_missing_forward_rules_despite_the_setting_say_the_chain_is_missing() -> None:
    cause = likely_cause(failed("pod-icmp"), views(node2={"firewall": DROP}))
    assert cause.endswith("(FLANNEL-FWD is missing)")


@pytest.mark.parametrize(
    ("changes", "data", "expected"),
    [
        ({"ip_masq": False}, {}, "node1 does not masquerade pod traffic (FLANNEL_IPMASQ=false: flannel_ip_masq)"),
        ({"firewall": FirewallFacts(forward_rules=True)}, {}, "node1's masquerade rules are missing (FLANNEL-POSTRTG)"),
        ({}, {"unmasqueraded": True}, "node1 sent pod traffic out with the pod's address: not masqueraded"),
    ],
)  # fmt: skip
def test_masquerade_causes(changes: dict[str, Any], data: dict[str, Any], expected: str) -> None:
    row = Row("pod-outside", "node1", OUTSIDE, Verdict.FAIL, "lost", data)
    assert likely_cause(row, views(node1=changes)) == expected
    # Traffic that stays in the pod network is never masqueraded: no such cause for it.
    assert "masquerade" not in likely_cause(failed("pod-udp", **data), views(node1=changes))


def test_mtu_causes() -> None:
    problem = "flannel.1 has MTU 1400, expected 1450"
    assert likely_cause(failed("mtu"), views(node2={"device_mtu_problems": (problem,)})) == (
        f"node2: {problem} (the lease's MTU)"
    )
    assert likely_cause(failed("mtu"), views(node1={"pod_mtu": 1500})) == (
        "node1's probe pod has MTU 1500, the lease's FLANNEL_MTU is 1450"
    )
    narrow = likely_cause(failed("mtu", too_big=1400, too_big_from="198.51.100.12"), views())
    assert narrow.startswith("the path from node1 to node2 carries 1400 bytes (198.51.100.12")
    hole = likely_cause(failed("mtu", black_hole=1450), views())
    assert "black hole" in hole


def test_nothing_visible_says_so() -> None:
    assert likely_cause(failed("pod-icmp"), views()).startswith("nothing the nodes can see")


rows_st = st.builds(
    Row,
    scenario=st.sampled_from([s.name for s in SCENARIOS]),
    source=st.sampled_from(NODES),
    target=st.sampled_from(NODES),
    verdict=st.just(Verdict.FAIL),
    detail=st.text(max_size=10),
    data=st.fixed_dictionaries(
        {},
        optional={
            "pod_csum_errors": st.integers(0, 5),
            "too_big": st.integers(576, 9000),
            "black_hole": st.integers(576, 9000),
            "unmasqueraded": st.booleans(),
        },
    ),
)
views_st = st.fixed_dictionaries(
    {
        name: st.builds(
            view,
            st.just(name),
            st.just(n),
            agent=st.sampled_from(["ready", "down", "not ready", ""]),
            ip_masq=st.sampled_from([True, False, None]),
            forward_rules_setting=st.sampled_from([True, False, None]),
            firewall=st.builds(
                FirewallFacts,
                readable=st.booleans(),
                forward_drop=st.sampled_from([(), ("ip filter FORWARD",)]),
                forward_rules=st.booleans(),
                masquerade=st.booleans(),
            ),
            offload_enabled=st.sampled_from([True, False, None]),
            csum_errors=st.dictionaries(st.sampled_from(["pod", "host"]), st.integers(0, 3)),
            pod_mtu=st.sampled_from([1450, 1500, None]),
        )
        for n, name in enumerate(NODES, 1)
    }
)


@given(rows_st, views_st)
def test_every_failure_gets_one_line_of_cause(row: Row, nodes: dict[str, NodeView]) -> None:
    cause = likely_cause(row, nodes)
    assert cause and "\n" not in cause


@given(rows_st, views_st)
def test_a_down_agent_at_either_end_is_always_the_cause(
    row: Row, nodes: dict[str, NodeView]
) -> None:
    ends = [row.source] + ([row.target] if BY_NAME[row.scenario].kind is Kind.PAIR else [])
    down = [n for n in ends if nodes[n].agent in ("down", "not ready")]
    cause = likely_cause(row, nodes)
    assert cause.startswith("the agent on ") == bool(down)


def test_a_view_from_what_the_role_registered() -> None:
    routes = {
        "agent": {"state": "ready"},
        "subnet_env": {"FLANNEL_SUBNET": "10.244.62.1/24", "FLANNEL_MTU": "1450", "FLANNEL_IPMASQ": "true"},
        "mtus": [{"device": "flannel.1", "actual": 1400, "expected": 1450}],
        "missing": ["route 10.244.8.0/24 via 10.244.8.0 dev flannel.1 onlink"],
        "writes": 0,
    }  # fmt: skip
    setup = {
        "pod_mtu": 1450,
        "host": {"address": "198.51.100.11"},
        "firewall": {"readable": True, "forward_drop": [], "forward_rules": True, "masquerade": True},
        "offload": {"device": "flannel.1", "enabled": True, "mode": "auto"},
    }  # fmt: skip
    run = {
        "csum_errors": {"pod": 2},
        "offload": {"device": "flannel.1", "enabled": False, "mode": "auto"},
    }
    node = view_of("node1", routes, setup, run, {"flannel_iptables_forward_rules": False})
    assert node.subnet == "10.244.62.0/24" and node.flannel_mtu == 1450 and node.ip_masq is True
    assert node.device_mtu_problems == ("flannel.1 has MTU 1400, expected 1450",)
    assert node.missing == tuple(routes["missing"])
    assert node.offload_enabled is False  # as the run left it
    assert node.forward_rules_setting is False and node.csum_errors == {"pod": 2}
    # Entries the routes module repaired are no cause any more.
    assert view_of("node1", {**routes, "writes": 3}, setup, run, None).missing == ()
    assert view_of("node1", None, None, None, None) == NodeView(
        "node1", firewall=FirewallFacts.of(None)
    )


# --- rows and verdicts ----------------------------------------------------------------------


def probe(ok: bool, **data: Any) -> Probe:
    return Probe(ok, "x bytes: detail", data)


@pytest.mark.parametrize(
    ("at", "over", "verdict", "path"),
    [
        (probe(True), probe(False, too_big=1450), Verdict.OK, 1450),
        (probe(True), probe(True), Verdict.OK, 1451),
        (probe(True), probe(False), Verdict.FAIL, 1450),  # silence above the MTU
        (probe(False, too_big=1400, too_big_from="10.0.0.1"), probe(False), Verdict.FAIL, 1400),
        (probe(False), probe(False), Verdict.FAIL, None),  # silence at the MTU
    ],
)
def test_mtu_verdicts(at: Probe, over: Probe, verdict: Verdict, path: int | None) -> None:
    got, detail, data = mtu_verdict(1450, at, over)
    assert detail.startswith("1450 passes") == at.ok
    assert got is verdict and data.get("path_mtu") == path
    assert ("black_hole" in data) == (verdict is Verdict.FAIL and "too_big" not in data)


def test_combine_fails_on_any_failed_check_and_says_it_first() -> None:
    assert combine((True, "a"), (True, "b")) == (Verdict.OK, "a; b")
    assert combine((True, "a"), (False, "b"), (False, "c")) == (Verdict.FAIL, "b; c")


@given(
    st.dictionaries(
        st.sampled_from(["scenario", "source", "target", "detail"]), st.text(max_size=5)
    ),
    st.sampled_from(list(Verdict)),
)
def test_rows_round_trip_as_facts(fields: dict[str, str], verdict: Verdict) -> None:
    row = Row(
        fields.get("scenario", "mtu"),
        fields.get("source", "a"),
        fields.get("target", "b"),
        verdict,
        fields.get("detail", ""),
        {"path_mtu": 1450},
    )
    assert Row.of(row.as_dict()) == row


@pytest.mark.parametrize(("text", "expected"), [("", None), ("198.51.100.2", Outside("198.51.100.2")), ("198.51.100.2:7472", Outside("198.51.100.2", 7472))])  # fmt: skip
def test_outside_addresses(text: str, expected: Outside | None) -> None:
    assert Outside.parse(text) == expected


def test_an_outside_that_is_no_address_is_refused() -> None:
    with pytest.raises(ValueError):
        Outside.parse("example:80")


def endpoint(node: str, n: int) -> Endpoint:
    pods = [
        {
            "name": f"p{i}",
            "ip": f"10.244.{n}.{i + 2}",
            "tcp_port": 1,
            "udp_port": 2,
            "burst_port": 3,
        }
        for i in range(2)
    ]
    return Endpoint.of(
        node,
        {"pods": pods, "host": {"address": f"198.51.100.1{n}", "udp_port": 4}, "pod_mtu": 1450},
    )


def test_the_run_covers_every_scenario_once_per_node_or_peer() -> None:
    me, peers = endpoint("node1", 1), [endpoint("node2", 2), endpoint("node3", 3)]
    from ipaddress import IPv4Network

    suite = SuiteRun(me, peers, None, [], IPv4Network("10.244.0.0/16"))
    jobs = [(job.scenario, job.target) for group in GROUPS for job in suite.jobs(group)]
    expected = [
        (s.name, OUTSIDE if s.name == "pod-outside" else "node1")
        for s in SCENARIOS
        if s.kind is Kind.NODE
    ] + [(s.name, p) for s in SCENARIOS if s.kind is Kind.PAIR for p in ("node2", "node3")]
    assert sorted(jobs) == sorted(expected)
    assert [g for g in GROUPS] == list(dict.fromkeys(s.group for s in SCENARIOS))


# --- the summary ----------------------------------------------------------------------------


def test_a_healthy_matrix() -> None:
    lines = matrix_lines(NODES, every_row())
    assert lines[1].split() == ["scenario", "1", "2", "3", "1→2", "1→3", "2→1", "2→3", "3→1", "3→2"]
    assert lines[2].split()[-3:] == ["ok", "ok", "ok"]
    mtu = next(line for line in lines if line.startswith("MTU"))
    assert mtu.split()[-6:] == ["1450"] * 6
    assert len(lines) == 2 + len(SCENARIOS)
    assert verdict_line(every_row()) == f"{ALL_PODS_REACHED}; every scenario passed"


def test_node_rows_sit_in_the_node_columns() -> None:
    rows = [Row("pod-outside", "node2", OUTSIDE, Verdict.SKIPPED, "no outside address")]
    lines = matrix_lines(NODES, rows)
    assert lines[-1].split() == ["pod→outside,", "masqueraded", "-"]
    assert lines[-1].index("-") == lines[1].index("2")


def test_larger_clusters_get_counts() -> None:
    nodes = [f"n{i}" for i in range(8)]
    rows = [
        Row("pod-icmp", a, b, Verdict.OK if a != "n0" else Verdict.FAIL, "")
        for a in nodes
        for b in nodes
        if a != b
    ]
    lines = matrix_lines(nodes, rows)
    assert lines[-1].endswith("49/56")


def test_failures_are_grouped_by_cause_with_their_paths() -> None:
    nodes = views(node2={"firewall": DROP, "forward_rules_setting": False})
    rows = [failed("pod-icmp", "node1", "node2"), failed("pod-icmp", "node2", "node3"),
            failed("udp-checksum", "node3", "node1", pod_csum_errors=5)]  # fmt: skip
    lines = failure_lines(rows, nodes)
    assert lines[0] == "3 failed, by most likely cause:"
    assert lines[1].startswith("  node2: the FORWARD policy is DROP")
    assert lines[2] == "    pod→pod ICMP: node1→node2, node2→node3 (lost)"
    assert lines[3].startswith("  UDP from node3 arrives with bad checksums")
    assert verdict_line(rows) == f"{SOME_PODS_UNREACHED}; 1 other scenario path FAILED"


def test_timing_is_the_slowest_node_per_group() -> None:
    times = {"a": {"pods": 0.4, "checksums": 0.2}, "b": {"pods": 0.1, "checksums": 0.9}}
    assert timing_line(times) == (
        "time per group (slowest node): pods 0.4 s, hosts 0.0 s, outside 0.0 s, mtu 0.0 s, "
        "checksums 0.9 s; all 1.0 s"
    )


def test_the_summary_ends_with_the_verdict() -> None:
    lines = summary_lines(NODES, every_row(), {"node1": {"pods": 0.1}}, views(), ["a note"])
    assert lines[-3:] == [
        "a note",
        timing_line({"node1": {"pods": 0.1}}),
        verdict_line(every_row()),
    ]
