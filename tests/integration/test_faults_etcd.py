"""Faults operators of flannel's etcd datastore meet, on agents in network namespaces around a
real etcd (docs/compatibility.md, "Leases that run out, cloned disks and a full network"):

* a node cut off from etcd for longer than its lease (flannel #29, #520): the peers drop it,
  and when it returns it takes the same subnet again, or, when another node took it meanwhile,
  shuts down with flannel's message instead of renumbering, and `pyflannel status` says why;
* cloned disks (flannel #1182, #1505): two nodes with the same subnet.env never share a subnet;
* a network with room for N subnets and N+1 agents: the last is refused with "out of subnets",
  writes no subnet.env, `pyflannel status` says why, and it takes the first subnet released
  (restarted as its supervisor restarts it; systemd's part is timed in test_site_day2.py);
* the agent's watch revision compacted away while it was disconnected: it lists again and
  converges without touching the peers that stayed.

The partitions are drops in the underlay between a host and etcd's address (AgentLab
cut_from_store); the host keeps its datapath to the other hosts. Times are printed; the bounds
asserted are the issue's (5 s for the peers to program a returning node).
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from ipaddress import IPv4Network, ip_interface

import pytest

from pyflannel_lab.netns_agents import PREFIX, AgentLab
from pyflannel_lab.netns_lab import LabHost
from pyflannel_runtime.netlink.netns import run_in_netns
from pyflannel_runtime.ops.lease import NodeLease, release_etcd
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings
from pyflannel_runtime.wire.lease import LeaseAttrs, make_subnet_key
from tests.integration.faults import (
    HANG_GUARD,
    assert_in_sync,
    kernel_deletions,
    report,
    routes_to,
    status,
    wait_routed,
    wait_until,
)
from tests.integration.scrape import samples

pytestmark = [pytest.mark.root, pytest.mark.etcd]

VXLAN = {"Type": "vxlan"}
SHORT_TTL = 6  # seconds, pyflanneld's --subnet-lease-ttl; renewed 3 s before it runs out
PEERS_PROGRAM_WITHIN = 5.0  # the bound for peers to program a returning node


def subnet_of(lab: AgentLab, host: LabHost) -> IPv4Network:
    env = lab.subnet_file(host).read_text()
    match = re.search(r"^FLANNEL_SUBNET=(\S+)$", env, re.M)
    assert match is not None, env
    return ip_interface(match.group(1)).network


def key_of(subnet: IPv4Network) -> str:
    return f"{PREFIX}/subnets/{make_subnet_key(subnet, None)}"


def holder(lab: AgentLab, subnet: IPv4Network) -> str | None:
    """The public IP the lease on `subnet` names; None when there is no such lease."""
    value = lab.etcdctl("get", "--print-value-only", key_of(subnet)).strip()
    return str(json.loads(value)["PublicIP"]) if value else None


class PingStream:
    """Pings from one pod to another every 0.2 s until stopped; counts what was lost."""

    def __init__(self, lab: AgentLab, src_pod: str, dst_ip: str) -> None:
        argv = ["ping", "-n", "-i", "0.2", "-W", "1", dst_ip]
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", src_pod, *argv], stdout=subprocess.PIPE, text=True
        )

    def stop(self) -> tuple[int, int]:
        """(sent, lost)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        out, _ = self.process.communicate(timeout=30)
        match = re.search(r"(\d+) packets transmitted, (\d+) received", out)
        assert match is not None, out
        sent, received = int(match.group(1)), int(match.group(2))
        return sent, sent - received


@contextlib.contextmanager
def ping_stream(lab: AgentLab, src_pod: str, dst_ip: str) -> Iterator[PingStream]:
    stream = PingStream(lab, src_pod, dst_ip)
    try:
        yield stream
    finally:
        if stream.process.poll() is None:
            stream.process.kill()
            stream.process.wait()


def pod(lab: AgentLab, host: LabHost, name: str) -> tuple[str, str]:
    """A pod on `host` wired by the CNI plugin: its namespace and address."""
    address = lab.add_cni_pod(host, name)
    return f"{lab.net.token}-{name}", address


# --- a node cut off for longer than its lease ------------------------------------------------


def test_a_node_cut_off_longer_than_its_lease_takes_the_same_subnet_back(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with AgentLab(VXLAN, hosts=2, prefix="pfe", lab_pods=False) as lab:
        h1, h2 = lab.net.hosts
        for host in (h1, h2):
            lab.start_agent(host, f"--subnet-lease-ttl={SHORT_TTL}")
            lab.wait_ready(host)
        subnet, env = subnet_of(lab, h1), lab.subnet_file(h1).read_text()
        pod1, ip1 = pod(lab, h1, "pod1")
        pod2, _ = pod(lab, h2, "pod2")
        wait_routed(lab, h2, subnet)
        assert lab.net.ping(pod2, ip1)

        with ping_stream(lab, pod2, ip1) as pings:
            cut = time.monotonic()
            with lab.cut_from_store(h1):
                dropped = wait_routed(lab, h2, subnet, routed=False)  # the lease ran out
                assert holder(lab, subnet) is None
                time.sleep(1)  # cut off for a while after the peers dropped it
            healed = time.monotonic()
            back = wait_routed(lab, h2, subnet)
            wait_until("pod2 reaches pod1", lambda: lab.net.ping(pod2, ip1, timeout=1))
            sent, lost = pings.stop()

        recovered = back - healed
        report(
            capsys,
            f"partition longer than the {SHORT_TTL} s lease: peers dropped the node "
            f"{dropped - cut:.1f} s into it; {recovered:.2f} s after it healed the peer routed "
            f"{subnet} again; pings pod2 -> pod1: {lost} of {sent} lost "
            f"(0.2 s apart, over {healed - cut:.1f} s cut off)",
        )
        assert recovered <= PEERS_PROGRAM_WITHIN, recovered
        # The same subnet: subnet.env, the pod's address and the agent are what they were.
        assert lab.subnet_file(h1).read_text() == env
        assert holder(lab, subnet) == str(h1.underlay_ip)
        assert lab.agents[h1.n].process.poll() is None
        assert "had expired; took the same subnet again" in lab.agents[h1.n].log()
        assert lab.net.ping(pod1, lab.add_cni_pod(h2, "pod3"))
        assert status(lab, h1).returncode == 0, status(lab, h1).stdout
        # The renewal that took the subnet back counts, and the expiry is ahead again.
        found = samples(lab.metrics(h1))
        assert found["pyflannel_lease_renewals_total"] >= 1, found
        assert found["pyflannel_own_lease_expiry_timestamp_seconds"] > time.time(), found


def test_a_node_whose_subnet_was_taken_meanwhile_shuts_down_and_says_why() -> None:
    # Room for two subnets: h3, started while h1 is cut off, can only take h1's.
    two = {"SubnetMin": "10.244.1.0", "SubnetMax": "10.244.2.0"}
    with AgentLab(VXLAN, hosts=3, prefix="pfe", lab_pods=False, net_conf=two) as lab:
        h1, h2, h3 = lab.net.hosts
        for host in (h1, h2):
            lab.start_agent(host, f"--subnet-lease-ttl={SHORT_TTL}")
            lab.wait_ready(host)
        subnet, env = subnet_of(lab, h1), lab.subnet_file(h1).read_text()
        with lab.cut_from_store(h1):
            wait_until("the lease runs out", lambda: holder(lab, subnet) is None)
            lab.start_agent(h3)
            lab.wait_ready(h3)
            assert subnet_of(lab, h3) == subnet
        agent = lab.agents[h1.n]
        assert agent.process.wait(HANG_GUARD) == 0
        log = agent.log()
        assert "Lease has been revoked. Shutting down daemon." in log, log
        assert f"and node {h3.underlay_ip} holds {subnet} now" in log, log
        # Not renumbered: h3 keeps the subnet, h1's files still name the one its pods use.
        assert holder(lab, subnet) == str(h3.underlay_ip)
        assert lab.subnet_file(h1).read_text() == env
        assert routes_to(lab, h2, subnet) and "192.0.2.13" in lab.net.bridge(
            h2.ns, "fdb", "show", "dev", "flannel.1"
        )

        shown = status(lab, h1)
        assert shown.returncode == 1, shown.stdout
        assert "Agent down" in shown.stdout
        assert "This host's lease (the agent's note, since " in shown.stdout
        assert f"node {h3.underlay_ip} holds {subnet} now" in shown.stdout, shown.stdout
        lab.agents.pop(h1.n)


# --- cloned disks ----------------------------------------------------------------------------


@pytest.mark.parametrize("lease", ["held", "expired"])
def test_cloned_disks_never_share_a_subnet(lease: str) -> None:
    """Two nodes start at once with the same subnet.env (a cloned VM image); its lease is
    still held by the original node (h1), or gone (both nodes were down longer than it)."""
    with AgentLab(VXLAN, hosts=2, prefix="pfe", lab_pods=False) as lab:
        h1, h2 = lab.net.hosts
        lab.start_agent(h1)
        lab.wait_ready(h1)
        subnet, env = subnet_of(lab, h1), lab.subnet_file(h1).read_text()
        assert lab.stop_agent(h1) == 0
        if lease == "expired":
            lab.etcdctl("del", key_of(subnet))
        lab.subnet_file(h2).parent.mkdir(parents=True, exist_ok=True)
        lab.subnet_file(h2).write_text(env)

        for host in (h1, h2):
            lab.start_agent(host)
        for host in (h1, h2):
            lab.wait_ready(host)
        subnets = {host.n: subnet_of(lab, host) for host in (h1, h2)}
        assert subnets[1] != subnets[2]
        assert subnet in subnets.values()
        if lease == "held":
            assert subnets[1] == subnet  # the first keeps it
        for host in (h1, h2):
            assert holder(lab, subnets[host.n]) == str(host.underlay_ip)
        pod1, ip1 = pod(lab, h1, "pod1")
        pod2, ip2 = pod(lab, h2, "pod2")
        wait_routed(lab, h1, subnets[2])
        wait_routed(lab, h2, subnets[1])
        assert lab.net.ping(pod1, ip2) and lab.net.ping(pod2, ip1)
        renumbered = h2 if subnets[1] == subnet else h1
        shown = status(lab, renumbered)
        assert shown.returncode == 0, shown.stdout
        assert f"this node's subnet changed from {subnet}" in shown.stdout, shown.stdout


# --- a full network ----------------------------------------------------------------------------


def test_a_full_network_refuses_the_next_agent_until_a_lease_is_released(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A /22 in /24s: flannel leaves the Network's first subnet out, so three fit.
    with AgentLab(
        VXLAN, hosts=4, prefix="pfe", lab_pods=False, net_conf={"Network": "10.244.0.0/22"}
    ) as lab:
        for host in lab.net.hosts:
            lab.start_agent(host)
        exits = {}
        for host in lab.net.hosts:
            agent = lab.agents[host.n]
            wait_until(
                f"{host.ns} ready or gone",
                lambda a=agent, h=host: (
                    a.process.poll() is not None  # type: ignore[misc]
                    or lab.http_status(h, "/readyz") == 200
                ),
            )
            exits[host.n] = agent.process.poll()
        refused = [host for host in lab.net.hosts if exits[host.n] is not None]
        assert len(refused) == 1, exits
        (last,) = refused
        placed = [host for host in lab.net.hosts if host is not last]
        subnets = {subnet_of(lab, host) for host in placed}
        assert subnets == {IPv4Network(f"10.244.{n}.0/24") for n in (1, 2, 3)}
        assert exits[last.n] == 1
        log = lab.agents.pop(last.n).log()
        assert "Error registering network: failed to acquire lease: out of subnets" in log, log
        assert not lab.subnet_file(last).exists()

        shown = status(lab, last)
        assert shown.returncode == 1, shown.stdout + shown.stderr
        assert "Agent down" in shown.stdout
        assert "this node holds no lease: failed to acquire lease: out of subnets" in shown.stdout

        # One node leaves: stopped, its lease released as remove-node.yml does.
        gone = placed[0]
        freed = subnet_of(lab, gone)
        assert lab.stop_agent(gone) == 0
        assert lab.etcd is not None
        store = EtcdSettings(endpoints=(lab.etcd.endpoint,), prefix=PREFIX)
        node = NodeLease(public_ip=gone.underlay_ip)
        released = run_in_netns(lab.net.ul, lambda: release_etcd(store, node, check=False))
        assert released.changed, released
        # Its supervisor starts it again (systemd: RestartSec later), and it takes the subnet.
        started = time.monotonic()
        lab.start_agent(last)
        lab.wait_ready(last)
        report(
            capsys,
            f"full network: the refused agent, started again, held {freed} "
            f"{time.monotonic() - started:.1f} s later",
        )
        assert subnet_of(lab, last) == freed
        assert "this node holds no lease" not in status(lab, last).stdout


# --- a compacted watch revision ----------------------------------------------------------------


def test_a_watch_revision_compacted_while_disconnected_is_listed_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with AgentLab(VXLAN, hosts=2, prefix="pfe", lab_pods=False) as lab:
        h1, h2 = lab.net.hosts
        lab.start_all()
        stays = IPv4Network("10.244.200.0/24")
        leaves = IPv4Network("10.244.201.0/24")
        joins = IPv4Network("10.244.202.0/24")
        for subnet, n in ((stays, 200), (leaves, 201)):
            peer_lease(lab, subnet, n)
        peer2 = subnet_of(lab, h2)
        for subnet in (stays, leaves, peer2):
            wait_routed(lab, h1, subnet)

        with kernel_deletions(lab, h1) as deleted:
            with lab.cut_from_store(h1, abort=True):
                lab.etcdctl("del", key_of(leaves))
                peer_lease(lab, joins, 202)
                revision = json.loads(lab.etcdctl("get", "-w", "json", key_of(joins)))
                lab.etcdctl("compact", str(revision["header"]["revision"]))
                time.sleep(1)
            healed = time.monotonic()
            wait_routed(lab, h1, leaves, routed=False)
            done = wait_routed(lab, h1, joins)

        log = lab.agents[h1.n].log()
        assert "required revision has been compacted" in log and "re-listing" in log, log
        # The peers that stayed were never withdrawn; only the one that left was deleted.
        stayed = [str(stays.network_address), "192.0.2.200 ", str(peer2.network_address)]
        stayed.append(f"{h2.underlay_ip} ")
        assert not [line for line in deleted for mark in stayed if mark in line], deleted
        assert sorted(deleted) == sorted(line for line in deleted if "201" in line), deleted
        assert len(deleted) == 3, deleted  # the leaver's route, neighbour and FDB entry
        assert_in_sync(lab, h1, leases=4)
        restarts = samples(lab.metrics(h1))
        reason = 'pyflannel_datastore_watch_restarts_total{reason="%s"}'
        assert restarts[reason % "compacted"] >= 1 and restarts[reason % "error"] >= 1, restarts
        report(
            capsys,
            f"watch revision compacted while disconnected: converged {done - healed:.1f} s "
            f"after reconnecting; kernel deletions: {len(deleted)} (the peer that left)",
        )


def peer_lease(lab: AgentLab, subnet: IPv4Network, n: int) -> None:
    """A vxlan peer's lease, as a node at 192.0.2.<n> would hold it."""
    attrs = LeaseAttrs.from_json(
        json.dumps(
            {
                "PublicIP": f"192.0.2.{n}",
                "PublicIPv6": None,
                "BackendType": "vxlan",
                "BackendData": {"VNI": 1, "VtepMAC": f"02:00:00:00:00:{n:02x}"},
            }
        ).encode()
    )
    lab.etcdctl("put", key_of(subnet), attrs.to_json())
