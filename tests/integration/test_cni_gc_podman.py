"""Leaked pod addresses with a real consumer, and getting them back without touching the rest.

podman (CNI backend, confined by ``podmanlab``) fills a /29 (host-local hands out five
addresses) with pods. Two pods are then lost the way a node loses them in the field: the
runtime forgets them while the CNI plugin cannot run (podman logs "Unable to clean up network",
removes the network namespace and its record), so DEL never reaches flannel and their
addresses and state files stay. The next pod cannot start ("no IP addresses available"). GC,
through the plugin's CNI verb and through ``pyflannel ipam gc``, releases exactly the lost
pods' addresses; the survivors keep their address, state file and connectivity, and the next
pod starts.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.podmanlab import IMAGE, PodmanLab, podman_lab_in_scratch

pytestmark = [pytest.mark.root, pytest.mark.podman]

PYFLANNEL = str(Path(sys.executable).with_name("pyflannel"))


@pytest.fixture
def lab() -> Iterator[PodmanLab]:
    with podman_lab_in_scratch(prefixlen=29) as lab:
        yield lab


def start_pods(lab: PodmanLab, names: list[str]) -> dict[str, str]:
    for name in names:
        lab.podman("run", "-d", "--name", name, "--network", lab.network, IMAGE, "sleep", "3600")
    return {name: lab.container_ip(name) for name in names}


def container_id(lab: PodmanLab, name: str) -> str:
    return lab.podman("inspect", name, "--format", "{{.ID}}").stdout.strip()


def live_container_ids(lab: PodmanLab) -> list[str]:
    listing = lab.podman("ps", "--all", "--no-trunc", "--format", "{{.ID}}").stdout
    return listing.split()


def lose_without_del(lab: PodmanLab, names: list[str]) -> None:
    """podman removes the pods while the flannel plugin is missing from its CNI path: DEL
    fails, and podman drops the network namespace and its record all the same."""
    namespaces = [
        lab.podman("inspect", name, "--format", "{{.NetworkSettings.SandboxKey}}").stdout.strip()
        for name in names
    ]
    plugin, hidden = lab.cni_bin / "flannel", lab.cni_bin / "flannel.hidden"
    plugin.rename(hidden)
    try:
        lab.podman("rm", "--force", "--time", "0", *names)
    finally:
        hidden.rename(plugin)
    assert not set(names) & set(lab.podman("ps", "--all", "--format", "{{.Names}}").stdout.split())
    for path in namespaces:
        assert path.startswith("/run/netns/")
        assert lab.enter(["test", "-e", path], check=False).returncode == 1


def assert_next_add_fails_exhausted(lab: PodmanLab) -> None:
    refused = lab.podman("run", "--rm", "--network", lab.network, IMAGE, "true", check=False)
    assert refused.returncode != 0
    assert "no IP addresses available in range set" in refused.stderr


def survivors(lab: PodmanLab, ips: dict[str, str]) -> dict[str, tuple[str, str, bytes, bytes]]:
    """Each survivor's address, container ID, state file and host-local file, after checking
    that the node reaches it."""
    seen = {}
    for name, ip in ips.items():
        lab.enter(["busybox", "ping", "-c1", "-W2", ip])
        cid = container_id(lab, name)
        seen[name] = (
            lab.container_ip(name),
            cid,
            (lab.data_dir / cid).read_bytes(),
            (lab.ipam_dir / lab.network / ip).read_bytes(),
        )
    return seen


def plugin_gc(lab: PodmanLab, valid: list[str]) -> tuple[int, str]:
    """The flannel plugin's GC, as a CNI 1.1 runtime calls it for the conflist's plugin."""
    conflist = json.loads(lab.conflist.read_text())
    conf = dict(conflist["plugins"][0], name=lab.network, cniVersion="1.1.0")
    conf["cni.dev/valid-attachments"] = [{"containerID": c, "ifname": "eth0"} for c in valid]
    done = lab.enter(
        ["env", "CNI_COMMAND=GC", f"CNI_PATH={lab.cni_bin}", str(lab.cni_bin / "flannel")],
        check=False,
        input=json.dumps(conf),
    )
    assert done.stdout == "" or done.returncode != 0
    return done.returncode, done.stdout + done.stderr


def pyflannel(lab: PodmanLab, *args: str) -> tuple[int, str]:
    done = lab.enter(
        lab.with_podman_env(PYFLANNEL, "ipam", *args, "--conflist", str(lab.conflist)),
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def fill_and_lose_two(lab: PodmanLab) -> tuple[dict[str, str], dict[str, str]]:
    """Five pods fill the /29; two are lost without DEL. (lost, kept) name -> address."""
    ips = start_pods(lab, [f"{lab.network}-p{i}" for i in range(5)])
    assert sorted(lab.leased_ips()) == sorted(ips.values())
    assert_next_add_fails_exhausted(lab)
    lost = dict(list(ips.items())[:2])
    kept = dict(list(ips.items())[2:])
    lost_ids = {container_id(lab, name) for name in lost}
    lose_without_del(lab, list(lost))
    # leaked: addresses and state files stay although podman forgot the pods
    assert sorted(lab.leased_ips()) == sorted(ips.values())
    assert lost_ids <= set(lab.saved_configs())
    assert_next_add_fails_exhausted(lab)
    return lost, kept


def assert_only_lost_released(
    lab: PodmanLab, kept: dict[str, str], before: dict[str, tuple[str, str, bytes, bytes]]
) -> None:
    assert lab.leased_ips() == sorted(kept.values())
    assert lab.saved_configs() == sorted(cid for _, cid, _, _ in before.values())
    assert survivors(lab, kept) == before


def assert_next_add_succeeds(lab: PodmanLab, released: set[str], kept: dict[str, str]) -> None:
    target = next(iter(kept.values()))
    probe = lab.podman(
        "run", "--rm", "--network", lab.network, IMAGE, "sh", "-c",
        f"ip -4 -o addr show eth0; ping -c1 -W2 {target} >/dev/null && echo reached",
    ).stdout  # fmt: skip
    address = probe.split("inet ", 1)[1].split("/", 1)[0]
    assert address in released
    assert "reached" in probe


def test_cni_gc_releases_the_lost_pods_addresses_and_nothing_else(lab: PodmanLab) -> None:
    lost, kept = fill_and_lose_two(lab)
    before = survivors(lab, kept)
    valid = live_container_ids(lab)
    assert len(valid) == 3

    status, output = plugin_gc(lab, valid)
    assert status == 0, output
    assert output.count("GC released container") == 2
    assert_only_lost_released(lab, kept, before)

    # a second GC finds nothing to do
    status, output = plugin_gc(lab, valid)
    assert (status, output) == (0, "")
    assert_only_lost_released(lab, kept, before)

    assert_next_add_succeeds(lab, set(lost.values()), kept)
    assert_only_lost_released(lab, kept, before)


def test_pyflannel_ipam_shows_and_releases_the_leaks(lab: PodmanLab) -> None:
    lost, kept = fill_and_lose_two(lab)
    before = survivors(lab, kept)

    status, output = pyflannel(lab, "--output", "json")
    assert status == 1, output
    report = json.loads(output)
    assert report["usage"] == [
        {
            "family": "ipv4",
            "subnet": lab.subnet,
            "capacity": 5,
            "used": 5,
            "free": 0,
            "leaked": 2,
        }
    ]
    assert report["runtime"] == {"sources": ["podman"], "containers": 3}
    leaked = {a["address"]: a["reasons"] for a in report["allocations"] if a["leaked"]}
    assert leaked == {ip: ["container unknown to the runtime"] for ip in lost.values()}
    if os.environ.get("PYFLANNEL_IPAM_SAMPLE"):  # the table, for a report
        print(pyflannel(lab)[1])

    status, output = pyflannel(lab, "gc", "--dry-run", "--cni-path", str(lab.cni_bin))
    assert status == 0, output
    assert output.count("would release") == 2
    assert sorted(lab.leased_ips()) == sorted([*lost.values(), *kept.values()])

    status, output = pyflannel(lab, "gc", "--cni-path", str(lab.cni_bin))
    assert status == 0, output
    assert sorted(
        line.split()[1] for line in output.splitlines() if line.startswith("released")
    ) == sorted(lost.values())
    assert_only_lost_released(lab, kept, before)

    status, output = pyflannel(lab)
    assert status == 0, output
    assert_next_add_succeeds(lab, set(lost.values()), kept)
