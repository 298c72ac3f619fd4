"""pyflanneld end to end: real etcd, agents in host namespaces, pods pinging across
(docs/compatibility.md, "Flags, environment and exit codes")."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network

import pytest

from pyflannel_lab.netns_agents import HEALTHZ_PORT, PREFIX, AgentLab
from pyflannel_lab.netns_lab import LabHost
from pyflannel_runtime import __version__
from pyflannel_runtime.wire.lease import LeaseAttrs, make_subnet_key
from tests.integration.faults import kernel_changes
from tests.integration.scrape import promtool_problems, samples

pytestmark = [pytest.mark.root, pytest.mark.etcd]

BACKENDS = {"vxlan": {"Type": "vxlan"}, "host-gw": {"Type": "host-gw"}, "udp": {"Type": "udp"}}
POD_MTU = {"vxlan": 1450, "host-gw": 1500, "udp": 1472}
PING_DEADLINE_S = 60  # seconds; reached only if replies stop altogether


def kernel_datapath(lab: AgentLab) -> None:
    """udp forwards in the agent's own processes, so (as with flanneld) it stops with them."""
    if lab.backend["Type"] == "udp":
        pytest.skip("the udp datapath does not outlive the agent")


def per_peer_routes(lab: AgentLab) -> None:
    if lab.backend["Type"] == "udp":
        pytest.skip("udp routes the whole network to flannel0, with no per-peer kernel entries")


@pytest.fixture(params=sorted(BACKENDS))
def lab(request: pytest.FixtureRequest) -> Iterator[AgentLab]:
    with AgentLab(BACKENDS[request.param]) as running:
        running.start_all()
        yield running


@contextlib.contextmanager
def ping_stream(
    lab: AgentLab, src: LabHost, dst: LabHost, count: int
) -> Iterator[subprocess.Popen[str]]:
    """A 10 ms ping stream from src's pod to dst's pod, killed if the test leaves it running.

    With -c alone, ping waits only twice the largest round trip after its last request, so on
    a loaded machine a late last reply counts as lost. With -w it waits for count replies,
    sending more requests while any go unanswered, so a request really lost is still reported
    as loss ("21 packets transmitted, 20 received").
    """
    deadline = ["-w", str(PING_DEADLINE_S)]
    argv = ["ping", "-n", "-q", "-i", "0.01", "-c", str(count), *deadline, str(dst.pod_ip)]
    stream = subprocess.Popen(
        ["ip", "netns", "exec", src.pod_ns, *argv], stdout=subprocess.PIPE, text=True
    )
    try:
        yield stream
    finally:
        if stream.poll() is None:
            stream.kill()
            stream.wait()


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def test_pods_reach_each_other_and_files_are_flannels(lab: AgentLab) -> None:
    reached = lab.wait_reachable()
    assert all(reached.values()), reached
    mtu = POD_MTU[lab.backend["Type"]]
    for host in lab.net.hosts:
        path = lab.subnet_file(host)
        assert path.read_text() == (
            "FLANNEL_NETWORK=10.244.0.0/16\n"
            f"FLANNEL_SUBNET=10.244.{host.n}.1/24\n"
            f"FLANNEL_MTU={mtu}\n"
            "FLANNEL_IPMASQ=true\n"
        )
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
        assert lab.http_status(host, "/healthz") == 200
        attrs = json.loads(lab.lease_value(host))
        assert attrs["PublicIP"] == str(host.underlay_ip)
        # flannel's udp backend advertises no backend type.
        assert attrs.get("BackendType") == (
            None if lab.backend["Type"] == "udp" else lab.backend["Type"]
        )


def test_pod_mtu_crosses_exactly(lab: AgentLab) -> None:
    a, b = lab.net.hosts[0], lab.net.hosts[1]
    mtu = POD_MTU[lab.backend["Type"]]
    # The pods' veths are 1500 in the lab; clamp them to FLANNEL_MTU as the CNI bridge would.
    for host in (a, b):
        lab.net.ip(host.pod_ns, "link", "set", "eth0", "mtu", str(mtu))
    assert lab.net.ping(a.pod_ns, b.pod_ip, size=mtu - 28, dont_fragment=True)
    assert not lab.net.ping(a.pod_ns, b.pod_ip, size=mtu - 27, dont_fragment=True)


def test_sigterm_keeps_datapath_and_restart_keeps_subnet(lab: AgentLab) -> None:
    kernel_datapath(lab)
    host = lab.net.hosts[0]
    before = lab.subnet_file(host).read_text()
    assert lab.stop_agent(host, signal.SIGTERM) == 0
    assert "Exiting cleanly..." in (lab.workdir / f"{host.ns}.log").read_text()
    assert all(lab.reachability().values()), "the datapath must outlive the agent"
    lab.start_agent(host)
    assert lab.wait_ready(host) == before


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_restart_loses_no_pings(lab: AgentLab, sig: int) -> None:
    kernel_datapath(lab)
    a, b = lab.net.hosts[0], lab.net.hosts[1]
    with ping_stream(lab, a, b, count=300) as stream:
        time.sleep(0.5)
        lab.stop_agent(a, sig)
        lab.stop_agent(b, sig)
        lab.start_agent(a)
        lab.start_agent(b)
        lab.wait_ready(a)
        lab.wait_ready(b)
        out, _ = stream.communicate(timeout=PING_DEADLINE_S + 30)
    assert " 0% packet loss" in out, out


def test_deleted_own_lease_makes_the_agent_exit_zero(lab: AgentLab) -> None:
    host = lab.net.hosts[2]
    lab.etcdctl("del", lab.lease_key(host))
    agent = lab.agents.pop(host.n)
    assert agent.process.wait(15) == 0
    assert "Lease has been revoked. Shutting down daemon." in agent.log()


def test_removed_peer_is_withdrawn_everywhere(lab: AgentLab) -> None:
    per_peer_routes(lab)
    gone = lab.net.hosts[2]
    lab.stop_agent(gone, signal.SIGKILL)
    lab.etcdctl("del", lab.lease_key(gone))
    subnet = str(gone.subnet)
    for host in lab.net.hosts[:2]:
        assert wait_for(lambda h=host: subnet not in lab.net.ip(h.ns, "route", "show")), lab.net.ip(
            host.ns, "route", "show"
        )
    assert lab.net.ping(lab.net.hosts[0].pod_ns, lab.net.hosts[1].pod_ip)


def forwarder_routes(lab: AgentLab, host: LabHost) -> dict[str, str]:
    """The udp forwarder's routes on `host` (peer subnet -> "public IP:port"), from /statusz."""
    url = f"http://127.0.0.1:{HEALTHZ_PORT}/statusz"
    probe = (
        f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=5).read().decode())"
    )
    shown = json.loads(lab.net.run(host.ns, sys.executable, "-c", probe).stdout)
    routes: dict[str, str] = shown["udp"]["routes"]
    return routes


def test_peers_renewing_their_leases_withdraw_and_write_nothing(lab: AgentLab) -> None:
    """A renewal puts the same value under a new etcd lease (pyflanneld's and flanneld's
    alike): the kernel keeps every peer entry as it is (no change announced), and udp's
    forwarders keep their routes (no "Removing route"). A peer put into etcd after the
    renewals marks when the agent has handled them."""
    host, peers = lab.net.hosts[0], lab.net.hosts[1:]
    udp = lab.backend["Type"] == "udp"
    agent = lab.agents[host.n]

    def programmed(subnet: IPv4Network) -> bool:
        if udp:  # udp's routes live in the agent's forwarders, shown on its /statusz
            return str(subnet) in forwarder_routes(lab, host)
        return f"{subnet} " in lab.net.ip(host.ns, "route", "show")

    for peer in peers:
        assert wait_for(lambda p=peer: programmed(p.subnet))
    marker = IPv4Network("10.244.250.0/24")
    mac = "0e:00:00:00:00:fa"
    attrs = LeaseAttrs(
        public_ip=IPv4Address("192.0.2.250"),
        backend_type="" if udp else lab.backend["Type"],  # flannel's udp writes none
        backend_data=f'{{"VNI":1,"VtepMAC":"{mac}"}}' if lab.backend["Type"] == "vxlan" else None,
    )
    removals = agent.log().count("Removing route to")
    with kernel_changes(lab, host) as changes:
        for peer in peers:
            granted = lab.etcdctl("lease", "grant", "3600").split()[1]  # "lease <id> granted..."
            lab.etcdctl("put", f"--lease={granted}", lab.lease_key(peer), lab.lease_value(peer))
        lab.etcdctl("put", f"{PREFIX}/subnets/{make_subnet_key(marker, None)}", attrs.to_json())
        assert wait_for(lambda: programmed(marker))
    for peer in peers:  # renewed: held by an etcd lease now
        assert '"lease":' in lab.etcdctl("get", lab.lease_key(peer), "-w", "json")
    assert agent.log().count("Removing route to") == removals, agent.log()
    # Routes (both kernel backends) and vxlan's neighbours and FDB entries; not the pods' ARP,
    # nor what the kernel adds itself (a new device's IPv6 link-local routes).
    written = [
        line
        for line in changes
        if ("flannel.1" in line or "/24 " in line) and "proto kernel" not in line
    ]
    if not udp:
        assert written, changes  # the marker's entries: the monitor saw the agent write
    others = [
        line for line in written if str(marker.network_address) not in line and mac not in line
    ]
    assert others == [], changes


def test_peer_removed_while_agent_down_is_cleaned_at_start(lab: AgentLab) -> None:
    per_peer_routes(lab)
    down, gone = lab.net.hosts[0], lab.net.hosts[2]
    lab.stop_agent(down)
    lab.stop_agent(gone, signal.SIGKILL)
    lab.etcdctl("del", lab.lease_key(gone))
    assert str(gone.subnet) in lab.net.ip(down.ns, "route", "show"), "stale route expected"
    lab.start_agent(down)
    lab.wait_ready(down)
    assert wait_for(lambda: str(gone.subnet) not in lab.net.ip(down.ns, "route", "show"))
    if lab.backend["Type"] == "vxlan":
        assert str(gone.underlay_ip) not in lab.net.bridge(
            down.ns, "fdb", "show", "dev", "flannel.1"
        )
        assert str(gone.subnet.network_address) not in lab.net.ip(
            down.ns, "neigh", "show", "dev", "flannel.1"
        )


def test_deleted_vxlan_device_heals_with_all_peers(lab: AgentLab) -> None:
    if lab.backend["Type"] != "vxlan":
        pytest.skip("vxlan only")
    host = lab.net.hosts[0]
    lab.net.ip(host.ns, "link", "del", "flannel.1")
    reached = lab.wait_reachable(timeout=20)
    assert all(reached.values()), reached


def test_golden_iptables_rules_hold_while_traffic_flows(lab: AgentLab) -> None:
    host, peer = lab.net.hosts[0], lab.net.hosts[1]
    with ping_stream(lab, host, peer, count=200) as stream:
        time.sleep(1)  # the listings are taken while the stream runs through the rules
        nat_jump = [
            line
            for line in lab.net.run(
                host.ns, "iptables", "-t", "nat", "-S", "POSTROUTING"
            ).stdout.splitlines()
            if "FLANNEL" in line
        ]
        nat = lab.net.run(host.ns, "iptables", "-t", "nat", "-S", "FLANNEL-POSTRTG").stdout
        forward = lab.net.run(host.ns, "iptables", "-t", "filter", "-S", "FORWARD").stdout
        fwd = lab.net.run(host.ns, "iptables", "-t", "filter", "-S", "FLANNEL-FWD").stdout
        out, _ = stream.communicate(timeout=PING_DEADLINE_S + 30)
    s = f"10.244.{host.n}.0/24"
    assert nat_jump == ['-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG']
    assert nat == (
        "-N FLANNEL-POSTRTG\n"
        '-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN\n'
        f'-A FLANNEL-POSTRTG -s {s} -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j RETURN\n'
        f'-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d {s} -m comment --comment "flanneld masq" -j RETURN\n'
        f'-A FLANNEL-POSTRTG ! -s 10.244.0.0/16 -d {s} -m comment --comment "flanneld masq" -j RETURN\n'
        '-A FLANNEL-POSTRTG -s 10.244.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully\n'
        '-A FLANNEL-POSTRTG ! -s 10.244.0.0/16 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully\n'
    )
    assert forward == (
        '-P FORWARD ACCEPT\n-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD\n'
    )
    assert fwd == (
        "-N FLANNEL-FWD\n"
        '-A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT\n'
        '-A FLANNEL-FWD -d 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT\n'
    )
    assert " 0% packet loss" in out, out


# A peer lease put by hand: a node at this address, as a pyflannel node of the lab's backend
# would advertise it.
EXTRA_PEER = ("10.244.250.0/24", "192.0.2.250", "02:00:00:00:00:fa")
UDP_PORT = 8285
# A repair is made within a reconcile interval (1 s in the lab), an iptables rule set within
# --iptables-resync (5 s); this is a safety net on a loaded machine.
REPAIRED_WITHIN = 30.0


def extra_peer(lab: AgentLab) -> tuple[str, str]:
    """The key and value of EXTRA_PEER, copied from a lab host's lease."""
    subnet, public_ip, mac = EXTRA_PEER
    value = json.loads(lab.lease_value(lab.net.hosts[2]))
    value["PublicIP"] = public_ip
    if isinstance(value.get("BackendData"), dict) and "VtepMAC" in value["BackendData"]:
        value["BackendData"]["VtepMAC"] = mac
    return f"{PREFIX}/subnets/{subnet.replace('/', '-')}", json.dumps(value)


def test_metrics_tell_what_the_agent_holds_and_counts_what_it_does(lab: AgentLab) -> None:
    backend = lab.backend["Type"]
    host, peer = lab.net.hosts[0], lab.net.hosts[1]
    text = lab.metrics(host)
    assert promtool_problems(text) == ""
    found = samples(text)
    assert found[f'pyflannel_build_info{{backend="{backend}",version="{__version__}"}}'] == 1
    assert found["pyflannel_ready"] == 1
    assert (found["pyflannel_leases"], found["pyflannel_peers"]) == (3, 2)
    assert (found["pyflannel_peers_programmed"], found["pyflannel_leases_rejected"]) == (2, 0)
    assert found['pyflannel_subnets_free{family="ipv4"}'] == 255 - 3
    # The lab's subnets are reservations (etcd keys without a lease): nothing expires.
    assert "pyflannel_own_lease_expiry_timestamp_seconds" not in found
    events = found["pyflannel_event_to_kernel_seconds_count"]

    key, value = extra_peer(lab)
    lab.etcdctl("put", key, value)
    assert wait_for(lambda: samples(lab.metrics(host))["pyflannel_peers_programmed"] == 3)
    now = samples(lab.metrics(host))
    assert (now["pyflannel_leases"], now["pyflannel_peers"]) == (4, 3)
    assert now["pyflannel_event_to_kernel_seconds_count"] == events + 1
    assert now['pyflannel_subnets_free{family="ipv4"}'] == 255 - 4
    lab.etcdctl("del", key)

    # Someone else removes flannel's forward rule, and (kernel datapaths) a peer's entries.
    lab.net.run(host.ns, "iptables", "-D", "FORWARD", "-m", "comment", "--comment",
                "flanneld forward", "-j", "FLANNEL-FWD")  # fmt: skip
    kinds = ["rule"]
    if backend != "udp":
        lab.net.ip(host.ns, "route", "del", str(peer.subnet))
        kinds.append("route")
    if backend == "vxlan":
        gateway = str(peer.subnet.network_address)
        lab.net.ip(host.ns, "neigh", "del", gateway, "dev", "flannel.1")
        kinds.append("neighbour")

    def repaired() -> bool:
        now = samples(lab.metrics(host))
        return all(now[f'pyflannel_drift_repairs_total{{kind="{kind}"}}'] >= 1 for kind in kinds)

    assert wait_for(repaired, timeout=REPAIRED_WITHIN), lab.metrics(host)

    if backend == "udp":
        # Not IPv4, from a peer's address: a forwarding worker (another process) drops it and
        # counts it in the page the agent reads.
        probe = (
            "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"for _ in range(3): s.sendto(bytes([0x60]) + bytes(39), ('{host.underlay_ip}', {UDP_PORT}))\n"
        )
        lab.net.run(peer.ns, sys.executable, "-c", probe)
        dropped = 'pyflannel_udp_datagrams_dropped_total{reason="malformed"}'
        assert wait_for(lambda: samples(lab.metrics(host))[dropped] == 3), lab.metrics(host)
    else:
        assert str(peer.subnet) in lab.net.ip(host.ns, "route", "show")
        assert not any(name.startswith("pyflannel_udp_") for name in samples(lab.metrics(host)))


def test_metrics_off_answers_404_and_the_rest_as_before() -> None:
    with AgentLab({"Type": "host-gw"}, hosts=1, prefix="pag") as lab:
        host = lab.net.hosts[0]
        lab.start_agent(host, "--metrics=false")
        lab.wait_ready(host)
        assert lab.http_status(host, "/metrics") == 404
        assert (lab.http_status(host, "/healthz"), lab.http_status(host, "/readyz")) == (200, 200)


def test_twenty_agents_started_at_once_get_distinct_subnets() -> None:
    with AgentLab({"Type": "vxlan"}, hosts=20, prefix="pag", lab_pods=False) as lab:
        for host in lab.net.hosts:
            lab.start_agent(host)
        subnets = set()
        for host in lab.net.hosts:
            env = lab.wait_ready(host, timeout=120)
            subnets.add(
                next(line for line in env.splitlines() if line.startswith("FLANNEL_SUBNET="))
            )
        assert len(subnets) == 20, subnets
        keys = lab.etcdctl("get", "--prefix", "--keys-only", "/coreos.com/network/subnets/").split()
        assert len(keys) == 20


def test_pods_wired_by_the_cni_plugin_reach_each_other() -> None:
    with AgentLab({"Type": "vxlan"}, hosts=2, prefix="pag", lab_pods=False) as lab:
        lab.start_all()
        a, b = lab.net.hosts
        ip_a = lab.add_cni_pod(a, "cni1")
        ip_b = lab.add_cni_pod(b, "cni2")
        assert lab.net.ping(f"{lab.net.token}-cni1", ip_b)
        assert lab.net.ping(f"{lab.net.token}-cni2", ip_a)
        # The bridge the delegate built carries FLANNEL_MTU, as flannel's does.
        assert "mtu 1450" in lab.net.ip(a.ns, "link", "show", "cni0")


def test_unsupported_backend_exits_one_naming_the_supported_ones() -> None:
    with AgentLab({"Type": "wireguard"}, hosts=1, prefix="pag") as lab:
        agent = lab.start_agent(lab.net.hosts[0])
        assert agent.process.wait(60) == 1
        assert "Error fetching backend: unknown backend type: wireguard" in agent.log()
        assert "vxlan, host-gw, udp" in agent.log()
        assert not lab.subnet_file(lab.net.hosts[0]).exists()
