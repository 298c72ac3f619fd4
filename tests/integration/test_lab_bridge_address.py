"""The labs' underlay bridges keep their own address when a port joins later.

A Linux bridge without an address of its own takes its ports' lowest, so a port added later (the
flood test's outsider, a node added to the podman lab) could change the address that the hosts'
neighbour entries hold for the bridge's IP (etcd's, the Node API's, the hosts' gateway), and
their traffic to it would go nowhere until those entries expired.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from ipaddress import IPv4Network
from pathlib import Path

import pytest

from pyflannel_lab.netns_lab import NetLab
from pyflannel_lab.underlay import gateway, host_mac

pytestmark = [pytest.mark.root]

LOWEST_MAC = "00:00:00:00:00:02"  # below any address a bridge would hold


def link_mac(ns: str, name: str) -> str:
    shown = subprocess.run(
        ["ip", "-n", ns, "-br", "link", "show", name], capture_output=True, text=True, check=True
    )
    return shown.stdout.split()[2]


def join_a_low_port(ns: str, bridge: str) -> None:
    subprocess.run(
        ["ip", "-n", ns, "link", "add", "vlow", "address", LOWEST_MAC, "type", "veth",
         "peer", "name", "vlow-peer"],
        check=True,
    )  # fmt: skip
    subprocess.run(["ip", "-n", ns, "link", "set", "vlow", "master", bridge, "up"], check=True)


def test_the_netns_labs_bridge_keeps_its_address() -> None:
    with NetLab(prefix="pbm", hosts=1, pods=False) as lab:
        before = link_mac(lab.ul, "br-ul")
        join_a_low_port(lab.ul, "br-ul")
        assert link_mac(lab.ul, "br-ul") == before


def test_the_podman_labs_bridge_keeps_its_address() -> None:
    ns = f"pbm-{secrets.token_hex(3)}"
    slot = IPv4Network("198.51.100.0/26")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        # create_bridge works on the namespace it runs in: here a scratch one.
        subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c",
             "from ipaddress import IPv4Network\n"
             "from pyflannel_lab.underlay import create_bridge\n"
             f"create_bridge('plabtest', IPv4Network('{slot}'))"],
            cwd=Path(__file__).resolve().parents[2],  # the lab runs from the checkout
            check=True,
        )  # fmt: skip
        join_a_low_port(ns, "plabtest")
        assert link_mac(ns, "plabtest") == host_mac(gateway(slot))
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True)
