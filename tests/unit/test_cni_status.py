"""CNI STATUS of the flannel plugin: subnet.env, the agent's lease on flannel's devices, the
pool, and the delegate's own STATUS. (The kernel side runs in tests/integration/test_cni_status_kernel.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyflannel_runtime.cni.status_check import is_flannel_device, lease_mismatch
from pyflannel_runtime.wire.subnet_env import parse_cni_subnet_env
from tests.unit.cni_site import CniSite, install_fake_delegate

SUBNET_ENV = "FLANNEL_NETWORK=10.6.0.0/16\nFLANNEL_SUBNET=10.6.4.1/29\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"


def run_status(
    site: CniSite, env: dict[str, str] | None = None, **extra: object
) -> tuple[int, dict[str, object] | None]:
    code, stdout, _ = site.call("STATUS", {"FAKE_VERSIONS": '"1.0.0"'} | (env or {}), **extra)
    return code, json.loads(stdout) if stdout else None


@pytest.fixture
def node(tmp_path: Path) -> CniSite:
    site = CniSite(tmp_path, SUBNET_ENV)
    (site.bin / "bridge").unlink()
    for name in ("bridge", "fakebr"):
        install_fake_delegate(site.bin, name)
    return site


def test_ready_node(node: CniSite) -> None:
    assert run_status(node) == (0, None)
    assert not (node.log / "STATUS.stdin").exists()  # Debian's plugins stop at CNI 1.0.0


def test_missing_subnet_env_is_not_available(node: CniSite) -> None:
    node.subnet_env.unlink()
    code, error = run_status(node)
    assert code == 1 and error is not None
    assert error["code"] == 50
    assert error["msg"] == (
        "flannel is not ready on this node: failed to load flannel 'subnet.env' file: "
        f"open {node.subnet_env}: no such file or directory. "
        "The flannel agent writes it once it holds a lease: check its log."
    )


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "is a directory"),
        ("FLANNEL_MTU=1450\n", "is missing FLANNEL_NETWORK"),
        (SUBNET_ENV.replace("/29", "/40"), "invalid CIDR address"),
    ],
)
def test_unreadable_subnet_env_is_not_available(
    node: CniSite, content: str | None, reason: str
) -> None:
    node.subnet_env.unlink()
    if content is None:
        node.subnet_env.mkdir()
    else:
        node.subnet_env.write_text(content)
    code, error = run_status(node)
    assert code == 1 and error is not None
    assert error["code"] == 50
    assert reason in str(error["msg"])


def test_exhausted_pool_is_not_available(node: CniSite) -> None:
    node.store.mkdir(parents=True)
    for last in range(2, 7):  # 10.6.4.0/29: host-local hands out .2 to .6
        (node.store / f"10.6.4.{last}").write_bytes(f"c{last}\r\neth0".encode())
    code, error = run_status(node)
    assert code == 1 and error is not None
    assert error["code"] == 50
    assert str(error["msg"]).startswith("no free pod address in 10.6.4.0/29: 5 of 5 are allocated")
    (node.store / "10.6.4.6").unlink()
    assert run_status(node) == (0, None)


def test_another_ipam_is_not_counted(node: CniSite) -> None:
    node.store.mkdir(parents=True)
    for last in range(2, 7):
        (node.store / f"10.6.4.{last}").write_bytes(b"c\r\neth0")
    assert run_status(node, ipam={"type": "dhcp", "dataDir": str(node.root / "ipam")}) == (0, None)


def test_status_goes_to_a_delegate_that_speaks_1_1_0(node: CniSite) -> None:
    assert run_status(node, {"FAKE_VERSIONS": '"1.0.0","1.1.0"'}, delegate={"type": "fakebr"}) == (
        0,
        None,
    )
    forwarded = json.loads((node.log / "STATUS.stdin").read_bytes())
    assert forwarded["cniVersion"] == "1.1.0"
    assert forwarded["type"] == "fakebr"
    assert forwarded["ipam"]["ranges"] == [[{"subnet": "10.6.4.0/29"}]]
    code, error = run_status(node, {"FAKE_VERSIONS": '"1.1.0"', "FAKE_FAIL": "1"})
    assert code == 1
    assert error == {"code": 50, "msg": "bridge is down"}


def test_a_missing_delegate_is_not_available(node: CniSite) -> None:
    code, error = run_status(node, delegate={"type": "nosuchplugin"})
    assert code == 1 and error is not None
    assert error["code"] == 50
    assert str(error["msg"]).startswith('delegate STATUS: failed to find plugin "nosuchplugin"')


@pytest.mark.parametrize(
    ("name", "flannel"),
    [
        ("flannel.1", True),
        ("flannel.4096", True),
        ("flannel-v6.1", True),
        ("flannel0", True),
        ("flannel", False),
        ("flannel.x", False),
        ("flannel-v6.", False),
        ("cni0", False),
        ("flannelx1", False),
    ],
)
def test_flannel_device_names(name: str, flannel: bool) -> None:
    assert is_flannel_device(name) is flannel


ENV = parse_cni_subnet_env(
    SUBNET_ENV + "FLANNEL_IPV6_NETWORK=fd06::/48\nFLANNEL_IPV6_SUBNET=fd06:0:4::1/64\n", "x"
)
V4_ONLY = parse_cni_subnet_env(SUBNET_ENV, "x")


@pytest.mark.parametrize(
    ("env", "addresses", "mismatch"),
    [
        (ENV, [], None),
        (ENV, [("flannel.1", 4, "10.6.4.0")], None),
        (ENV, [("flannel0", 4, "10.6.4.0")], None),
        (ENV, [("flannel.1", 4, "10.6.4.0"), ("flannel-v6.1", 6, "fd06:0:4::")], None),
        (
            ENV,
            [("flannel.1", 4, "10.6.9.0")],
            "flannel.1 carries 10.6.9.0, the agent's current IPv4 lease",
        ),
        (
            ENV,
            [("flannel.1", 4, "10.6.4.0"), ("flannel-v6.1", 6, "fd06:0:9::")],
            "flannel-v6.1 carries fd06:0:9::, the agent's current IPv6 lease",
        ),
        # a device left from an earlier VNI does not hide the current one
        (ENV, [("flannel.1", 4, "10.6.9.0"), ("flannel.2", 4, "10.6.4.0")], None),
        (
            V4_ONLY,
            [("flannel-v6.1", 6, "fd06:0:4::")],
            "flannel-v6.1 carries fd06:0:4::, the agent's current IPv6 lease",
        ),
    ],
)
def test_lease_mismatch(
    env: object, addresses: list[tuple[str, int, str]], mismatch: str | None
) -> None:
    assert lease_mismatch(env, addresses) == mismatch  # type: ignore[arg-type]
