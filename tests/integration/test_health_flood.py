"""pyflanneld's health port held by thousands of trickling clients (a slowloris: a header line
a second each, never the blank line that ends the head, connecting again when cut off), with a
real etcd in a network namespace (pyflannel_lab/trickle.py).

The clients come from 100 loopback addresses, 30 from each: past the cap per address, and
together past the cap on all connections, so both caps and the deadline work at once. While
they are held: a fresh client's /readyz is answered, the agent's own lease keeps being renewed
(a 4 s TTL renews every 2 s), and the agent's memory and descriptors stay within a bound; its
log gets nothing from the health server but its start line.

Without the bounds (the server as flanneld's) the agent held every client: thousands of
descriptors and tens of MiB (bench/bench_health_flood.py shows both side by side).
"""

from __future__ import annotations

import time

import pytest

from pyflannel_lab.churn import process_facts
from pyflannel_lab.netns_agents import HEALTHZ_PORT, AgentLab
from pyflannel_lab.trickle import Trickle, open_files, probe, trickling
from pyflannel_runtime.agent.health import Limits
from pyflannel_runtime.netlink.netns import run_in_netns

pytestmark = [pytest.mark.root, pytest.mark.etcd]

CLIENTS = 3000
SOURCES = [f"127.0.1.{n}" for n in range(1, 21)]
LEASE_TTL = 4  # seconds: renewed half-way, every 2 s
RENEWALS = 3  # renewals to see while the flood is held
RSS_GROWTH_KIB = 8 * 1024
AGENT_OWN_FDS = 16
LIVENESS = 60.0  # seconds; reached only when renewals or the trickle stop altogether
RENEWED = "Lease renewed, new expiration: "
READY = b"HTTP/1.1 200 OK\r\n"


def test_a_trickling_flood_leaves_the_agent_s_probe_lease_and_memory_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with open_files(CLIENTS + 500) as limit:
        if limit < CLIENTS + 500:
            pytest.skip(f"the hard limit on open files is below {CLIENTS + 500}")
        flooded(capsys)


def flooded(capsys: pytest.CaptureFixture[str]) -> None:
    with AgentLab({"Type": "host-gw"}, hosts=1, prefix="phf", lab_pods=False) as lab:
        host = lab.net.hosts[0]
        agent = lab.start_agent(host, f"--subnet-lease-ttl={LEASE_TTL}")
        lab.wait_ready(host)
        pid = agent.process.pid

        def fresh_probe() -> bytes:
            return run_in_netns(host.ns, lambda: probe(HEALTHZ_PORT))

        assert fresh_probe().startswith(READY)
        before = process_facts(pid)
        renewed_before = agent.log().count(RENEWED)
        peak_rss, peak_fds, answers = before.rss_kib, before.fds, []
        trickle = Trickle(HEALTHZ_PORT, SOURCES, CLIENTS)
        with trickling(trickle, host.ns):
            held_from = time.monotonic()
            deadline = held_from + LIVENESS
            # Every client connected once and on its next line at least, before looking.
            while trickle.counts.rounds < 2:
                assert time.monotonic() < deadline, "the trickle never got round"
                time.sleep(0.1)
            while agent.log().count(RENEWED) < renewed_before + RENEWALS:
                assert time.monotonic() < deadline, f"no renewals while flooded:\n{agent.log()}"
                facts = process_facts(pid)
                peak_rss, peak_fds = max(peak_rss, facts.rss_kib), max(peak_fds, facts.fds)
                answers.append(fresh_probe())
                time.sleep(0.2)
            held = time.monotonic() - held_from
        counts = trickle.counts
        log = agent.log()

    with capsys.disabled():
        print(
            f"\n{CLIENTS} trickling clients held {held:.1f} s: {counts.connects} connections, "
            f"{counts.lines} lines, {counts.closed} cut off by the agent; agent VmRSS "
            f"{before.rss_kib} -> peak {peak_rss} KiB, descriptors {before.fds} -> peak "
            f"{peak_fds}; {len(answers)} fresh /readyz probes"
        )
    assert answers and all(answer.startswith(READY) for answer in answers), answers
    assert all(answer.endswith(b"flanneld is ready") for answer in answers)
    assert peak_rss - before.rss_kib <= RSS_GROWTH_KIB
    # The health server's clients, and a few the agent opens and closes itself meanwhile (its
    # etcd requests, netlink sockets).
    assert peak_fds - before.fds <= Limits().connections + AGENT_OWN_FDS
    assert counts.closed > CLIENTS  # the agent did cut them off, round after round
    health = [line for line in log.splitlines() if " pyflannel.health] " in line]
    assert [line.split("] ", 1)[1] for line in health] == [
        f"Start healthz server on 0.0.0.0:{HEALTHZ_PORT}"
    ]
    assert "Traceback" not in log
    assert " asyncio] " not in log
