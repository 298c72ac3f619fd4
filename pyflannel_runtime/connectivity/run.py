"""Running the scenarios from one node to every other: group by group, each group's probes at
once in threads, each probe bounded by a short timeout.

The far ends are the other nodes' probe pods and hosts, as their setup announced them
(``Endpoint``): their addresses, the responder's ports, the pod MTU.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from ipaddress import IPv4Address, IPv4Network, ip_address
from typing import Any

from pyflannel_runtime.connectivity import probes
from pyflannel_runtime.connectivity.probes import Probe
from pyflannel_runtime.connectivity.scenarios import (
    BURST_DATAGRAMS,
    BURST_PAYLOAD,
    GROUPS,
    OUTSIDE,
    SCENARIOS,
    TCP_STREAM_BYTES,
    UDP_SIZES,
    Row,
    Verdict,
    combine,
)

# Short, but not so short that a loaded machine misses an answer that came.
ICMP_TRIES = 3
ICMP_INTERVAL = 0.5
MTU_WAIT = 1.0  # for the reply to a DF packet, or the frag needed that refuses it
_WORKERS = 32


@dataclass(frozen=True)
class PodEndpoint:
    name: str  # its network namespace (meaningful on its own node only)
    ip: str
    tcp_port: int
    udp_port: int
    burst_port: int


@dataclass(frozen=True)
class Endpoint:
    """One node's probe pods and host, as its setup announced them."""

    node: str
    pods: tuple[PodEndpoint, ...]
    host_address: str
    host_udp_port: int
    pod_mtu: int

    @classmethod
    def of(cls, node: str, setup: Mapping[str, Any]) -> Endpoint:
        return cls(
            node=node,
            pods=tuple(
                PodEndpoint(
                    str(p["name"]),
                    str(p["ip"]),
                    int(p["tcp_port"]),
                    int(p["udp_port"]),
                    int(p["burst_port"]),
                )
                for p in setup["pods"]
            ),
            host_address=str(setup["host"]["address"]),
            host_udp_port=int(setup["host"]["udp_port"]),
            pod_mtu=int(setup["pod_mtu"]),
        )


@dataclass(frozen=True)
class Outside:
    """An address outside the pod network, and the port of a UDP echo there (0: none)."""

    address: str
    port: int = 0

    @classmethod
    def parse(cls, text: str) -> Outside | None:
        """``ADDRESS`` or ``ADDRESS:PORT``; None for an empty text. ValueError otherwise."""
        if not text:
            return None
        address, _, port = text.partition(":")
        ip_address(address)
        return cls(address, int(port) if port else 0)


Check = Callable[[], tuple[Verdict, str, dict[str, Any]]]


@dataclass(frozen=True)
class Job:
    scenario: str
    target: str
    check: Check


def _probe_part(probe: Probe) -> tuple[bool, str]:
    return probe.ok, probe.detail


class SuiteRun:
    """The scenarios from `me` to `peers`. `local_addresses` are this host's own (a
    masqueraded packet arrives from one of them); `pod_network` is the cluster's."""

    def __init__(
        self,
        me: Endpoint,
        peers: Sequence[Endpoint],
        outside: Outside | None,
        local_addresses: Iterable[str],
        pod_network: IPv4Network,
    ) -> None:
        self.me = me
        self.peers = list(peers)
        self.outside = outside
        self.local = {str(a) for a in local_addresses}
        self.pod_network = pod_network

    @property
    def pod(self) -> PodEndpoint:
        return self.me.pods[0]

    # --- the scenarios, as jobs ----------------------------------------------------------

    def jobs(self, group: str) -> list[Job]:
        me, pod = self.me, self.pod
        jobs: list[Job] = []
        if group == "pods":
            neighbour = me.pods[1]
            jobs += [
                Job("pod-icmp-local", me.node, partial(self._icmp, pod.name, neighbour.ip)),
                Job("pod-tcp-local", me.node, partial(self._tcp, pod.name, neighbour)),
                Job("pod-udp-local", me.node, partial(self._udp_from_pod, neighbour, me.pod_mtu)),
            ]
            for peer in self.peers:
                far, mtu = peer.pods[0], min(me.pod_mtu, peer.pod_mtu)
                jobs += [
                    Job("pod-icmp", peer.node, partial(self._icmp, pod.name, far.ip)),
                    Job("pod-tcp", peer.node, partial(self._tcp, pod.name, far)),
                    Job("pod-udp", peer.node, partial(self._udp_from_pod, far, mtu)),
                ]
        elif group == "hosts":
            for peer in self.peers:
                jobs += [
                    Job("pod-host", peer.node, partial(self._pod_to_host, peer)),
                    Job("host-pod", peer.node, partial(self._host_to_pod, peer)),
                ]
        elif group == "outside":
            jobs.append(Job("pod-outside", OUTSIDE, self._pod_to_outside))
        elif group == "mtu":
            jobs += [Job("mtu", p.node, partial(self._mtu, p)) for p in self.peers]
        elif group == "checksums":
            jobs += [Job("udp-checksum", p.node, partial(self._burst, p)) for p in self.peers]
        return jobs

    def _icmp(self, netns: str | None, target: str) -> tuple[Verdict, str, dict[str, Any]]:
        probe = probes.icmp_echo(netns, target, tries=ICMP_TRIES, interval=ICMP_INTERVAL)
        return (Verdict.OK if probe.ok else Verdict.FAIL), probe.detail, probe.data

    def _tcp(self, netns: str | None, far: PodEndpoint) -> tuple[Verdict, str, dict[str, Any]]:
        probe = probes.tcp_stream(netns, far.ip, far.tcp_port, TCP_STREAM_BYTES)
        return (Verdict.OK if probe.ok else Verdict.FAIL), probe.detail, probe.data

    def _udp_from_pod(self, far: PodEndpoint, mtu: int) -> tuple[Verdict, str, dict[str, Any]]:
        sizes = (*UDP_SIZES, mtu - probes.IP_HEADER - probes.UDP_HEADER)
        probe = probes.udp_echo(self.pod.name, far.ip, far.udp_port, sizes)
        kept = probe.data.get("seen") == [self.pod.ip]
        source = (
            (True, "the pod's own address arrived")
            if kept
            else (False, f"arrived from {', '.join(probe.data.get('seen') or ['nowhere'])}, "
                         f"not the pod's {self.pod.ip}: masqueraded inside the pod network")
        )  # fmt: skip
        verdict, detail = combine(_probe_part(probe), *([source] if probe.ok else []))
        return verdict, detail, probe.data

    def _masqueraded(self, probe: Probe) -> tuple[bool, str]:
        seen = list(probe.data.get("seen") or [])
        if seen and all(a in self.local and IPv4Address(a) not in self.pod_network for a in seen):
            return True, f"seen as {', '.join(seen)} (this node's)"
        return False, f"seen as {', '.join(seen)}, not this node's address: not masqueraded"

    def _pod_to_host(self, peer: Endpoint) -> tuple[Verdict, str, dict[str, Any]]:
        icmp = probes.icmp_echo(self.pod.name, peer.host_address, tries=ICMP_TRIES,
                                interval=ICMP_INTERVAL)  # fmt: skip
        udp = probes.udp_echo(self.pod.name, peer.host_address, peer.host_udp_port, UDP_SIZES)
        parts = [_probe_part(icmp), _probe_part(udp)]
        if udp.ok:
            parts.append(self._masqueraded(udp))
        verdict, detail = combine(*parts)
        return verdict, detail, {**udp.data, "unmasqueraded": udp.ok and not parts[-1][0]}

    def _host_to_pod(self, peer: Endpoint) -> tuple[Verdict, str, dict[str, Any]]:
        far = peer.pods[0]
        icmp = probes.icmp_echo(None, far.ip, tries=ICMP_TRIES, interval=ICMP_INTERVAL)
        udp = probes.udp_echo(None, far.ip, far.udp_port, UDP_SIZES)
        verdict, detail = combine(_probe_part(icmp), _probe_part(udp))
        return verdict, detail, udp.data

    def _pod_to_outside(self) -> tuple[Verdict, str, dict[str, Any]]:
        outside = self.outside
        if outside is None:
            return Verdict.SKIPPED, "no outside address given (flannel_verify_outside)", {}
        icmp = probes.icmp_echo(self.pod.name, outside.address, tries=ICMP_TRIES,
                                interval=ICMP_INTERVAL)  # fmt: skip
        parts = [_probe_part(icmp)]
        data: dict[str, Any] = {}
        if outside.port:
            udp = probes.udp_echo(self.pod.name, outside.address, outside.port, UDP_SIZES)
            parts.append(_probe_part(udp))
            if udp.ok:
                parts.append(self._masqueraded(udp))
                data = {**udp.data, "unmasqueraded": not parts[-1][0]}
        verdict, detail = combine(*parts)
        return verdict, detail, data

    def _mtu(self, peer: Endpoint) -> tuple[Verdict, str, dict[str, Any]]:
        """A DF packet of exactly the pod MTU must arrive; one byte more must be refused with
        a frag needed (here, by the sending kernel, or by a hop) rather than vanish."""
        mtu, far = self.me.pod_mtu, peer.pods[0].ip
        payload = mtu - probes.IP_HEADER - probes.ICMP_HEADER
        small = probes.icmp_echo(self.pod.name, far, tries=ICMP_TRIES, interval=ICMP_INTERVAL)
        if not small.ok:
            return Verdict.FAIL, f"not even small packets pass: {small.detail}", {"pod_mtu": mtu}
        at = probes.icmp_echo(self.pod.name, far, payload, dont_fragment=True, tries=2,
                              interval=MTU_WAIT)  # fmt: skip
        over = probes.icmp_echo(self.pod.name, far, payload + 1, dont_fragment=True, tries=1,
                                interval=MTU_WAIT)  # fmt: skip
        return mtu_verdict(mtu, at, over)

    def _burst(self, peer: Endpoint) -> tuple[Verdict, str, dict[str, Any]]:
        far = peer.pods[0]
        probe = probes.udp_burst(self.pod.name, far.ip, far.tcp_port, BURST_DATAGRAMS,
                                 BURST_PAYLOAD)  # fmt: skip
        return (Verdict.OK if probe.ok else Verdict.FAIL), probe.detail, probe.data

    # --- running ---------------------------------------------------------------------------

    def run(self, groups: Sequence[str] = GROUPS) -> tuple[list[Row], dict[str, float]]:
        """Every scenario of the groups, and the seconds each group took."""
        rows: list[Row] = []
        times: dict[str, float] = {}
        with ThreadPoolExecutor(max_workers=_WORKERS) as pool:
            for group in groups:
                started = time.monotonic()
                jobs = self.jobs(group)
                results = list(pool.map(_run_job, jobs))
                times[group] = round(time.monotonic() - started, 3)
                rows += [
                    Row(job.scenario, self.me.node, job.target, verdict, detail, data)
                    for job, (verdict, detail, data) in zip(jobs, results, strict=True)
                ]
        order = {s.name: n for n, s in enumerate(SCENARIOS)}
        rows.sort(key=lambda r: order[r.scenario])
        return rows, times


def _run_job(job: Job) -> tuple[Verdict, str, dict[str, Any]]:
    try:
        return job.check()
    except OSError as err:
        return Verdict.FAIL, f"could not probe: {err}", {}


def mtu_verdict(mtu: int, at: Probe, over: Probe) -> tuple[Verdict, str, dict[str, Any]]:
    """The MTU row from the probe at the pod MTU and the one a byte above it. Pure."""
    data: dict[str, Any] = {"pod_mtu": mtu}
    if at.ok:
        data["path_mtu"] = mtu
        if over.ok:
            data["path_mtu"] = mtu + 1
            return (
                Verdict.OK,
                f"{mtu} passes; {mtu + 1} passes too (path MTU above the pod's)",
                data,
            )
        if "too_big" in over.data:
            data["too_big"] = over.data["too_big"]
            return Verdict.OK, f"{mtu} passes; {over.detail}", data
        data["black_hole"] = mtu
        return Verdict.FAIL, f"{mtu} passes; {over.detail}: no frag needed came back", data
    if "too_big" in at.data:
        data["too_big"] = at.data["too_big"]
        data["too_big_from"] = at.data.get("too_big_from")
        data["path_mtu"] = at.data["too_big"]
        return Verdict.FAIL, f"DF {at.detail}: the path is narrower than the pod MTU", data
    data["black_hole"] = mtu - 1
    return Verdict.FAIL, f"DF {at.detail}: lost without a frag needed (a black hole)", data
