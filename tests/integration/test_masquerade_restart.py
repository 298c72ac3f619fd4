"""Masqueraded connections through an agent that sets its traffic rules up again, as every
start does, against the real kernel in namespaces of their own: a client namespace (a pod),
a router namespace with flannel's masquerade rules, and a server namespace behind it (the
outside) that answers whatever reaches it, translated or not.

The kernel tracks connections in a namespace only while a rule there needs it: with flannel's
masquerade rules the only ones, a chain flushed on its own and filled again a moment later
leaves the namespace without connection tracking meanwhile, and a reply that arrives then is
not translated back: the router's own stack answers it with a reset. The rules are replaced in
one transaction instead, and the connections never notice.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import IPv4Network

import pytest

from pyflannel_runtime.connectivity import responder
from pyflannel_runtime.connectivity.disruption import Path, Row, Target
from pyflannel_runtime.firewall import CommandRunner
from pyflannel_runtime.firewall.iptables import IPTablesManager
from pyflannel_runtime.ops import connectivity, disruption

pytestmark = pytest.mark.root

NETWORK, SUBNET = IPv4Network("10.244.0.0/16"), IPv4Network("10.244.1.0/24")
POD, ROUTER_POD_SIDE = "10.244.1.2", "10.244.1.1"
ROUTER, OUTSIDE = "192.0.2.1", "192.0.2.2"
PORT = 7472
SETUPS = 15  # agent starts, one after the other, under the connection


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class Topology:
    pod: str
    router: str
    outside: str
    probe: str
    responder_pid: int = 0


@pytest.fixture
def topology() -> Iterator[Topology]:
    tag = secrets.token_hex(3)
    made = Topology(f"pyft-mp-{tag}", f"pyft-mr-{tag}", f"pyft-mo-{tag}", f"pyft-masq-{tag}")
    for netns in (made.pod, made.router, made.outside):
        ip("netns", "add", netns)
    try:
        for netns, here, port, there in (
            (made.pod, POD, "topod", ROUTER_POD_SIDE),
            (made.outside, OUTSIDE, "toout", ROUTER),
        ):
            ip("-n", netns, "link", "add", "eth0", "type", "veth", "peer", "name", port,
               "netns", made.router)  # fmt: skip
            ip("-n", netns, "addr", "add", f"{here}/24", "dev", "eth0")
            ip("-n", made.router, "addr", "add", f"{there}/24", "dev", port)
            for ns, dev in ((netns, "eth0"), (made.router, port), (netns, "lo")):
                ip("-n", ns, "link", "set", dev, "up")
        ip("-n", made.pod, "route", "add", "default", "via", ROUTER_POD_SIDE)
        # The outside can answer a packet that left untranslated, as a remote node can
        # answer the host's: with a reset, when it belongs to no connection it knows.
        ip("-n", made.outside, "route", "add", str(NETWORK), "via", ROUTER)
        subprocess.run(["ip", "netns", "exec", made.router, "sysctl", "-qw",
                        "net.ipv4.ip_forward=1"], check=True)  # fmt: skip
        ready = responder.launch(
            ["--outside", f"{OUTSIDE}:{PORT}", "--lifetime", "120"],
            prefix=["ip", "netns", "exec", made.outside],
        )
        made.responder_pid = int(ready["pid"])
        yield made
    finally:
        disruption.stop(made.probe)
        if made.responder_pid and connectivity.runs(made.responder_pid, responder.MODULE):
            subprocess.run(["kill", str(made.responder_pid)], check=False)
        for netns in (made.pod, made.router, made.outside):
            ip("netns", "delete", netns)


def open_probe(topology: Topology) -> None:
    target = Target(Path.POD_OUTSIDE, "pod", "outside", topology.pod, OUTSIDE, PORT)
    spec = {
        "name": topology.probe,
        "conflist": "/nonexistent/10-flannel.conflist",
        "bin_dir": "/nonexistent",
        "lifetime": 120,
        "targets": [target.as_dict()],
    }
    announced = responder.launch([json.dumps(spec)], module=disruption.MODULE, timeout=60)
    with open(disruption.pid_file(topology.probe), "w") as handle:
        handle.write(f"{announced['pid']}\n")
    (row,) = [Row.of(r) for r in announced["rows"]]
    assert row.report.up, row


def test_masqueraded_connections_outlive_the_rules_set_up_again(topology: Topology) -> None:
    runner = CommandRunner.in_netns(topology.router)

    async def start() -> None:
        await IPTablesManager(runner).setup_masq(NETWORK, SUBNET)

    asyncio.run(start())
    open_probe(topology)
    time.sleep(1)
    (before,) = [Row.of(r) for r in disruption.check(topology.probe)]
    assert before.report.up and before.report.echoed > 0, before
    for _ in range(SETUPS):
        asyncio.run(start())  # what each agent start does, with the rules in place
        time.sleep(0.15)
    (after,) = [Row.of(r) for r in disruption.check(topology.probe)]
    assert after.report.resets == 0 and after.report.lost == 0, after
    assert after.report.up and after.report.pending == 0, after
