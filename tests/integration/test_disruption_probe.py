"""The disruption probe's connections against the real kernel, in network namespaces of their
own: a client namespace and a server namespace joined by a veth pair, the suite's responder in
the server, the probe's process (``python -m pyflannel_runtime.ops.disruption``) in the client.

What the lab tests rely on is shown here to fail when it should: a link cut for a while is a
gap as long as the cut, with nothing lost and no reset; a responder killed under the
connections is a reset, its unanswered messages lost, and the connection comes back when a
responder listens again; a probe nobody closes ends by itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from pyflannel_runtime.connectivity import responder
from pyflannel_runtime.connectivity.disruption import Path, Row, Target
from pyflannel_runtime.ops import connectivity, disruption

pytestmark = pytest.mark.root

CLIENT_ADDRESS = "192.0.2.201"
SERVER_ADDRESS = "192.0.2.202"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class Pair:
    client: str
    server: str
    name: str  # the probe's name: its pid file and control socket under /run
    port: int = 0
    responder_pid: int = 0

    def start_responder(self) -> None:
        ready = responder.launch([f"--pod={self.server}", "--lifetime", "120"])
        self.port = int(ready["pods"][self.server]["tcp_port"])
        self.responder_pid = int(ready["pid"])

    def start_responder_on(self, port: int) -> None:
        """A responder on the same port again (the first one gone): a TCP echo alone, as the
        outside stand-in's."""
        address = f"{SERVER_ADDRESS}:{port}"
        ready = responder.launch(
            ["--outside", address, "--lifetime", "120"],
            prefix=["ip", "netns", "exec", self.server],
        )
        self.responder_pid = int(ready["pid"])

    def kill_responder(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.responder_pid, 9)
        while connectivity.runs(self.responder_pid, responder.MODULE):
            time.sleep(0.02)

    def open(self, lifetime: float = 120.0) -> list[Row]:
        target = Target(Path.POD_POD, "client", "server", self.client, SERVER_ADDRESS, self.port)
        spec = {
            "name": self.name,
            "conflist": "/nonexistent/10-flannel.conflist",
            "bin_dir": "/nonexistent",
            "lifetime": lifetime,
            "targets": [target.as_dict()],
        }
        announced = responder.launch(
            [json.dumps(spec)], module=disruption.MODULE, timeout=disruption._START_TIMEOUT
        )
        with open(disruption.pid_file(self.name), "w") as handle:
            handle.write(f"{announced['pid']}\n")
        return [Row.of(row) for row in announced["rows"]]

    def check(self, settle: float = 3.0) -> Row:
        (row,) = [Row.of(r) for r in disruption.check(self.name, settle)]
        return row


@pytest.fixture
def pair() -> Iterator[Pair]:
    tag = secrets.token_hex(3)
    made = Pair(f"pyft-dc-{tag}", f"pyft-ds-{tag}", f"pyft-disrupt-{tag}")
    ip("netns", "add", made.client)
    ip("netns", "add", made.server)
    try:
        ip("-n", made.client, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
           "netns", made.server)  # fmt: skip
        for netns, address in ((made.client, CLIENT_ADDRESS), (made.server, SERVER_ADDRESS)):
            ip("-n", netns, "addr", "add", f"{address}/24", "dev", "eth0")
            ip("-n", netns, "link", "set", "eth0", "up")
            ip("-n", netns, "link", "set", "lo", "up")
        made.start_responder()
        yield made
    finally:
        disruption.stop(made.name)
        made.kill_responder()
        ip("netns", "delete", made.client)
        ip("netns", "delete", made.server)


def test_a_quiet_window_echoes_everything_in_order(pair: Pair) -> None:
    (first,) = pair.open()
    assert first.report.up, first
    time.sleep(1.5)
    row = pair.check()
    report = row.report
    assert report.up and report.resets == 0 and report.lost == 0 and report.pending == 0
    assert report.sent >= 10 and report.echoed == report.sent, report
    # Ten messages a second; a busy machine may hold the probe back a little.
    assert report.longest_gap < 1.0, report


def test_a_cut_link_is_a_gap_as_long_as_the_cut_and_nothing_lost(pair: Pair) -> None:
    pair.open()
    time.sleep(0.5)
    pair.check()
    ip("-n", pair.server, "link", "set", "eth0", "down")
    time.sleep(2.0)
    ip("-n", pair.server, "link", "set", "eth0", "up")
    # TCP retransmits with backoff: the echoes come back within a few seconds of the link.
    row = pair.check(settle=10.0)
    report = row.report
    assert report.resets == 0 and report.lost == 0 and report.pending == 0, report
    assert report.longest_gap >= 2.0, report
    assert report.echoed == report.sent, report
    # The next window starts afresh.
    time.sleep(1.0)
    assert pair.check().report.longest_gap < 1.0


def test_a_responder_killed_under_the_connection_is_a_reset_and_it_comes_back(pair: Pair) -> None:
    pair.open()
    time.sleep(0.5)
    pair.kill_responder()
    time.sleep(1.5)
    broken = pair.check(settle=0)
    assert broken.report.resets == 1, broken
    assert not broken.report.up and broken.report.longest_gap >= 1.0, broken
    assert broken.report.reasons and broken.report.reasons[0] in (
        "closed by the far end",
        "reset by the far end",
    ), broken
    assert broken.report.echoed + broken.report.lost <= broken.report.sent
    # A responder listens again on the same port: the probe opens a new connection to it.
    pair.start_responder_on(pair.port)
    deadline = time.monotonic() + 10
    while not (row := pair.check(settle=0)).report.up:
        assert time.monotonic() < deadline, row
        time.sleep(0.3)
    assert row.report.reconnects == 1 and row.report.resets == 0, row


def test_a_probe_nobody_closes_ends_by_itself(pair: Pair) -> None:
    pair.open(lifetime=2.0)
    with open(disruption.pid_file(pair.name)) as handle:
        pid = int(handle.read())
    deadline = time.monotonic() + 20
    while connectivity.runs(pid, disruption.MODULE):
        assert time.monotonic() < deadline, "the probe outlived its lifetime"
        time.sleep(0.1)
    assert not os.path.exists(disruption.pid_file(pair.name))
    assert not os.path.exists(disruption.control_socket(pair.name))
    with pytest.raises(disruption.ProbeError, match="does not answer"):
        disruption.check(pair.name)
