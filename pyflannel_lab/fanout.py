"""Many agents against one etcd: what etcd sends and spends, and when every agent has programmed.

An AgentLab of vxlan hosts without lab pods (etcd allocates every subnet), the agents' periodic
reconcile slowed to flanneld's resync period so that it does not add its own load. A host has
programmed when its kernel routes every peer's subnet through flannel.1. What etcd sends is
counted twice: on the wire (br-ul's transmit counter in the underlay, where etcd's address sits;
everything etcd sends to the hosts leaves through it) and by etcd itself
(etcd_network_client_grpc_sent_bytes_total, what its gRPC server hands its HTTP gateway, the
protobuf before JSON). etcd's CPU is its utime + stime from /proc.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

from pyflannel_lab.netns_agents import AGENT_PROGRAM, PREFIX, AgentLab
from pyflannel_lab.netns_lab import LabHost
from pyflannel_runtime.netlink.netns import run_in_netns
from pyflannel_runtime.subnet.etcd.resume import STATE_FILE_NAME
from pyflannel_runtime.wire.lease import LeaseAttrs, make_subnet_key

RECONCILE_INTERVAL = 30  # flanneld's resync period: the reconcile is not what is measured
GRPC_SENT = "etcd_network_client_grpc_sent_bytes_total"


def fanout_lab(agents: int, prefix: str = "pfo") -> AgentLab:
    return AgentLab({"Type": "vxlan"}, hosts=agents, prefix=prefix, ip_masq=False, lab_pods=False)


@dataclass(frozen=True)
class EtcdCost:
    wire_bytes: int
    grpc_bytes: int
    cpu_seconds: float

    def __sub__(self, other: EtcdCost) -> EtcdCost:
        return EtcdCost(
            self.wire_bytes - other.wire_bytes,
            self.grpc_bytes - other.grpc_bytes,
            self.cpu_seconds - other.cpu_seconds,
        )


def cpu_seconds(pid: int) -> float:
    """The process's utime + stime so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # fields 14 and 15


def etcd_cost(lab: AgentLab) -> EtcdCost:
    """What etcd has sent and spent so far."""
    assert lab.etcd is not None and lab.etcd.process is not None
    shown = json.loads(lab.net.ip(lab.net.ul, "-j", "-s", "link", "show", "br-ul"))
    wire = int(shown[0]["stats64"]["tx"]["bytes"])
    url = f"http://{lab.etcd.host}:{lab.etcd.client_port}/metrics"
    metrics = run_in_netns(lab.net.ul, lambda: urllib.request.urlopen(url, timeout=10).read())
    grpc = sum(
        float(line.split()[-1])
        for line in metrics.decode().splitlines()
        if line.startswith(GRPC_SENT)
    )
    return EtcdCost(wire, int(grpc), cpu_seconds(lab.etcd.process.pid))


def peer_routes(lab: AgentLab, host: LabHost) -> set[IPv4Network]:
    """The subnets `host`'s kernel routes through flannel.1."""
    shown = lab.net.run(host.ns, "ip", "-4", "route", "show", "dev", "flannel.1", check=False)
    return {IPv4Network(line.split()[0]) for line in shown.stdout.splitlines() if " via " in line}


def wait_programmed(lab: AgentLab, peers: int, timeout: float) -> dict[str, float]:
    """Poll every host until its kernel routes `peers` subnets through flannel.1; when each host
    was first seen so (monotonic). Raises on timeout, naming the hosts that were not."""
    pending = {host.ns: host for host in lab.net.hosts}
    done: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while pending:
        for ns, host in list(pending.items()):
            if len(peer_routes(lab, host)) >= peers:
                done[ns] = time.monotonic()
                del pending[ns]
        if not pending:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"not programmed after {timeout} s: {sorted(pending)}")
        time.sleep(0.1)
    return done


def start_agents(
    lab: AgentLab,
    spread: float = 0.0,
    program: Sequence[str] = AGENT_PROGRAM,
    cwd: Path | None = None,
) -> None:
    """Start every host's agent (`program` in `cwd`, as AgentLab.start_agent runs it), all at
    once or evenly over `spread` seconds."""
    gap = spread / len(lab.net.hosts)
    for host in lab.net.hosts:
        lab.start_agent(
            host, f"--reconcile-interval={RECONCILE_INTERVAL}", program=program, cwd=cwd
        )
        if gap:
            time.sleep(gap)


def stop_agents(lab: AgentLab, timeout: float = 60.0) -> None:
    """SIGTERM every agent at once and wait for them all: one signal each (a second one takes
    the default action, which would end an agent in the middle of its shutdown)."""
    agents = list(lab.agents.values())
    for agent in agents:
        agent.process.send_signal(signal.SIGTERM)
    for agent in agents:
        try:
            agent.process.wait(timeout)
        except subprocess.TimeoutExpired:
            agent.process.kill()
            agent.process.wait()
            raise
        finally:
            lab.agents.pop(agent.host.n)


def forget_routes(lab: AgentLab) -> None:
    """Flush flannel.1's routes on every host, as a rebooted node would come up without them,
    so that a restart shows when the peers are back."""
    for host in lab.net.hosts:
        lab.net.ip(host.ns, "route", "flush", "dev", "flannel.1")


def free_subnet(lab: AgentLab) -> IPv4Network:
    """A /24 of 10.244.0.0/16 no host holds."""
    taken = {str(peer) for peer in peer_routes(lab, lab.net.hosts[0])}
    taken |= {str(network) for network in own_subnets(lab)}
    return next(
        IPv4Network(f"10.244.{n}.0/24")
        for n in range(255, 0, -1)
        if f"10.244.{n}.0/24" not in taken
    )


def own_subnets(lab: AgentLab) -> list[IPv4Network]:
    """Every host's leased subnet, from its subnet.env."""
    subnets = []
    for host in lab.net.hosts:
        env = dict(
            line.split("=", 1) for line in lab.subnet_file(host).read_text().splitlines() if line
        )
        subnets.append(IPv4Network(env["FLANNEL_SUBNET"], strict=False))
    return subnets


def add_peer(lab: AgentLab, subnet: IPv4Network) -> None:
    """One lease change: a new vxlan peer's lease (no etcd lease: a reservation-style key)."""
    attrs = LeaseAttrs(
        public_ip=IPv4Address("192.0.2.250"),
        backend_type="vxlan",
        backend_data='{"VNI":1,"VtepMAC":"0e:00:00:00:00:fa"}',
    )
    lab.etcdctl("put", f"{PREFIX}/subnets/{make_subnet_key(subnet, None)}", attrs.to_json())


def remove_peer(lab: AgentLab, subnet: IPv4Network) -> None:
    """The peer `add_peer` made leaves; back when no host routes it any more."""
    lab.etcdctl("del", f"{PREFIX}/subnets/{make_subnet_key(subnet, None)}")
    for host in lab.net.hosts:
        deadline = time.monotonic() + 60
        while subnet in peer_routes(lab, host):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{host.ns} still routes {subnet}")
            time.sleep(0.1)


def forget_state(lab: AgentLab) -> None:
    """Remove every host's kept lease watch state, as a reboot (which empties /run) would: the
    next start lists every lease."""
    for host in lab.net.hosts:
        (lab.subnet_file(host).parent / STATE_FILE_NAME).unlink(missing_ok=True)


def agent_cpu_seconds(lab: AgentLab) -> float:
    """The running agents' utime + stime so far."""
    return sum(cpu_seconds(agent.process.pid) for agent in lab.agents.values())
