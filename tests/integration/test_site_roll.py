"""Day two on systemd lab hosts over SSH: a three-member etcd and rolling agent restarts.

One lab serves the module: three hosts that are also the three etcd members. In this order:
the first run; the etcd member every agent talks to stopped while pods ping each other and a
lease is added; a roll that stops because a peer does not hold the restarted host's entries;
a runtime upgrade and a settings change rolled out under ping streams (vxlan); a broken runtime
that stops the roll at the first host; then host-gw and udp, each switched to and rolled out
under ping streams. The figures (pings lost, roll time, lease propagation) are printed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pyflannel_lab.operations import runtime_copy
from pyflannel_lab.playbook import PlaybookRun, run_playbook
from pyflannel_runtime import __version__
from tests.integration.site_lab import assert_converged, lab_hosts, on_host

pytestmark = [pytest.mark.root, pytest.mark.podman]

NAMES = ["node1", "node2", "node3"]
POD = "pyft-roll"
CONFLIST = "/etc/cni/net.d/10-flannel.conflist"
CNI_BIN = "/opt/cni/bin"
VENV_PYTHON = "/opt/pyflannel/venv/bin/python"
PKI = "/etc/pyflannel/pki"
# A peer inside the Network that no host holds; its lease is put into etcd by hand.
FAKE_SUBNET = "10.244.250.0/24"
FAKE_KEY = "/coreos.com/network/subnets/10.244.250.0-24"
UPGRADE = f"{__version__}.post1"
BROKEN = f"{__version__}.post2"
# A roll that is to stop does not need the default two minutes to find out.
SHORT_WAIT = {"flannel_agent_ready_timeout": 5}
# Harmless changes of the agents' settings (their environment file).
RESYNC = {"flannel_iptables_resync": 7}
SETTINGS = {"flannel_iptables_resync": 9}


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(f"\n{line}")


# --- the runtimes rolled out ------------------------------------------------------------------


@dataclass(frozen=True)
class Runtimes:
    upgrade: Path  # this tree as a newer version
    broken: Path  # a newer version still, whose agent exits at once


@pytest.fixture(scope="module")
def runtimes(tmp_path_factory: pytest.TempPathFactory) -> Runtimes:
    base = tmp_path_factory.mktemp("runtimes")
    upgrade = runtime_copy(base / "upgrade", UPGRADE)
    broken = runtime_copy(base / "broken", BROKEN)
    agent = broken / "pyflannel_runtime/agent/main.py"
    entry = "def main(argv: Sequence[str] | None = None) -> int:\n"
    text = agent.read_text()
    assert text.count(entry) == 1
    agent.write_text(text.replace(entry, f"{entry}    return 1  # a broken build\n"))
    return Runtimes(upgrade, broken)


# --- the lab, its agents and pods ---------------------------------------------------------------


@pytest.fixture(scope="module")
def lab() -> Iterator[Any]:
    with lab_hosts(3, etcd_members=3) as state:
        assert state.names() == NAMES
        yield state


# The version the running agent reports (pyflanneld's /statusz).
STATUSZ_VERSION = (
    "import json, urllib.request\n"
    "print(json.load(urllib.request.urlopen('http://127.0.0.1:8081/statusz', timeout=10))['version'])"
)


@dataclass(frozen=True)
class Agent:
    pid: int
    restarts: int
    # Seconds on the monotonic clock, which the lab's hosts share with this machine's kernel.
    entered_active: float
    left_active: float
    version: str


def agent(lab: Any, name: str) -> Agent:
    props = dict(
        line.split("=", 1)
        for line in on_host(
            lab,
            name,
            "systemctl show pyflanneld -p MainPID -p NRestarts"
            " -p ActiveEnterTimestampMonotonic -p ActiveExitTimestampMonotonic",
        ).splitlines()
    )
    version = on_host(lab, name, f"python3 -c {shlex.quote(STATUSZ_VERSION)}").strip()
    return Agent(
        pid=int(props["MainPID"]),
        restarts=int(props["NRestarts"]),
        entered_active=int(props["ActiveEnterTimestampMonotonic"]) / 1e6,
        left_active=int(props["ActiveExitTimestampMonotonic"]) / 1e6,
        version=version,
    )


def agents(lab: Any) -> dict[str, Agent]:
    return {name: agent(lab, name) for name in NAMES}


def roll_seconds(before: dict[str, Agent], after: dict[str, Agent]) -> float:
    """From the first agent stopping to the last restarted one ready (READY=1)."""
    rolled = [name for name in NAMES if after[name].pid != before[name].pid]
    assert rolled, "no agent restarted"
    return max(after[n].entered_active for n in rolled) - min(after[n].left_active for n in rolled)


@pytest.fixture(scope="module")
def converged(lab: Any) -> PlaybookRun:
    run = run_playbook("site.yml")
    assert_converged(run, NAMES)
    return run


def probe(lab: Any, name: str, code: str) -> str:
    """Python with the runtime on a host (pyflannel_runtime.ops.probe's pods)."""
    script = f"from pyflannel_runtime.ops.probe import add_pod, remove_pod\n{code}"
    return on_host(lab, name, f"{VENV_PYTHON} -c {shlex.quote(script)}").strip()


@contextlib.contextmanager
def pods_on(lab: Any) -> Iterator[dict[str, str]]:
    """A pod on every host, wired through the CNI plugin as a runtime would; host -> address."""
    remove = f"remove_pod({POD!r}, {CONFLIST!r}, {CNI_BIN!r})"
    try:
        yield {
            name: probe(
                lab, name, f"{remove}\nprint(add_pod({POD!r}, {CONFLIST!r}, {CNI_BIN!r}).ip)"
            )
            for name in NAMES
        }
    finally:
        for name in NAMES:
            probe(lab, name, remove)


@pytest.fixture
def pods(lab: Any, converged: PlaybookRun) -> Iterator[dict[str, str]]:
    with pods_on(lab) as made:
        yield made


# --- ping streams ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Pings:
    answered: int
    lost: int
    longest_gap: int  # the most requests in a row that got no reply

    def __str__(self) -> str:
        return f"{self.lost} of {self.answered + self.lost} lost (longest gap {self.longest_gap})"


def pings(output: str) -> Pings:
    """Lost: the requests between the first and the last one answered that got no reply at
    all. A late reply is not a loss, nor is the request in flight when the stream stopped, nor
    a new pod's first request, which neighbour resolution may drop (the change under test
    comes a second into the stream)."""
    answered = {int(seq) for seq in re.findall(r"icmp_seq=(\d+) ttl=", output)}
    assert answered, f"no reply at all:\n{output[-2000:]}"
    missing = sorted(set(range(min(answered), max(answered) + 1)) - answered)
    longest = run = 0
    for previous, seq in zip([None, *missing], missing, strict=False):
        run = run + 1 if previous == seq - 1 else 1
        longest = max(longest, run)
    return Pings(len(answered), len(missing), longest)


class PingStream:
    """A 10 ms ping stream from the pod on ``src`` to ``dst``, started on the host over SSH
    and interrupted by stop()."""

    def __init__(self, lab: Any, src: str, dst: str) -> None:
        self.lab, self.src = lab, src
        ping = f"ip netns exec {POD} ping -n -i 0.01 -w 900 {dst}"
        command = f"sudo sh -c {shlex.quote(f'echo $$; exec {ping}')}"
        self.process = subprocess.Popen(
            [*lab.ssh(lab.host(src)).argv(), command], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        self.pid = int(self.process.stdout.readline())

    def stop(self) -> Pings:
        on_host(self.lab, self.src, f"kill -INT {self.pid}")
        output, _ = self.process.communicate(timeout=60)
        return pings(output)

    def kill(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(AssertionError):
                on_host(self.lab, self.src, f"kill -INT {self.pid}")
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def ping_ring(lab: Any, pods: dict[str, str]) -> Iterator[dict[str, PingStream]]:
    """node1 -> node2 -> node3 -> node1: every host sends and receives a stream."""
    streams = {
        f"{src}->{dst}": PingStream(lab, src, pods[dst])
        for src, dst in zip(NAMES, NAMES[1:] + NAMES[:1], strict=True)
    }
    try:
        time.sleep(1)  # every stream under way before the change
        yield streams
    finally:
        for stream in streams.values():
            stream.kill()


def stop_all(streams: dict[str, PingStream]) -> dict[str, Pings]:
    time.sleep(1)  # replies to the last requests
    return {name: stream.stop() for name, stream in streams.items()}


def shown(results: dict[str, Pings]) -> str:
    return "; ".join(f"{name} {result}" for name, result in results.items())


def lossless(results: dict[str, Pings]) -> bool:
    return all(result.lost == 0 for result in results.values())


# --- etcd -----------------------------------------------------------------------------------


def etcdctl(lab: Any, name: str, *args: str) -> str:
    """etcdctl on a member, against that member only, with the node's client certificate."""
    endpoint = f"https://{lab.host(name).address}:2379"
    tls = f"--cacert {PKI}/etcd-ca.crt --cert {PKI}/etcd-client.crt --key {PKI}/etcd-client.key"
    return on_host(
        lab, name, f"ETCDCTL_API=3 etcdctl --endpoints {endpoint} {tls} {shlex.join(args)}"
    )


def agents_etcd_members(lab: Any) -> dict[str, set[str]]:
    """Each agent's open etcd connections, by the member's host name."""
    by_address = {str(lab.host(name).address): name for name in NAMES}
    found = {}
    for name in NAMES:
        lines = on_host(lab, name, "ss -Htnp state established '( dport = :2379 )'").splitlines()
        peers = {line.split()[3].rsplit(":", 1)[0] for line in lines if '"pyflanneld"' in line}
        found[name] = {by_address[address] for address in peers}
    return found


def route_wait(subnet: str, present: bool) -> str:
    """A command that waits (30 s at most) until the kernel has, or lacks, flannel's route to
    subnet."""
    test = f"ip -4 route show {subnet} | grep -q flannel"
    return f"timeout 30 sh -c 'until {'' if present else '! '}{test}; do sleep 0.02; done'"


def wait_route_script(subnet: str, present: bool) -> str:
    """Says it started, waits for the route as route_wait, then prints the time."""
    return (
        "echo started;"
        f" {route_wait(subnet, present)} &&"
        " python3 -c 'import time; print(time.clock_gettime(time.CLOCK_MONOTONIC))'"
    )


def watch_routes(lab: Any, subnet: str, present: bool) -> dict[str, subprocess.Popen[str]]:
    watchers = {}
    for name in NAMES:
        command = f"sudo sh -c {shlex.quote(wait_route_script(subnet, present))}"
        watchers[name] = subprocess.Popen(
            [*lab.ssh(lab.host(name)).argv(), command], stdout=subprocess.PIPE, text=True
        )
    for watcher in watchers.values():
        assert watcher.stdout is not None and watcher.stdout.readline().strip() == "started"
    return watchers


def arrivals(watchers: dict[str, subprocess.Popen[str]]) -> dict[str, float]:
    times = {}
    for name, watcher in watchers.items():
        out, _ = watcher.communicate(timeout=60)
        assert watcher.returncode == 0, f"{name}: the route never changed"
        times[name] = float(out.split()[-1])
    return times


def subnet_of(lab: Any, name: str) -> str:
    env = on_host(lab, name, "cat /run/flannel/subnet.env")
    found = re.search(r"^FLANNEL_SUBNET=(\S+)$", env, re.M)
    assert found, env
    return str(ipaddress.ip_interface(found[1]).network)


def restarted_one_at_a_time(before: dict[str, Agent], after: dict[str, Agent]) -> bool:
    """Each host's new agent was ready before the next host's agent stopped."""
    return all(
        after[first].entered_active <= after[then].left_active
        for first, then in itertools.pairwise(NAMES)
    ) and all(after[n].pid != before[n].pid for n in NAMES)


# --- the tests, in order ----------------------------------------------------------------------


def test_the_three_etcd_members_form_one_cluster_and_every_agent_knows_them(
    lab: Any, converged: PlaybookRun
) -> None:
    members = json.loads(etcdctl(lab, "node1", "member", "list", "-w", "json"))["members"]
    assert sorted(m["name"] for m in members) == NAMES
    for member in members:
        address = lab.host(member["name"]).address
        assert member["peerURLs"] == [f"https://{address}:2380"], member
        assert member["clientURLs"] == [f"https://{address}:2379"], member
    endpoints = ",".join(f"https://{lab.host(n).address}:2379" for n in NAMES)
    for name in NAMES:
        env = on_host(lab, name, "cat /etc/pyflannel/pyflanneld.env")
        assert f"FLANNELD_ETCD_ENDPOINTS={endpoints}\n" in env, env
        assert '"health":true' in etcdctl(lab, name, "endpoint", "health", "-w", "json")


def test_agents_ride_out_the_loss_of_their_etcd_member(
    lab: Any, pods: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    before = agents(lab)
    used = agents_etcd_members(lab)
    assert all(len(members) == 1 for members in used.values()), used
    members = set().union(*used.values())
    # Every agent starts on the first endpoint; two members down would leave no quorum.
    assert members == {"node1"}, used
    member, survivor = "node1", "node3"
    peer_ip = lab.network.broadcast_address - 1  # in the underlay, no host's
    value = json.dumps(
        {
            "PublicIP": str(peer_ip),
            "BackendType": "vxlan",
            "BackendData": {"VNI": 1, "VtepMAC": "0a:58:0a:f4:fa:00"},
        },
        separators=(",", ":"),
    )
    with ping_ring(lab, pods) as streams:
        on_host(lab, member, "systemctl stop etcd")
        try:
            watchers = watch_routes(lab, FAKE_SUBNET, present=True)
            put_at = time.monotonic()
            etcdctl(lab, survivor, "put", FAKE_KEY, value)
            put_done = time.monotonic()
            reached = arrivals(watchers)
            results = stop_all(streams)
            moved = agents_etcd_members(lab)
        finally:
            on_host(lab, member, "systemctl start etcd")
    after = agents(lab)
    slowest = max(reached.values()) - put_at
    report(
        capsys,
        f"etcd member {member} stopped: pings {shown(results)}; the lease put through "
        f"{survivor} (took {put_done - put_at:.2f} s) reached every agent in {slowest:.2f} s "
        f"({', '.join(f'{n} {t - put_at:.2f} s' for n, t in reached.items())})",
    )
    assert all(member not in members and members for members in moved.values()), moved
    assert lossless(results), shown(results)
    assert slowest <= 5.0, reached
    for name in NAMES:
        assert (after[name].pid, after[name].restarts) == (before[name].pid, 0), name
    # The member rejoins: healthy, and a started member of the cluster again.
    assert '"health":true' in etcdctl(lab, member, "endpoint", "health", "-w", "json")
    listed = json.loads(etcdctl(lab, member, "member", "list", "-w", "json"))["members"]
    assert sorted(m["name"] for m in listed if m.get("clientURLs")) == NAMES, listed
    watchers = watch_routes(lab, FAKE_SUBNET, present=False)
    etcdctl(lab, survivor, "del", FAKE_KEY)
    arrivals(watchers)


def test_a_roll_stops_at_a_peer_that_does_not_hold_the_restarted_host(
    lab: Any, converged: PlaybookRun
) -> None:
    node1 = subnet_of(lab, "node1")
    before = agents(lab)
    # The agent leaves a route that is not flannel's alone: node2 cannot hold node1's entries.
    on_host(lab, "node2", f"ip route replace blackhole {node1}")
    try:
        run = run_playbook("site.yml", extra_vars={**RESYNC, **SHORT_WAIT})
    finally:
        on_host(lab, "node2", f"ip route del blackhole {node1}")
        # node2's agent adds the route at its next reconcile (10 s).
        on_host(lab, "node2", route_wait(node1, present=True))
    assert run.returncode != 0, run.explain()
    assert "fatal: [node2]: FAILED!" in run.output, run.explain()
    failure = " ".join(run.output.split("fatal: [node2]: FAILED!", 1)[1].split())
    assert re.search(
        r"this node does not hold the entries of node1 \(3 leases, 1 peer programmed, 1 missing,"
        r" 0 stale; agent ready\) after 5 s; the roll stops at node1",
        failure,
    ), run.explain()
    after = agents(lab)
    assert after["node1"].pid != before["node1"].pid
    assert [after[n].pid for n in ("node2", "node3")] == [before[n].pid for n in ("node2", "node3")]


def rolled(
    lab: Any, pods: dict[str, str], extra_vars: dict[str, Any]
) -> tuple[PlaybookRun, dict[str, Agent], dict[str, Pings]]:
    """site.yml with extra_vars while the ping ring runs: the run, the agents before it, and
    each stream's pings."""
    before = agents(lab)
    with ping_ring(lab, pods) as streams:
        run = run_playbook("site.yml", extra_vars=extra_vars)
        results = stop_all(streams)
    return run, before, results


def assert_rolls(
    lab: Any,
    pods: dict[str, str],
    extra_vars: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    what: str,
    *,
    no_loss: bool = True,
) -> dict[str, Agent]:
    """site.yml converges, restarting one agent after the other under the ping ring; the
    figures are printed. Returns the agents after it."""
    run, before, results = rolled(lab, pods, extra_vars)
    assert_converged(run, NAMES)
    after = agents(lab)
    report(
        capsys,
        f"{what}: rolled over 3 hosts in {roll_seconds(before, after):.1f} s (first agent stopped"
        f" to last agent ready; site.yml {run.seconds:.1f} s); pings {shown(results)}",
    )
    assert restarted_one_at_a_time(before, after), (before, after)
    if no_loss:
        assert lossless(results), shown(results)
    return after


def test_a_runtime_upgrade_rolls_one_host_at_a_time_without_losing_a_ping(
    lab: Any, pods: dict[str, str], runtimes: Runtimes, capsys: pytest.CaptureFixture[str]
) -> None:
    # The settings change the previous test left half-rolled goes along.
    upgrade = {"flannel_runtime_source": str(runtimes.upgrade), **RESYNC}
    after = assert_rolls(lab, pods, upgrade, capsys, "vxlan, runtime upgrade")
    assert {after[n].version for n in NAMES} == {UPGRADE}
    again = run_playbook("site.yml", extra_vars=upgrade)
    assert again.changed() == dict.fromkeys(NAMES, 0), again.explain()


def test_a_settings_change_rolls_without_losing_a_ping(
    lab: Any, pods: dict[str, str], runtimes: Runtimes, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = {"flannel_runtime_source": str(runtimes.upgrade), **SETTINGS}
    assert_rolls(lab, pods, settings, capsys, "vxlan, settings change")


def test_a_broken_runtime_stops_the_roll_at_the_first_host(
    lab: Any, pods: dict[str, str], runtimes: Runtimes, capsys: pytest.CaptureFixture[str]
) -> None:
    run, before, results = rolled(
        lab, pods, {"flannel_runtime_source": str(runtimes.broken), **SETTINGS}
    )
    assert run.returncode != 0, run.explain()
    assert "fatal: [node1]: FAILED!" in run.output, run.explain()
    task, failure = run.output.split("fatal: [node1]: FAILED!", 1)
    assert "Agent | Restart pyflanneld]" in task.rsplit("TASK [", 1)[1], run.explain()
    assert "Unable to restart service pyflanneld" in " ".join(failure.split()[:12]), run.explain()
    assert on_host(lab, "node1", "systemctl is-active pyflanneld || true").strip() != "active"
    for name in ("node2", "node3"):
        still = agent(lab, name)
        assert (still.pid, still.version) == (before[name].pid, UPGRADE), name
    report(
        capsys,
        f"vxlan, broken runtime: the roll stopped at node1 (site.yml {run.seconds:.1f} s);"
        f" pings {shown(results)}",
    )
    assert lossless({"node2->node3": results["node2->node3"]}), shown(results)
    # The good runtime again: node1 comes back; node2 and node3 keep the agents they run.
    run = run_playbook(
        "site.yml", extra_vars={"flannel_runtime_source": str(runtimes.upgrade), **SETTINGS}
    )
    assert_converged(run, NAMES)
    after = agents(lab)
    assert after["node1"].version == UPGRADE
    assert [after[n].pid for n in ("node2", "node3")] == [before[n].pid for n in ("node2", "node3")]


@pytest.mark.parametrize("backend", ["host-gw", "udp"])
def test_another_backend_rolls(
    lab: Any, runtimes: Runtimes, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = {"flannel_runtime_source": str(runtimes.upgrade), "flannel_backend_type": backend}
    # The switch, two agents at a time (agents of two backends cannot reach each other).
    switch = run_playbook(
        "site.yml", extra_vars={**base, **SETTINGS, "flannel_agent_restart_batch": "67%"}
    )
    assert_converged(switch, NAMES)
    switched = agents(lab)
    assert switched["node1"].entered_active > switched["node2"].left_active  # together
    assert switched["node2"].entered_active <= switched["node3"].left_active  # then node3
    with pods_on(lab) as pods:
        # udp forwards in the agent, through flannel0, which goes with it: each restart is an
        # outage, reported here.
        what = f"{backend}, settings change"
        assert_rolls(lab, pods, {**base, **RESYNC}, capsys, what, no_loss=backend != "udp")
