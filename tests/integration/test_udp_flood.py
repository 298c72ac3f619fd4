"""A udp flood from a host outside the cluster against pyflanneld's udp backend, while two pods
exchange a TCP stream across it: the short version of bench/bench_udp_flood.py, which measures
what the stream keeps of its rate. Here only what holds on any machine is checked: the stream
arrives intact, no inner packet of the flood reaches the pod it is addressed to, and the agent
drops and counts the flood's datagrams (its socket filter in the kernel), on /statusz and in
`pyflannel status`.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from ipaddress import IPv4Address
from pathlib import Path

import pytest

from pyflannel_lab.flood import flooding, inner_packet, outsider
from pyflannel_lab.netns_agents import AgentLab
from pyflannel_runtime.connectivity.snmp import UDP_BUFFER_ERRORS, read_counters
from tests.integration.faults import report, status, wait_until

pytestmark = [pytest.mark.root, pytest.mark.etcd]

POD_MTU = 1472  # FLANNEL_MTU of the udp backend on a 1500-byte underlay
STRANGER = IPv4Address("192.0.2.99")  # on the underlay, in no lease
FLOOD = 200_000  # datagrams at most
FLOOD_SECONDS = 20.0  # at most
STREAM = 16 << 20  # bytes


@pytest.fixture
def lab() -> Iterator[AgentLab]:
    with AgentLab({"Type": "udp"}, hosts=2, prefix="pfl") as running:
        running.start_all()
        for host in running.net.hosts:  # the pods' MTU as the CNI bridge sets it
            running.net.ip(host.pod_ns, "link", "set", "eth0", "mtu", str(POD_MTU))
        yield running


def udp_counters(ns: str) -> dict[str, int]:
    """The namespace's Udp counters (/proc/net/snmp)."""
    return {k: v for k, v in read_counters(ns).items() if k.startswith("Udp:")}


def test_a_flood_from_a_non_peer_is_dropped_counted_and_shown(
    lab: AgentLab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    h1, h2 = lab.net.hosts
    pod_udp = udp_counters(h2.pod_ns)
    host_udp = udp_counters(h2.ns)
    blob = os.urandom(STREAM)
    sink = tmp_path / "received"
    server = subprocess.Popen(
        ["ip", "netns", "exec", h2.pod_ns, "socat", "-u", "TCP-LISTEN:5001,reuseaddr",
         f"CREATE:{sink}"]
    )  # fmt: skip
    try:
        wait_until(
            "the pod listens", lambda: ":5001" in lab.net.run(h2.pod_ns, "ss", "-ltn").stdout
        )
        payload = inner_packet(h1.pod_ip, h2.pod_ip)
        with (
            outsider(lab.net, STRANGER) as source,
            flooding(source, h2.underlay_ip, 8285, payload, FLOOD, FLOOD_SECONDS) as flood,
        ):
            subprocess.run(
                ["ip", "netns", "exec", h1.pod_ns, "socat", "-u", "STDIN", f"TCP:{h2.pod_ip}:5001"],
                input=blob,
                timeout=120,
                check=True,
            )
            sent = flood.result()
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert hashlib.sha256(sink.read_bytes()).digest() == hashlib.sha256(blob).digest()

    # Not one inner packet reached the pod they were addressed to.
    assert udp_counters(h2.pod_ns) == pod_udp
    # The agent counted what reached its socket; the kernel counts what overflowed it.
    shown = status(lab, h2)
    assert shown.returncode == 0, shown.stdout
    data = json.loads(
        subprocess.run(
            [*lab.status_argv(h2), "--output=json"], capture_output=True, text=True, check=True
        ).stdout
    )
    counters = data["udp_counters"]
    # Dropped by the socket filter in the kernel (or, were any to get by, by the forwarder).
    counted = counters["socket_drops"] + counters["foreign_source"]
    host_after = udp_counters(h2.ns)
    overflowed = host_after[UDP_BUFFER_ERRORS] - host_udp[UDP_BUFFER_ERRORS]
    assert 0 < counted <= sent.sent
    text = "datagrams the kernel dropped at the sockets (no peer's, or buffer full): "
    assert f"{text}{counters['socket_drops']}" in shown.stdout, shown.stdout
    report(
        capsys,
        f"udp flood: {sent.sent} datagrams in {sent.seconds:.1f} s "
        f"({sent.sent / sent.seconds:.0f}/s) from {STRANGER}; dropped and counted: "
        f"{counters['socket_drops']} at the sockets ({overflowed} of them for a full buffer), "
        f"{counters['foreign_source']} by the forwarder; none reached the pod; the "
        f"{STREAM >> 20} MiB TCP stream arrived intact",
    )
