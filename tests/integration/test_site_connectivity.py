"""The verify role's connectivity suite on systemd lab hosts: the healthy matrix, then each
deliberately broken path with the cause the summary names, the VXLAN device's tx checksum
offload (off and auto) and nothing left behind.

One lab serves the module, in this order: a healthy first run; the suite skipped, alone and
timed; a broken UDP checksum path (tests/integration/csum_fault.py on node1's underlay) that
fails its row, naming the offload, each failing node's diagnostics bundle fetched to the
controller; ``flannel_vxlan_tx_checksum_offload: off`` (off after the
agent's start, its restart and the device's deletion by hand; the broken path then passes);
``auto`` (the broken path turns node1's offload off, with the reason in the summary); a
FORWARD policy of DROP without flannel's forward rules (named), and with them (harmless).
Every test puts back what it changed.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import stat
import subprocess
import tarfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pyflannel_lab.playbook import LAB_INVENTORY, PlaybookRun, run_playbook
from tests.integration.csum_fault import COMMENT, fault_on_host
from tests.integration.site_lab import assert_converged, lab_hosts
from tests.integration.site_lab import on_host as ssh

pytestmark = [pytest.mark.root, pytest.mark.podman]

# The checks alone, asking for the connectivity suite by its tag (a run that changes nothing
# leaves it out otherwise).
VERIFY = ("--tags", "flannel_preflight,flannel_verify,flannel_connectivity")
SUITE_ALONE = ("--tags", "flannel_preflight,flannel_connectivity")
PYFLANNEL = "/opt/pyflannel/venv/bin/pyflannel"
VERDICT_FILE = "/var/lib/pyflannel/vxlan-tx-checksum-offload"
# Where the verify role sends a failing node's diagnostics bundle (flannel_bundle_dir's default).
BUNDLES = Path(f"{LAB_INVENTORY}-bundles")
OFFLOAD_CAUSE = (
    "UDP from node1 arrives with bad checksums (the receivers count UdpInCsumErrors): node1's "
    "flannel.1 sends with tx checksum offload on, the VXLAN checksum offload fault (flannel "
    "#1279): set flannel_vxlan_tx_checksum_offload: off (or auto)"
)
FORWARD_CAUSE = (
    "node2: the FORWARD policy is DROP (ip filter FORWARD) and flannel's forward rules are off "
    "(flannel_iptables_forward_rules: false)"
)


@pytest.fixture(scope="module")
def timings() -> dict[str, float]:
    """Seconds of the runs the suite's cost is measured from (reported, not asserted)."""
    return {}


@pytest.fixture(scope="module")
def lab() -> Iterator[Any]:
    with lab_hosts() as state:
        outside = state.outside
        yield state
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert outside is not None and outside.netns not in left


def report(capsys: pytest.CaptureFixture[str], title: str, run: PlaybookRun) -> None:
    """The summary and the run's time, for the closing note (pytest -s shows them)."""
    with capsys.disabled():
        print(f"\n--- {title}: ansible-playbook took {run.seconds:.1f} s")
        print("\n".join(summary(run)))


def summary(run: PlaybookRun) -> list[str]:
    """The verify role's summary lines, as the debug task printed them."""
    task = run.output.split("TASK [pyflannel.network.verify : Verify | Summary]", 1)[1]
    body = task.split("=> \n", 1)[1].split("\n\n", 1)[0]
    return list(yaml.safe_load(textwrap.dedent(body))["msg"])


def matrix(lines: list[str]) -> dict[str, list[str]]:
    """Each scenario's cells (a column per node, then per path: with three nodes 1, 2, 3,
    1→2 1→3 2→1 2→3 3→1 3→2) by title."""
    header = next(i for i, line in enumerate(lines) if line.startswith("scenario "))
    starts = [m.start() for m in re.finditer(r"\S+", lines[header])][1:]
    cells = {}
    for line in lines[header + 1 :]:
        if not line[:1].isalpha() or line.startswith(("time per group", "every ", "SOME ")):
            break
        padded = line.ljust(starts[-1] + 6)
        cells[line[: starts[0]].strip()] = [padded[s : s + 6].strip() for s in starts]
    return cells


CROSS = ["1→2", "1→3", "2→1", "2→3", "3→1", "3→2"]


def cross(cells: dict[str, list[str]], title: str) -> dict[str, str]:
    return dict(zip(CROSS, cells[title][3:], strict=True))


def container_pid(lab: Any, name: str) -> int:
    return int(lab.podman().container_pid(lab.host(name).container))


def offload(lab: Any, name: str) -> dict[str, Any]:
    """flannel.1's tx checksum offload as `pyflannel status` shows it."""
    done = lab.ssh(lab.host(name)).run(f"sudo {PYFLANNEL} status -o json")
    (device,) = json.loads(done.stdout)["tx_checksum_offload"]
    return dict(device)


def wait_for(check: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


READYZ = "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8081/readyz', timeout=2)"


def agent_ready(lab: Any, name: str) -> bool:
    probe = f"systemctl is-active pyflanneld && python3 -c {shlex.quote(READYZ)}"
    done = lab.ssh(lab.host(name)).run(f"sudo sh -c {shlex.quote(probe)}")
    return done.returncode == 0


def test_a_healthy_lab_passes_every_scenario(lab: Any, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_playbook("site.yml")
    assert_converged(run, lab.names())
    lines = summary(run)
    report(capsys, "healthy lab, first site.yml run", run)
    cells = matrix(lines)
    assert len(cells) == 11 and not [t for t, c in cells.items() if "FAIL" in c], lines
    assert cells["pod→outside, masqueraded"][:3] == ["ok", "ok", "ok"], lines
    assert set(cross(cells, "MTU, DF at pod MTU and 1 more").values()) == {"1450"}, lines
    assert lines[-1] == "every pod reaches every other pod; every scenario passed"
    assert any(line.startswith("time per group (slowest node): pods ") for line in lines)
    for name in lab.names():
        used = json.loads(ssh(lab, name, f"{PYFLANNEL} ipam -o json --valid-containers ''"))
        assert [u["used"] for u in used["usage"]] == [0], used
        assert "pyflannel-probe" not in ssh(lab, name, "ip netns list")
        assert ssh(lab, name, "pgrep -f '[c]onnectivity.responder' || true").strip() == ""


def test_the_suite_can_be_skipped_and_run_alone(lab: Any, timings: dict[str, float]) -> None:
    without = run_playbook("site.yml", *VERIFY, extra_vars={"flannel_verify_pods": False})
    assert without.returncode == 0, without.explain()
    assert "  probe pods    not run" in summary(without)
    assert not any(line.startswith("connectivity (") for line in summary(without))
    timings["verify without the suite"] = without.seconds
    alone = run_playbook("site.yml", *SUITE_ALONE)
    assert alone.returncode == 0 and "Verify | Check the agent" not in alone.output, alone.explain()
    assert summary(alone)[-1] == "every pod reaches every other pod; every scenario passed"
    assert alone.changed() == dict.fromkeys(lab.names(), 0), alone.explain()
    timings["the suite alone (with the preflight)"] = alone.seconds


def fetched_bundle(run: PlaybookRun, node: str) -> Path:
    """The diagnostics bundle the verify role's failure of a node names (the callback folds
    its message over lines)."""
    for block in run.output.split(f"fatal: [{node}]: FAILED! =>")[1:]:
        message = " ".join(block.split("\n\n", 1)[0].split())
        found = re.search(r"diagnostics bundle: (/\S+?\.tar\.gz)", message)
        if found is not None:
            return Path(found.group(1))
    raise AssertionError(f"no failure of {node} names a bundle:\n{run.explain()}")


def bundle_files(path: Path) -> dict[str, bytes]:
    """The files of a bundle, by their path inside its directory."""
    with tarfile.open(path, "r:gz") as tar:
        return {
            member.name.split("/", 1)[1]: handle.read()
            for member in tar.getmembers()
            if member.isfile() and (handle := tar.extractfile(member)) is not None
        }


def test_a_broken_checksum_path_fails_its_row_and_names_the_offload(
    lab: Any, capsys: pytest.CaptureFixture[str], timings: dict[str, float]
) -> None:
    shutil.rmtree(BUNDLES, ignore_errors=True)
    with fault_on_host(container_pid(lab, "node1")):
        broken = run_playbook("site.yml", *VERIFY)
    assert broken.returncode != 0 and "node1" in broken.failed_hosts(), broken.explain()
    # Every node that failed (the others' UDP to node1 breaks too) fetched its own bundle.
    bundles = {name: fetched_bundle(broken, name) for name in broken.failed_hosts()}
    assert sorted(p.name for p in BUNDLES.iterdir()) == sorted(p.name for p in bundles.values())
    bundle = bundles["node1"]
    assert bundle.parent == BUNDLES and bundle.name.startswith("node1-"), bundle
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o600
    assert stat.S_IMODE(BUNDLES.stat().st_mode) == 0o700
    files = bundle_files(bundle)
    with capsys.disabled():
        print(f"\n--- node1's diagnostics bundle, {bundle.stat().st_size} bytes: {bundle}")
        print("\n".join(f"  {name} ({len(data)} bytes)" for name, data in files.items()))
    manifest = json.loads(files["manifest.json"])
    assert manifest["node"] == "node1" and manifest["complete"] is True, files["errors.txt"]
    assert {"status.json", "ipam.json", "leases.json", "network-config.json",
            "files/subnet.env", "files/10-flannel.conflist", "files/pyflanneld.env",
            "kernel/devices.json", "kernel/routes.json", "kernel/neighbours.json",
            "kernel/fdb.json", "firewall/iptables-save.txt", "systemd/pyflanneld.service",
            "systemd/journal.txt", "versions.json"} <= set(files)  # fmt: skip
    assert json.loads(files["status.json"])["agent"]["state"] == "ready"
    assert b"ExecStart=/opt/pyflannel/venv/bin/pyflanneld" in files["systemd/pyflanneld.service"]
    assert b"pyflanneld" in files["systemd/journal.txt"]
    keyfile = ssh(lab, "node1", ". /etc/pyflannel/pyflanneld.env && echo $FLANNELD_ETCD_KEYFILE")
    key = ssh(lab, "node1", f"cat {keyfile.strip()}")
    key_lines = [line for line in key.splitlines() if line and not line.startswith("-----")]
    everything = b"\n".join(files.values())
    assert key_lines and not [line for line in key_lines if line.encode() in everything]
    assert f"FLANNELD_ETCD_KEYFILE={keyfile.strip()}".encode() in files["files/pyflanneld.env"]
    lines = summary(broken)
    report(capsys, "broken UDP checksum path on node1's underlay, offload on", broken)
    checksums = cross(matrix(lines), "UDP checksums, 200-datagram burst")
    assert checksums == {**dict.fromkeys(CROSS, "ok"), "1→2": "FAIL", "1→3": "FAIL"}, lines
    assert f"  {OFFLOAD_CAUSE}" in lines, lines
    assert set(cross(matrix(lines), "pod→pod TCP 1 MiB").values()) == {"ok"}, lines
    healthy = run_playbook("site.yml", *VERIFY)
    assert_converged(healthy, lab.names())
    timings["verify with the suite"] = healthy.seconds
    with capsys.disabled():
        added = healthy.seconds - timings["verify without the suite"]
        print(f"\nthe suite adds {added:.1f} s to the verify role: {timings}")


def test_offload_off_holds_across_restarts_and_device_loss_and_mends_the_broken_path(
    lab: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    off = {"flannel_vxlan_tx_checksum_offload": "off"}
    run = run_playbook("site.yml", extra_vars=off)
    assert_converged(run, lab.names())
    for name in lab.names():
        assert offload(lab, name) == {
            "device": "flannel.1", "enabled": False, "mode": "off", "auto_verdict": None,
        }  # fmt: skip
    ssh(lab, "node1", "systemctl restart pyflanneld")
    wait_for(lambda: agent_ready(lab, "node1"), "node1's agent after its restart")
    assert offload(lab, "node1")["enabled"] is False
    ssh(lab, "node1", "ip link delete flannel.1")
    wait_for(
        lambda: lab.ssh(lab.host("node1")).run("test -e /sys/class/net/flannel.1").returncode == 0,
        "node1's agent to recreate flannel.1",
    )
    assert offload(lab, "node1")["enabled"] is False
    with fault_on_host(container_pid(lab, "node1")):
        mended = run_playbook("site.yml", *VERIFY, extra_vars=off)
    report(capsys, "the same broken path with flannel_vxlan_tx_checksum_offload: off", mended)
    assert_converged(mended, lab.names())


def test_auto_turns_the_offload_off_where_the_checksum_row_fails(
    lab: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    auto = {"flannel_vxlan_tx_checksum_offload": "auto"}
    try:
        run = run_playbook("site.yml", extra_vars=auto)
        assert_converged(run, lab.names())
        assert {name: offload(lab, name)["enabled"] for name in lab.names()} == dict.fromkeys(
            lab.names(), True
        )
        with fault_on_host(container_pid(lab, "node1")):
            fixed = run_playbook("site.yml", *VERIFY, extra_vars=auto)
            report(capsys, "the broken path with flannel_vxlan_tx_checksum_offload: auto", fixed)
            assert_converged(fixed, lab.names())
            assert fixed.changed() == {"node1": 1, "node2": 0, "node3": 0}, fixed.explain()
            note = next(line for line in summary(fixed) if line.startswith("node1: turned"))
            assert note.startswith(
                "node1: turned tx checksum offload off on flannel.1 (auto): UDP checksums failed "
                "through it to node2 (200 of 200 datagrams lost; UdpInCsumErrors +"
            ), note
            again = run_playbook("site.yml", *VERIFY, extra_vars=auto)
            assert_converged(again, lab.names())
            assert again.changed() == dict.fromkeys(lab.names(), 0), again.explain()
        state = {name: offload(lab, name)["enabled"] for name in lab.names()}
        assert state == {"node1": False, "node2": True, "node3": True}
        ssh(lab, "node1", "systemctl restart pyflanneld")
        wait_for(lambda: agent_ready(lab, "node1"), "node1's agent after its restart")
        after = offload(lab, "node1")
        assert after["enabled"] is False
        assert after["auto_verdict"].startswith("UDP checksums failed through it to node2")
    finally:
        ssh(lab, "node1", f"rm -f {VERDICT_FILE}")


def test_a_forward_drop_policy_is_named_without_forward_rules_and_harmless_with_them(
    lab: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    no_rules = {"flannel_iptables_forward_rules": False}
    run = run_playbook("site.yml", extra_vars=no_rules)
    assert_converged(run, lab.names())
    # The agent leaves rules it installed before in place, as flanneld does: take them away.
    ssh(
        lab,
        "node2",
        "iptables -D FORWARD -m comment --comment 'flanneld forward' -j FLANNEL-FWD && "
        "iptables -F FLANNEL-FWD && iptables -X FLANNEL-FWD && iptables -P FORWARD DROP",
    )
    try:
        dropped = run_playbook("site.yml", *VERIFY, extra_vars=no_rules)
        lines = summary(dropped)
        report(capsys, "FORWARD policy DROP on node2, forward rules off", dropped)
        assert dropped.returncode != 0, dropped.explain()
        assert all(fetched_bundle(dropped, name).is_file() for name in dropped.failed_hosts())
        icmp = cross(matrix(lines), "pod→pod ICMP")
        assert icmp == {"1→2": "FAIL", "1→3": "ok", "2→1": "FAIL", "2→3": "FAIL", "3→1": "ok",
                        "3→2": "FAIL"}, lines  # fmt: skip
        assert f"  {FORWARD_CAUSE}" in lines, lines
        assert lines[-1].startswith("SOME PODS CANNOT REACH EACH OTHER")
        with_rules = run_playbook("site.yml")
        report(capsys, "FORWARD policy DROP on node2, forward rules on (the default)", with_rules)
        assert_converged(with_rules, lab.names())
        assert "FORWARD DROP" in ssh(lab, "node2", "iptables -S FORWARD | head -1").replace(
            "-P ", ""
        )
    finally:
        ssh(lab, "node2", "iptables -P FORWARD ACCEPT")


def test_pyflannel_connectivity_runs_the_scenarios_on_one_node(lab: Any) -> None:
    outside = lab.outside.target
    output = ssh(lab, "node3", f"{PYFLANNEL} connectivity --outside {outside}")
    lines = output.splitlines()
    assert matrix(lines)["pod→outside, masqueraded"] == ["ok"], output
    assert [cells for title, cells in matrix(lines).items() if "FAIL" in cells] == [], output
    assert lines[-1] == "every pod reaches every other pod; every scenario passed", output


def test_nothing_is_left_behind(lab: Any) -> None:
    for name in lab.names():
        leftovers = ssh(
            lab,
            name,
            f"ip netns list; pgrep -af '[c]onnectivity.responder'; ls /run/*.responder.pid "
            f"{VERDICT_FILE} 2>/dev/null; iptables -t mangle -S | grep -F {shlex.quote(COMMENT)}; "
            "iptables -S FORWARD | head -1; true",
        )
        assert leftovers.strip() == "-P FORWARD ACCEPT", f"{name}: {leftovers}"
        used = json.loads(ssh(lab, name, f"{PYFLANNEL} ipam -o json --valid-containers ''"))
        assert [u["used"] for u in used["usage"]] == [0], used
