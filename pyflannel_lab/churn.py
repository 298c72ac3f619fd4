"""Lease churn against one agent: thousands of vxlan peers in a real etcd, changed at a steady
rate (new peers, peers leaving, peers changing their VTEP MAC) while the agent keeps its
kernel in step. bench/bench_churn.py runs it for ten minutes and measures (RSS, open file
descriptors, event-to-kernel latency); tests/integration/test_churn.py runs it for a minute
and checks the end state.

The lab is an AgentLab with one host (netns_agents.py) whose network is 10.244.0.0/16 in /29
subnets, so 5 000 peers fit, and whose own lease is the reservation 10.244.0.8/29. Peer keys
live on one etcd lease, as flanneld's keys live on etcd leases. The churn runs in the underlay
namespace, where etcd listens, with the agent's own etcd client.

A peer is only removed or changed once its last change is `settle` seconds old, and a subnet
freed by a removal is only given out again as long after, so that each change reaches the
kernel as such: the agent coalesces changes that follow each other closely (a peer added and
removed within a few milliseconds never reaches the kernel at all, rightly), which would leave
nothing to time.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
import subprocess
import time
from base64 import b64encode
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from typing import Literal, TypeVar

from pyflannel_lab.netns_agents import PREFIX, AgentLab
from pyflannel_runtime.netlink.netns import run_in_netns
from pyflannel_runtime.subnet.etcd.client import Endpoint, EtcdClient
from pyflannel_runtime.wire.lease import LeaseAttrs, make_subnet_key
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data

NETWORK = IPv4Network("10.244.0.0/16")
SUBNET_LEN = 29
OWN_SUBNET = IPv4Network("10.244.0.8/29")  # the first subnet is below flannel's SubnetMin
# Peers' public IPs: never the host's own 192.0.2.11, or etcd would hand it a peer's lease.
PUBLICS = [IPv4Address(f"{net}.{i}") for net in ("198.51.100", "203.0.113") for i in range(2, 255)]
RECONCILE_INTERVAL = 10  # flanneld's resync period, pyflanneld's default
_TXN_PUTS = 100  # puts per transaction when loading

T = TypeVar("T")
OpKind = Literal["add", "remove", "change"]


@dataclass(frozen=True)
class Op:
    """One change, as the churn sent it."""

    sent: float  # time.time() when the request went out
    kind: OpKind
    subnet: IPv4Network
    mac: str  # the VtepMAC the peer holds after it ("" when removed)


def mac_of(n: int) -> str:
    return f"0a:58:{n >> 24 & 0xFF:02x}:{n >> 16 & 0xFF:02x}:{n >> 8 & 0xFF:02x}:{n & 0xFF:02x}"


def peer_attrs(n: int, mac: str) -> LeaseAttrs:
    return LeaseAttrs(PUBLICS[n % len(PUBLICS)], None, "vxlan", vxlan_backend_data(1, mac))


def lease_key(subnet: IPv4Network) -> bytes:
    return f"{PREFIX}/subnets/{make_subnet_key(subnet, None)}".encode()


class LeaseChurn:
    """The peers' leases as etcd holds them once every change sent has been applied, and the
    changes that keep them moving."""

    def __init__(self, peers: int, *, settle: float = 2.0, seed: int = 25) -> None:
        subnets = [s for s in NETWORK.subnets(new_prefix=SUBNET_LEN) if s > OWN_SUBNET]
        if not 0 < peers < len(subnets):
            raise ValueError(f"1 to {len(subnets) - 1} peers, to leave room for new ones")
        self._rng = random.Random(seed)
        self._macs = itertools.count()
        self._settle = settle
        self.free = subnets[peers:]
        self._cooling: deque[tuple[float, IPv4Network]] = deque()  # freed, and when
        self.peers: dict[IPv4Network, str] = {}  # subnet -> VtepMAC
        self._attrs: dict[IPv4Network, LeaseAttrs] = {}
        self._touched: dict[IPv4Network, float] = {}
        for subnet in subnets[:peers]:
            self._assign(subnet, 0.0)
        self._lease_id = 0

    def _assign(self, subnet: IPv4Network, now: float) -> str:
        n = next(self._macs)
        mac = mac_of(n)
        self.peers[subnet] = mac
        self._attrs[subnet] = peer_attrs(n, mac)
        self._touched[subnet] = now
        return mac

    async def load(self, client: EtcdClient) -> None:
        """Put every peer's lease, in transactions, on one etcd lease of 24 h."""
        self._lease_id, _ = await client.grant(86400)
        items = list(self._attrs.items())
        for start in range(0, len(items), _TXN_PUTS):
            puts = [
                {"request_put": self._put(subnet, attrs)}
                for subnet, attrs in items[start : start + _TXN_PUTS]
            ]
            await client.call("/v3/kv/txn", {"compare": [], "success": puts})

    def _put(self, subnet: IPv4Network, attrs: LeaseAttrs) -> dict[str, str]:
        return {
            "key": b64encode(lease_key(subnet)).decode(),
            "value": b64encode(attrs.to_json().encode()).decode(),
            "lease": str(self._lease_id),
        }

    def _settled(self, now: float) -> IPv4Network | None:
        """A random peer whose last change is old enough; None when none is."""
        subnets = list(self.peers)
        for _ in range(20):
            subnet = self._rng.choice(subnets)
            if now - self._touched[subnet] >= self._settle:
                return subnet
        return None

    def next_op(self, now: float) -> Op:
        """The next change (applied to this view at once): a third each adds, removes and
        changes, so the number of peers wanders around where it started."""
        while self._cooling and now - self._cooling[0][0] >= self._settle:
            self.free.append(self._cooling.popleft()[1])
        kind: OpKind = self._rng.choice(("add", "remove", "change"))
        if kind == "add" and not self.free:
            kind = "remove"
        subnet = None if kind == "add" else self._settled(now)
        if subnet is None:
            if not self.free:
                raise RuntimeError("no subnet free and no peer settled: too fast for the network")
            subnet = self.free.pop(self._rng.randrange(len(self.free)))
            return Op(time.time(), "add", subnet, self._assign(subnet, now))
        if kind == "remove":
            del self.peers[subnet], self._attrs[subnet], self._touched[subnet]
            self._cooling.append((now, subnet))
            return Op(time.time(), kind, subnet, "")
        return Op(time.time(), kind, subnet, self._assign(subnet, now))

    async def _send(self, client: EtcdClient, op: Op, attrs: LeaseAttrs | None) -> None:
        key = lease_key(op.subnet)
        if attrs is None:
            await client.delete(key)
        else:
            await client.put(key, attrs.to_json().encode(), self._lease_id)

    async def run(
        self,
        client: EtcdClient,
        rate: float,
        seconds: float,
        on_tick: Callable[[float], None] | None = None,
    ) -> list[Op]:
        """Send `rate` changes a second for `seconds`, on schedule (each request is sent on
        its tick, whether the earlier ones have been answered or not); `on_tick(elapsed)` is
        called about once a second. The changes sent, once all are answered."""
        loop = asyncio.get_running_loop()
        ops: list[Op] = []
        pending: set[asyncio.Task[None]] = set()
        start = loop.time()
        ticked = 0
        for n in itertools.count():
            due = start + n / rate
            if due - start >= seconds:
                break
            await asyncio.sleep(max(0.0, due - loop.time()))
            op = self.next_op(loop.time())
            ops.append(op)
            attrs = None if op.kind == "remove" else self._attrs[op.subnet]
            task = asyncio.create_task(self._send(client, op, attrs))
            pending.add(task)
            task.add_done_callback(pending.discard)
            if on_tick is not None and int(due - start) > ticked:
                ticked = int(due - start)
                on_tick(due - start)
        await asyncio.gather(*pending)
        return ops


# --- the lab ------------------------------------------------------------------------------


def configure(lab: AgentLab) -> None:
    """The cluster config for thousands of /29 peers and the host's own reservation."""
    host = lab.net.hosts[0]
    config = {"Network": str(NETWORK), "SubnetLen": SUBNET_LEN, "Backend": {"Type": "vxlan"}}
    lab.etcdctl("put", f"{PREFIX}/config", json.dumps(config))
    lab.etcdctl("del", lab.lease_key(host))
    own = LeaseAttrs(public_ip=host.underlay_ip).to_json()
    lab.etcdctl("put", f"{PREFIX}/subnets/{make_subnet_key(OWN_SUBNET, None)}", own)


def with_etcd(lab: AgentLab, work: Callable[[EtcdClient], Awaitable[T]]) -> T:
    """Run `work(client)` (a coroutine function) with an etcd client in the underlay, where
    etcd listens; blocks until it is done."""
    assert lab.etcd is not None
    endpoint = Endpoint(lab.etcd.host, lab.etcd.client_port)

    async def session() -> T:
        client = EtcdClient(endpoint, timeout=30.0)
        try:
            return await work(client)
        finally:
            await client.close()

    return run_in_netns(lab.net.ul, lambda: asyncio.run(session()))


@dataclass(frozen=True)
class ProcessFacts:
    rss_kib: int
    fds: int


def process_facts(pid: int) -> ProcessFacts:
    """The agent's resident memory (VmRSS) and open file descriptors."""
    with open(f"/proc/{pid}/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return ProcessFacts(rss, len(os.listdir(f"/proc/{pid}/fd")))


def in_sync(lab: AgentLab, leases: int) -> bool:
    """`pyflannel status` on the lab's host finds every peer of `leases` programmed and
    nothing stale."""
    shown = subprocess.run(
        lab.status_argv(lab.net.hosts[0]), capture_output=True, text=True, timeout=120
    )
    return f"{leases} leases, {leases - 1} peers programmed, 0 missing, 0 stale" in shown.stdout


@dataclass(frozen=True)
class KernelEntries:
    """flannel.1's peer entries: routes, neighbours (address -> VtepMAC), FDB VtepMACs."""

    routes: set[IPv4Network]
    neighbours: dict[str, str]
    fdb: set[str]


def entries_for(peers: dict[IPv4Network, str]) -> KernelEntries:
    """What flannel.1 holds when it holds exactly `peers` (subnet -> VtepMAC)."""
    neighbours = {str(subnet.network_address): mac for subnet, mac in peers.items()}
    return KernelEntries(set(peers), neighbours, set(peers.values()))


def kernel_entries(lab: AgentLab, host: int = 0) -> KernelEntries:
    """What flannel.1 holds on the lab's host (the `host`-th)."""
    ns = lab.net.hosts[host].ns
    routes = {
        IPv4Network(line.split()[0])
        for line in lab.net.ip(ns, "route", "show", "dev", "flannel.1").splitlines()
        if " via " in line
    }
    shown = lab.net.ip(ns, "neigh", "show", "dev", "flannel.1")
    neighbours = dict(re.findall(r"^(\S+) lladdr (\S+)", shown, re.M))
    fdb = lab.net.bridge(ns, "fdb", "show", "dev", "flannel.1").splitlines()
    return KernelEntries(routes, neighbours, {line.split()[0] for line in fdb if " dst " in line})
