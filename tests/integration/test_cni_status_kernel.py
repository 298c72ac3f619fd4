"""CNI STATUS against the kernel: a real agent in the netns lab, and flannel-named devices.

Before the agent wrote subnet.env the network is not available (code 50); once it runs, it
is. On vxlan the agent's lease is on flannel.1, so a subnet.env naming another subnet is
caught (code 51); host-gw keeps no kernel record of its own lease, so there subnet.env is
taken as it is.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from pyflannel_lab.netns_agents import AgentLab
from pyflannel_lab.netns_lab import LabHost

pytestmark = pytest.mark.root


def status(lab: AgentLab, host: LabHost) -> tuple[int, dict[str, object] | None]:
    done = lab.run_cni(host, "STATUS", lab.cni_config(host, cniVersion="1.1.0"))
    return done.returncode, json.loads(done.stdout) if done.stdout else None


def leased_subnet(subnet_env: str) -> str:
    line = next(x for x in subnet_env.splitlines() if x.startswith("FLANNEL_SUBNET="))
    return line.split("=", 1)[1]


@pytest.mark.parametrize("backend", ["vxlan", "host-gw"])
def test_status_fails_until_the_agent_wrote_subnet_env(backend: str) -> None:
    with AgentLab({"Type": backend}, hosts=1, prefix="pst", lab_pods=False) as lab:
        host = lab.net.hosts[0]
        code, error = status(lab, host)
        assert code == 1 and error is not None
        assert error["code"] == 50
        assert "failed to load flannel 'subnet.env' file" in str(error["msg"])

        lab.start_agent(host)
        written = lab.wait_ready(host)
        assert status(lab, host) == (0, None)

        # subnet.env of an earlier lease: the node's subnet changed under it
        lease = leased_subnet(written)
        other = "10.244.250.1/24" if not lease.startswith("10.244.250.") else "10.244.251.1/24"
        lab.subnet_file(host).write_text(written.replace(lease, other))
        code, error = status(lab, host)
        if backend == "vxlan":
            assert code == 1 and error is not None
            assert error["code"] == 51
            network_address = lease.split("/")[0].rsplit(".", 1)[0] + ".0"
            assert f"flannel.1 carries {network_address}, the agent's current IPv4 lease" in str(
                error["msg"]
            )
        else:
            assert (code, error) == (0, None)
        lab.subnet_file(host).write_text(written)
        assert status(lab, host) == (0, None)


@pytest.fixture
def bare_host() -> Iterator[tuple[AgentLab, LabHost]]:
    with AgentLab({"Type": "vxlan"}, hosts=1, prefix="psd", lab_pods=False) as lab:
        yield lab, lab.net.hosts[0]


def test_udp_and_ipv6_devices_are_read(bare_host: tuple[AgentLab, LabHost]) -> None:
    """Devices named as the udp and IPv6 vxlan backends name theirs (veths stand in: only the
    name and the addresses count), with link-local addresses the check must ignore."""
    lab, host = bare_host

    def ip(*args: str) -> None:
        subprocess.run(["ip", "-n", host.ns, *args], check=True, capture_output=True)

    ip("link", "add", "flannel0", "type", "veth", "peer", "name", "fl0peer")
    ip("link", "add", "flannel-v6.1", "type", "veth", "peer", "name", "fl6peer")
    ip("addr", "add", "10.244.9.0/32", "dev", "flannel0")
    ip("addr", "add", "fd00:244:9::/128", "dev", "flannel-v6.1", "nodad")
    for name in ("flannel0", "fl0peer", "flannel-v6.1", "fl6peer"):
        ip("link", "set", name, "up")
    subnet_env = lab.subnet_file(host)
    subnet_env.parent.mkdir(parents=True, exist_ok=True)
    v4 = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.9.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n"
    v6 = "FLANNEL_IPV6_NETWORK=fd00:244::/48\nFLANNEL_IPV6_SUBNET=fd00:244:9::1/64\n"

    subnet_env.write_text(v4 + v6)
    assert status(lab, host) == (0, None)

    subnet_env.write_text(v4)  # the agent leases IPv6 too, subnet.env says nothing of it
    code, error = status(lab, host)
    assert code == 1 and error is not None and error["code"] == 51
    assert "flannel-v6.1 carries fd00:244:9::, the agent's current IPv6 lease" in str(error["msg"])

    subnet_env.write_text(v4.replace("10.244.9.1", "10.244.8.1") + v6)
    code, error = status(lab, host)
    assert code == 1 and error is not None and error["code"] == 51
    assert "names subnet 10.244.8.0/24, fd00:244:9::/64, but flannel0 carries 10.244.9.0" in str(
        error["msg"]
    )
