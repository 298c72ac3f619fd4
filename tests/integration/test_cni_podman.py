"""podman (CNI backend) runs containers on a kube-flannel-shaped conflist: flannel + portmap.

The lab (``podmanlab``) confines podman to a private mount and network namespace and a scratch
dir; the root namespace is checked to be unchanged afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.integration.podmanlab import IMAGE, PodmanLab, podman_lab_in_scratch

pytestmark = [pytest.mark.root, pytest.mark.podman]


@pytest.fixture
def podman_lab() -> Iterator[PodmanLab]:
    with podman_lab_in_scratch() as lab:
        yield lab


def test_podman_runs_containers_through_flannel_and_portmap(podman_lab: PodmanLab) -> None:
    lab = podman_lab
    lab.podman(
        "run", "-d", "--name", f"{lab.network}-web", "--network", lab.network,
        "-p", "18080:80", IMAGE, "httpd", "-f", "-p", "80", "-h", "/www",
    )  # fmt: skip
    web = f"{lab.network}-web"
    web_ip = lab.container_ip(web)
    assert web_ip.startswith(lab.gateway.rsplit(".", 1)[0] + ".")
    assert lab.leased_ips() == [web_ip]
    [container_id] = lab.saved_configs()
    saved = json.loads((lab.data_dir / container_id).read_bytes())
    assert saved["bridge"] == lab.bridge
    assert saved["ipam"]["ranges"] == [[{"subnet": lab.subnet}]]

    # a second container: its own address, the gateway, the web container by address
    probe = lab.podman(
        "run", "--rm", "--network", lab.network, IMAGE, "sh", "-c",
        f"ip -4 -o addr show eth0; ping -c1 -W2 {lab.gateway} >/dev/null && echo gw-ok; "
        f"wget -qO- http://{web_ip}/",
    ).stdout  # fmt: skip
    assert f"inet {lab.gateway.rsplit('.', 1)[0]}." in probe
    assert "gw-ok" in probe
    assert f"hello from {lab.network}" in probe
    # --rm ran DEL for the probe: only the web container keeps an address and a saved config
    assert lab.leased_ips() == [web_ip]
    assert lab.saved_configs() == [container_id]

    # -p through the chained portmap: host port 18080 on the node reaches the container
    fetched = lab.enter(["busybox", "wget", "-qO-", f"http://{lab.gateway}:18080/"]).stdout
    assert fetched == f"hello from {lab.network}\n"

    lab.podman("stop", "--time", "0", web)
    assert lab.leased_ips() == []
    assert lab.saved_configs() == []
    lab.podman("rm", web)


def test_a_pod_starts_after_the_nodes_subnet_changed_under_the_bridge(
    podman_lab: PodmanLab,
) -> None:
    """The bridge keeps the previous subnet's gateway (a new SubnetLen, a datastore switch):
    the plugin removes it and the pod starts; an address outside the Network is never
    removed (then the bridge plugin's own refusal stands)."""
    lab = podman_lab
    lab.podman("run", "--rm", "--network", lab.network, IMAGE, "true")
    base = lab.gateway.rsplit(".", 1)[0]
    (lab.root / "subnet.env").write_text(
        f"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET={base}.129/25\n"
        "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
    )
    outside = "192.0.2.201/32"
    lab.enter(["ip", "addr", "add", outside, "dev", lab.bridge])
    refused = lab.podman("run", "--rm", "--network", lab.network, IMAGE, "true", check=False)
    assert refused.returncode != 0
    assert "already has an IP address different from" in refused.stderr, refused.stderr
    held = lab.enter(["ip", "-4", "-o", "addr", "show", "dev", lab.bridge]).stdout
    assert outside in held, held

    lab.enter(["ip", "addr", "del", outside, "dev", lab.bridge])
    probe = lab.podman(
        "run", "--rm", "--network", lab.network, IMAGE, "ip", "-4", "-o", "addr", "show", "eth0"
    ).stdout  # fmt: skip
    assert f"inet {base}." in probe and "/25" in probe, probe
    held = lab.enter(["ip", "-4", "-o", "addr", "show", "dev", lab.bridge]).stdout
    assert held.split()[3] == f"{base}.129/25" and len(held.splitlines()) == 1, held
    assert lab.leased_ips() == [] and lab.saved_configs() == []
