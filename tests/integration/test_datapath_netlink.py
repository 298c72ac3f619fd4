"""The batched sender and the dumps against a real kernel (one fresh namespace)."""

from __future__ import annotations

import errno
import secrets
import subprocess
from collections.abc import Iterator
from ipaddress import ip_address, ip_network

import pytest

from pyflannel_runtime.netlink.batch import BatchSender
from pyflannel_runtime.netlink.dump import Ownership, owned_state
from pyflannel_runtime.netlink.entries import Action, DatapathState, Fdb, Neigh, Op, Route
from pyflannel_runtime.netlink.netns import iproute

pytestmark = pytest.mark.root


def ip(ns: str, *args: str) -> str:
    return subprocess.run(
        ["ip", "-n", ns, *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def ns() -> Iterator[str]:
    name = f"pdp-{secrets.token_hex(3)}-nl"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        ip(name, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p")
        ip(name, "addr", "add", "192.0.2.11/24", "dev", "eth0")
        ip(name, "link", "set", "eth0", "up")
        ip(name, "link", "add", "flannel.1", "type", "vxlan", "id", "1", "dev", "eth0",
           "local", "192.0.2.11", "dstport", "8472", "nolearning")  # fmt: skip
        ip(name, "link", "set", "flannel.1", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def ifindex(ns: str, dev: str) -> int:
    return int(ip(ns, "-o", "link", "show", dev).split(":", 1)[0])


def test_batch_maps_failures_to_their_op_and_dump_reads_back_the_rest(ns: str) -> None:
    dev, eth0 = ifindex(ns, "flannel.1"), ifindex(ns, "eth0")
    good = [
        Neigh(dev, ip_address("10.244.2.0"), "0a:58:0a:f4:02:00"),
        Fdb(dev, "0a:58:0a:f4:02:00", ip_address("192.0.2.12")),
        Route(ip_network("10.244.2.0/24"), ip_address("10.244.2.0"), dev, onlink=True),
        Route(ip_network("10.244.3.0/24"), ip_address("192.0.2.13"), eth0),
    ]
    bad = Route(ip_network("10.244.4.0/24"), ip_address("10.244.4.0"), 9999, onlink=True)
    gone = Route(ip_network("10.244.5.0/24"), None, dev)
    sender = BatchSender.open(ns, batch_size=3)  # several datagrams, failure in the middle
    try:
        failures = sender.send(
            [Op(Action.REPLACE, e) for e in good[:2]]
            + [Op(Action.REPLACE, bad), Op(Action.DELETE, gone)]
            + [Op(Action.REPLACE, e) for e in good[2:]]
        )
    finally:
        sender.close()
    assert [(f.op.entry, f.errno) for f in failures] == [(bad, errno.ENODEV)]
    ownership = Ownership(frozenset({dev}), (ip_network("10.244.0.0/16"),))
    with iproute(ns) as ipr:
        assert owned_state(ipr, ownership) == DatapathState.of(good)
    assert "10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink" in ip(ns, "route")


def test_sockets_are_opened_inside_the_namespace(ns: str) -> None:
    with iproute(ns) as ipr:
        names = {link.get("ifname") for link in ipr.get_links()}
    assert names == {"lo", "eth0", "eth0p", "flannel.1"}
    sender = BatchSender.open(ns)
    try:
        route = Route(ip_network("10.244.7.0/24"), ip_address("192.0.2.17"), ifindex(ns, "eth0"))
        assert sender.send([Op(Action.REPLACE, route)]) == []
    finally:
        sender.close()
    assert "10.244.7.0/24 via 192.0.2.17 dev eth0" in ip(ns, "route")
