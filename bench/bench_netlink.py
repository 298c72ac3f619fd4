"""Program 5 000 synthetic vxlan peers (15 000 entries) two ways, in fresh namespaces:

* ours: the vxlan backend (hand-packed messages, batched over one netlink socket);
* iproute2: `ip -batch` for neighbours and routes, `bridge -batch` for the FDB, in flannel's
  order (neighbours, FDB, routes), the fastest the C tools can do.

Then no-change reconciles (dump + diff) must write nothing; their median time is reported, and
the kernel dump's share of it. Run as root:
    .venv/bin/python bench/bench_netlink.py [--peers 5000]

Peer public IPs cycle through the three TEST-NET ranges (762 addresses); each peer still has
its own MAC, subnet and gateway, which is what the kernel's cost depends on.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import subprocess
import tempfile
import time
from ipaddress import IPv4Address, IPv4Network

from sigterm import interrupt_on_sigterm

from pyflannel_runtime.backend import registry
from pyflannel_runtime.netdev.types import ExternalInterface
from pyflannel_runtime.netlink.dump import Ownership, open_dump_socket, read_owned_state
from pyflannel_runtime.wire.lease import EventType, Lease, LeaseAttrs, LeaseEvent
from pyflannel_runtime.wire.netconf import NetworkConfig, check_network_config
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data as backend_data

NETWORK = IPv4Network("10.244.0.0/16")
SUBNET_LEN = 29  # 8 192 subnets: room for 5 000 peers
OWN_IP = IPv4Address("192.0.2.1")
TEST_NETS = ("192.0.2", "198.51.100", "203.0.113")


def sh(*argv: str, stdin: str | None = None) -> str:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def make_host(ns: str) -> int:
    sh("ip", "netns", "add", ns)
    sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p")
    sh("ip", "-n", ns, "addr", "add", f"{OWN_IP}/24", "dev", "eth0")
    sh("ip", "-n", ns, "link", "set", "eth0", "up")
    sh("ip", "-n", ns, "link", "set", "eth0p", "up")
    return int(sh("ip", "-n", ns, "-o", "link", "show", "eth0").split(":", 1)[0])


def peer_leases(count: int) -> list[Lease]:
    subnets = NETWORK.subnets(new_prefix=SUBNET_LEN)
    next(subnets)  # the own one
    publics = [IPv4Address(f"{net}.{i}") for net in TEST_NETS for i in range(2, 256)]
    leases = []
    for n in range(count):
        mac = f"0a:58:{n >> 16 & 0xFF:02x}:{n >> 8 & 0xFF:02x}:{n & 0xFF:02x}:00"
        attrs = LeaseAttrs(publics[n % len(publics)], None, "vxlan", backend_data(1, mac))
        leases.append(Lease(next(subnets), None, attrs))
    return leases


RECONCILES = 3


async def ours(ns: str, ifindex: int, peers: list[Lease]) -> tuple[float, float, float, int, int]:
    config = check_network_config(
        NetworkConfig(
            network=NETWORK, subnet_len=SUBNET_LEN, backend_type="vxlan", backend={"Type": "vxlan"}
        )
    )
    ext = ExternalInterface("eth0", ifindex, 1500, OWN_IP, None, OWN_IP, None)

    async def acquire(attrs: LeaseAttrs) -> Lease:
        return Lease(IPv4Network(f"10.244.0.0/{SUBNET_LEN}"), None, attrs)

    network = await registry.create("vxlan", netns=ns).register_network(config, ext, acquire)
    try:
        start = time.perf_counter()
        await network.handle_events([LeaseEvent(EventType.ADDED, lease) for lease in peers])
        programmed = time.perf_counter() - start
        first = await network.reconcile(peers)
        times, writes = [], []
        for _ in range(RECONCILES):
            start = time.perf_counter()
            writes.append(await network.reconcile(peers))
            times.append(time.perf_counter() - start)
        dump_time = dump_only(ns, network.ownership())
    finally:
        await network.close()
    return programmed, statistics.median(times), dump_time, first, max(writes)


def dump_only(ns: str, ownership: Ownership) -> float:
    """The reconcile's kernel read alone (the raw dumps and their decoding), best of three."""
    sock = open_dump_socket(ns)
    try:
        times = []
        for _ in range(RECONCILES):
            start = time.perf_counter()
            read_owned_state(sock, ownership)
            times.append(time.perf_counter() - start)
    finally:
        sock.close()
    return min(times)


def iproute2(ns: str, peers: list[Lease]) -> float:
    sh("ip", "-n", ns, "link", "add", "flannel.1", "address", "0a:58:ff:ff:ff:00", "mtu", "1450",
       "type", "vxlan", "id", "1", "dev", "eth0", "local", str(OWN_IP), "nolearning")  # fmt: skip
    sh("ip", "-n", ns, "addr", "add", "10.244.0.0/32", "dev", "flannel.1")
    sh("ip", "-n", ns, "link", "set", "flannel.1", "up")
    neighs, fdbs, routes = [], [], []
    for lease in peers:
        assert lease.subnet is not None
        gw = lease.subnet.network_address
        mac = lease.attrs.backend_data.split('"VtepMAC":"')[1][:17]  # type: ignore[union-attr]
        neighs.append(f"neigh replace {gw} lladdr {mac} dev flannel.1 nud permanent")
        fdbs.append(f"fdb replace {mac} dev flannel.1 dst {lease.attrs.public_ip} self permanent")
        routes.append(f"route replace {lease.subnet} via {gw} dev flannel.1 onlink")
    with tempfile.TemporaryDirectory(prefix="pdp-bench-") as tmp:
        files = []
        for name, lines in (("neigh", neighs), ("fdb", fdbs), ("route", routes)):
            path = f"{tmp}/{name}"
            with open(path, "w") as handle:
                handle.write("\n".join(lines) + "\n")
            files.append(path)
        start = time.perf_counter()
        sh("ip", "-n", ns, "-batch", files[0])
        sh("bridge", "-n", ns, "-batch", files[1])
        sh("ip", "-n", ns, "-batch", files[2])
        elapsed = time.perf_counter() - start
    counts = (
        len(
            sh("ip", "-n", ns, "neigh", "show", "dev", "flannel.1", "nud", "permanent").splitlines()
        ),
        len(sh("bridge", "-n", ns, "fdb", "show", "dev", "flannel.1").splitlines()),
        len(sh("ip", "-n", ns, "route", "show", "dev", "flannel.1").splitlines()),
    )
    assert counts == (len(peers),) * 3, counts
    return elapsed


def main() -> None:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, default=5000)
    args = parser.parse_args()
    token = f"pdp-bench-{secrets.token_hex(3)}"
    ns_ours, ns_ip = f"{token}-ours", f"{token}-ip"
    created: list[str] = []
    try:
        peers = peer_leases(args.peers)
        created.append(ns_ours)
        ifindex = make_host(ns_ours)
        created.append(ns_ip)
        make_host(ns_ip)
        programmed, reconcile_time, dump_time, first, second = asyncio.run(
            ours(ns_ours, ifindex, peers)
        )
        ip_time = iproute2(ns_ip, peers)
    finally:
        for ns in created:
            subprocess.run(["ip", "netns", "del", ns], check=False)
    entries = 3 * args.peers
    print(f"peers: {args.peers} ({entries} entries)")
    print(f"ours (batched netlink): {programmed:.3f} s ({entries / programmed:,.0f} ops/s)")
    print(f"ip -batch + bridge -batch: {ip_time:.3f} s ({entries / ip_time:,.0f} ops/s)")
    print(f"no-change reconcile (dump + diff), median of {RECONCILES}: {reconcile_time:.3f} s")
    print(f"  of which the kernel dump and its decoding: {dump_time:.3f} s")
    print(f"reconcile writes after programming: {first}, then at most: {second}")
    print(f"no_change_reconcile_s: {reconcile_time:.3f}")
    print(f"no_change_reconcile_writes: {second}")
    print(f"ratio_vs_ip_batch: {programmed / ip_time:.2f}")


if __name__ == "__main__":
    main()
