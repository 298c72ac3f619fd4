"""Helpers the fault tests share: polling with a hang guard, printing a measured figure, what a
host's kernel routes, and which kernel entries it deleted meanwhile."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from ipaddress import IPv4Network

import pytest

from pyflannel_lab.fanout import agent_logs
from pyflannel_lab.netns_agents import AgentLab
from pyflannel_lab.netns_lab import LabHost

HANG_GUARD = 60.0  # a guard against hangs, never a measurement


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    """Print a measured figure past pytest's capture."""
    with capsys.disabled():
        print(f"\n{line}")


def wait_until(what: str, ready: Callable[[], bool], timeout: float = HANG_GUARD) -> float:
    """Poll until `ready()`; the monotonic time it first held."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(0.05)
    return time.monotonic()


def status(lab: AgentLab, host: LabHost) -> subprocess.CompletedProcess[str]:
    """`pyflannel status` for the host, with its agent's settings."""
    return subprocess.run(lab.status_argv(host), capture_output=True, text=True, timeout=60)


def assert_in_sync(lab: AgentLab, host: LabHost, leases: int) -> None:
    """`pyflannel status` on the host finds every peer of `leases` programmed, nothing stale."""
    shown = status(lab, host)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    summary = f"{leases} leases, {leases - 1} peers programmed, 0 missing, 0 stale"
    assert summary in shown.stdout, shown.stdout


def routes_to(lab: AgentLab, host: LabHost, subnet: IPv4Network) -> bool:
    """Whether `host`'s kernel routes `subnet` through flannel.1 (the peer is programmed)."""
    return "flannel.1" in lab.net.ip(host.ns, "route", "show", str(subnet))


@contextlib.contextmanager
def kernel_changes(lab: AgentLab, host: LabHost) -> Iterator[list[str]]:
    """Every route, neighbour and FDB change `host`'s kernel announces meanwhile, as `ip
    monitor` prints it (filled in when the block exits): what the agent wrote there."""
    monitor = subprocess.Popen(
        ["ip", "-n", host.ns, "monitor", "route", "neigh"], stdout=subprocess.PIPE, text=True
    )
    changes: list[str] = []
    try:
        time.sleep(0.2)  # the monitor subscribes before anything happens
        yield changes
        time.sleep(0.5)
    finally:
        monitor.terminate()
        out, _ = monitor.communicate(timeout=10)
        changes += out.splitlines()


@contextlib.contextmanager
def kernel_deletions(lab: AgentLab, host: LabHost) -> Iterator[list[str]]:
    """The route, neighbour and FDB deletions `host`'s kernel announces meanwhile (filled in
    when the block exits)."""
    deleted: list[str] = []
    with kernel_changes(lab, host) as changes:
        yield deleted
    deleted += [line for line in changes if line.startswith("Deleted")]


def wait_routed(lab: AgentLab, host: LabHost, subnet: IPv4Network, routed: bool = True) -> float:
    """Until `host` routes `subnet` through flannel.1 (or no longer does); when it first did."""
    what = f"{host.ns} {'routes' if routed else 'no longer routes'} {subnet}"
    try:
        return wait_until(what, lambda: routes_to(lab, host, subnet) == routed)
    except AssertionError as err:
        # What each agent last said: a failure seen once under load must explain itself.
        every_agent = {str(agent.host.underlay_ip) for agent in lab.agents.values()}
        raise AssertionError(f"{err}\n{agent_logs(lab, every_agent, lines=25)}") from None
