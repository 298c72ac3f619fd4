"""site.yml on Debian 13 (trixie) hosts, alone and in a fleet mixed with Debian 12 (bookworm).

One lab serves the module, grown in order: first an all-trixie lab (one host: etcd, the CNI
plugin, pyflanneld and the verify role's pods, all on Debian 13 with Python 3.13) converges;
then two bookworm hosts join it, and site.yml converges the mixed fleet (two bookworm hosts,
one trixie) with every pod reaching every other, each node's agent installed offline from the
wheelhouse built for its own Python; a re-run changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pyflannel_lab import hosts
from pyflannel_lab.playbook import run_playbook
from tests.integration.site_lab import assert_converged, lab_hosts
from tests.integration.site_lab import on_host as ssh

pytestmark = [pytest.mark.root, pytest.mark.podman]

MIXED = ["trixie", "bookworm", "bookworm"]
# The Debian release each Python comes with.
PYTHON = {"bookworm": "3.11", "trixie": "3.13"}
AGENT_PYTHON = (
    "/opt/pyflannel/venv/bin/python -c "
    "'import sys, pyflannel_runtime.agent.main; print(\"%d.%d\" % sys.version_info[:2])'"
)


@pytest.fixture(scope="module")
def lab() -> Iterator[Any]:
    with lab_hosts(1, releases=MIXED[:1]) as state:
        yield state


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(f"\n{line}")


def assert_agents_run_their_release_python(lab: Any) -> None:
    for host in lab.hosts:
        assert (
            host.release == ssh(lab, host.name, ". /etc/os-release; echo $VERSION_CODENAME").strip()
        )
        assert ssh(lab, host.name, AGENT_PYTHON).strip() == PYTHON[host.release], host.name
        assert ssh(lab, host.name, "systemctl is-active pyflanneld").strip() == "active"


@pytest.mark.timeout(900)
def test_an_all_trixie_lab_converges(lab: Any, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_playbook("site.yml")
    assert_converged(run, lab.names())
    assert_agents_run_their_release_python(lab)
    report(capsys, f"site.yml on an all-trixie lab: {run.seconds:.0f} s")


# The new hosts' first run and a re-run: on a loaded 2-core machine more than the default bound
# (a safety net, not a measure).
@pytest.mark.timeout(1200)
def test_a_mixed_fleet_converges_and_every_pod_reaches_every_other(
    lab: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    grown = hosts.up(len(MIXED), releases=MIXED)
    assert [host.release for host in grown.hosts] == MIXED
    run = run_playbook("site.yml")
    assert_converged(run, grown.names())
    assert_agents_run_their_release_python(grown)
    # Each node installed the wheelhouse of its own Python: the trixie node's stays, the two
    # bookworm nodes share theirs.
    stamps = {
        host.name: ssh(grown, host.name, "cat /opt/pyflannel/venv/.pyflannel-wheelhouse").strip()
        for host in grown.hosts
    }
    assert stamps["node2"] == stamps["node3"] != stamps["node1"], stamps
    again = run_playbook("site.yml")
    assert_converged(again, grown.names(), suite=False)
    assert again.changed() == dict.fromkeys(grown.names(), 0), again.explain()
    report(
        capsys,
        f"site.yml on the mixed fleet (2 bookworm, 1 trixie): {run.seconds:.0f} s, "
        f"re-run {again.seconds:.0f} s",
    )
