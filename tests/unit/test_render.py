"""Renderers: flannel's files byte for byte, and the formats of our own files."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyflannel_controller.model.cluster import load_model
from pyflannel_controller.model.cluster_plan import plan_cluster
from pyflannel_controller.model.cluster_rules import SANDBOX_HIDDEN
from pyflannel_controller.render.render import (
    render_agent_env,
    render_conflist,
    render_net_conf,
    render_node,
    render_subnet_env,
    render_systemd_unit,
)
from pyflannel_runtime.wire.netconf import check_network_config, parse_config

GOLDEN = Path(__file__).parent.parent / "golden"

DUAL_STACK = {
    "flannel_network": "10.42.0.0/16",
    "flannel_enable_ipv6": True,
    "flannel_ipv6_network": "2001:cafe:42::/56",
    "nodes": {"server-0": {"subnet": "10.42.0.0/24", "ipv6_subnet": "2001:cafe:42::/64"}},
}


def golden(name: str) -> str:
    return (GOLDEN / name).read_bytes().decode("utf-8")


# --- flannel's own files, byte for byte ------------------------------------------------------
# (flannel-io/flannel Documentation/kube-flannel.yml and Documentation/configuration.md)


def test_default_conflist_is_the_manifests() -> None:
    assert render_conflist(load_model({})) == golden("manifest-10-flannel.conflist")


def test_default_net_conf_is_the_manifests() -> None:
    assert render_net_conf(load_model({})) == golden("manifest-net-conf.json")


def test_dual_stack_subnet_env_is_the_documented_one() -> None:
    model = load_model(DUAL_STACK)
    node = plan_cluster(model).node("server-0")
    assert render_subnet_env(model, node) == golden("dual-stack-subnet.env")


def test_subnet_env_needs_every_enabled_family_pinned() -> None:
    model = load_model({"nodes": {"n1": {}}})
    with pytest.raises(ValueError, match=r"nodes\.n1\.subnet: not pinned"):
        render_subnet_env(model, plan_cluster(model).node("n1"))


# --- the JSON files stay canonical and mean what the model says ---------------------------------

json_scalars = st.none() | st.booleans() | st.integers(-5, 5000) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(
    name=st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True),
    version=st.sampled_from(["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]),
    hairpin=st.booleans(),
    gateway=st.booleans(),
    portmap=st.booleans(),
    extra=st.dictionaries(
        st.sampled_from(["forceAddress", "mtu", "ipam", "runtimeConfig", "bridge"]),
        json_values,
        max_size=3,
    ),
    subnet_file=st.sampled_from(["/run/flannel/subnet.env", "/run/pyflannel/subnet.env"]),
)
def test_conflist_is_canonical_json_of_the_settings(
    name: str,
    version: str,
    hairpin: bool,
    gateway: bool,
    portmap: bool,
    extra: dict[str, Any],
    subnet_file: str,
) -> None:
    model = load_model(
        {
            "flannel_cni_network_name": name,
            "flannel_cni_version": version,
            "flannel_hairpin_mode": hairpin,
            "flannel_is_default_gateway": gateway,
            "flannel_portmap_enabled": portmap,
            "flannel_cni_delegate_extra": extra,
            "flannel_subnet_file": subnet_file,
        }
    )
    text = render_conflist(model)
    parsed = json.loads(text)
    assert text == json.dumps(parsed, indent=2) + "\n"

    flannel: dict[str, Any] = {"type": "flannel"}
    if subnet_file != "/run/flannel/subnet.env":
        flannel["subnetFile"] = subnet_file
    flannel["delegate"] = {"hairpinMode": hairpin, "isDefaultGateway": gateway, **extra}
    plugins = [flannel]
    if portmap:
        plugins.append({"type": "portmap", "capabilities": {"portMappings": True}})
    assert parsed == {"name": name, "cniVersion": version, "plugins": plugins}


@st.composite
def network_settings(draw: st.DrawFn) -> dict[str, Any]:
    backend = draw(st.sampled_from(["vxlan", "host-gw", "udp"]))
    data: dict[str, Any] = {"flannel_backend_type": backend}
    families = [(True, False)] if backend == "udp" else [(True, False), (False, True), (True, True)]
    ipv4, ipv6 = draw(st.sampled_from(families))
    if not ipv4:
        data["flannel_enable_ipv4"] = False
    if ipv4:
        prefix = draw(st.integers(8, 20))
        data["flannel_network"] = f"10.0.0.0/{prefix}"
        if draw(st.booleans()):
            data["flannel_subnet_len"] = draw(st.integers(prefix + 2, 28))
    if ipv6:
        prefix = draw(st.integers(32, 60))
        data["flannel_enable_ipv6"] = True
        data["flannel_ipv6_network"] = f"fd00::/{prefix}"
        if draw(st.booleans()):
            data["flannel_ipv6_subnet_len"] = draw(st.integers(prefix + 2, 120))
    data["flannel_enable_nftables"] = draw(st.booleans())
    if backend == "vxlan":
        for key, values in (
            ("flannel_vxlan_vni", st.integers(0, 16777215)),
            ("flannel_vxlan_port", st.integers(1, 65535)),
            ("flannel_mtu", st.integers(1400, 9000)),
            ("flannel_vxlan_direct_routing", st.booleans()),
        ):
            if draw(st.booleans()):
                data[key] = draw(values)
    if backend == "udp" and draw(st.booleans()):
        data["flannel_udp_port"] = draw(st.integers(1, 65535))
    return data


@settings(max_examples=150, deadline=None)
@given(network_settings())
def test_net_conf_decodes_in_flannel_to_the_models_config(data: dict[str, Any]) -> None:
    model = load_model(data)
    text = render_net_conf(model)
    assert text == json.dumps(json.loads(text), indent=2) + "\n"
    decoded = check_network_config(parse_config(text))
    assert decoded == check_network_config(model.to_network_config())
    assert decoded.backend_type == data["flannel_backend_type"]


# --- the agent's environment file ---------------------------------------------------------------


def systemd_value(raw: str) -> str:
    """Decode one EnvironmentFile value by the rules systemd.exec(5) documents."""
    if raw.startswith("'"):
        return raw[1 : raw.index("'", 1)]
    quoted = raw.startswith('"')
    chars = iter(raw[1:] if quoted else raw)
    value = ""
    for ch in chars:
        if quoted and ch == '"':
            return value
        if ch == "\\":
            following = next(chars)
            if quoted and following not in '"\\`$':
                value += ch
            value += following
        else:
            value += ch
    assert not quoted, f"unterminated value: {raw}"
    return value.strip()


def environment(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            key, _, raw = line.partition("=")
            values[key] = systemd_value(raw)
    return values


def test_agent_env_in_kube_mode() -> None:
    model = load_model(
        {
            "flannel_interface_regexp": "10\\.0\\.[0-2]\\.\\d{1,3}",
            "flannel_kubeconfig_file": "/etc/kubernetes/kubelet.conf",
            "nodes": {"worker-1": {"interface": "eth1", "public_ip": "192.0.2.11"}},
        }
    )
    text = render_agent_env(model, plan_cluster(model).node("worker-1"))
    assert text.endswith("\n")
    assert environment(text) == {
        "FLANNELD_SUBNET_FILE": "/run/flannel/subnet.env",
        "FLANNELD_KUBE_SUBNET_MGR": "true",
        "FLANNELD_NET_CONFIG_PATH": "/etc/kube-flannel/net-conf.json",
        "FLANNELD_KUBECONFIG_FILE": "/etc/kubernetes/kubelet.conf",
        "NODE_NAME": "worker-1",
        "FLANNELD_IFACE": "eth1",
        "FLANNELD_IFACE_REGEX": "10\\.0\\.[0-2]\\.\\d{1,3}",
        "FLANNELD_PUBLIC_IP": "192.0.2.11",
        "FLANNELD_IP_MASQ": "true",
        "FLANNELD_IPTABLES_FORWARD_RULES": "true",
        "FLANNELD_IPTABLES_RESYNC": "5",
        "FLANNELD_IP_BLACKHOLE_ROUTE": "false",
        "FLANNELD_VXLAN_TX_CHECKSUM_OFFLOAD": "on",
        "FLANNELD_HEALTHZ_IP": "0.0.0.0",
        "FLANNELD_HEALTHZ_PORT": "8081",
        "FLANNELD_METRICS": "true",
    }


def test_agent_env_in_etcd_mode() -> None:
    model = load_model(
        {
            "flannel_datastore": "etcd",
            "flannel_etcd_endpoints": ["https://192.0.2.1:2379", "https://192.0.2.2:2379"],
            "flannel_etcd_cafile": "/etc/etcd/ca.pem",
            "flannel_etcd_certfile": "/etc/etcd/client.pem",
            "flannel_etcd_keyfile": "/etc/etcd/client-key.pem",
            "flannel_etcd_username": "flannel",
            "flannel_etcd_password": 'p"a$s`w\\rd #1',
            "flannel_ip_masq": False,
            "flannel_healthz_port": 0,
            "flannel_metrics_enabled": False,
            "flannel_enable_ipv6": True,
            "flannel_ipv6_network": "fd00::/48",
            "nodes": {"n1": {"public_ipv6": "2001:db8::11", "interface_can_reach": "192.0.2.1"}},
        }
    )
    env = environment(render_agent_env(model, plan_cluster(model).node("n1")))
    assert "FLANNELD_KUBE_SUBNET_MGR" not in env and "NODE_NAME" not in env
    assert {k: v for k, v in env.items() if k.startswith("FLANNELD_ETCD")} == {
        "FLANNELD_ETCD_ENDPOINTS": "https://192.0.2.1:2379,https://192.0.2.2:2379",
        "FLANNELD_ETCD_PREFIX": "/coreos.com/network",
        "FLANNELD_ETCD_CAFILE": "/etc/etcd/ca.pem",
        "FLANNELD_ETCD_CERTFILE": "/etc/etcd/client.pem",
        "FLANNELD_ETCD_KEYFILE": "/etc/etcd/client-key.pem",
        "FLANNELD_ETCD_USERNAME": "flannel",
        "FLANNELD_ETCD_PASSWORD": 'p"a$s`w\\rd #1',
    }
    assert env["FLANNELD_SUBNET_LEASE_RENEW_MARGIN"] == "60"
    assert env["FLANNELD_PUBLIC_IPV6"] == "2001:db8::11"
    assert env["FLANNELD_IFACE_CAN_REACH"] == "192.0.2.1"
    assert (env["FLANNELD_IP_MASQ"], env["FLANNELD_HEALTHZ_PORT"]) == ("false", "0")
    assert env["FLANNELD_METRICS"] == "false"


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, "on"),
        ({"flannel_vxlan_tx_checksum_offload": "auto"}, "auto"),
        # YAML 1.1, as Ansible reads inventories: a bare `off` is a boolean.
        ({"flannel_vxlan_tx_checksum_offload": False}, "off"),
        ({"flannel_backend_type": "host-gw"}, None),
    ],
)
def test_agent_env_carries_the_vxlan_tx_checksum_offload(
    settings: dict[str, Any], expected: str | None
) -> None:
    model = load_model({**settings, "nodes": {"n1": {}}})
    env = environment(render_agent_env(model, plan_cluster(model).node("n1")))
    assert env.get("FLANNELD_VXLAN_TX_CHECKSUM_OFFLOAD") == expected


# --- the systemd unit -----------------------------------------------------------------------------


def unit_settings(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def test_systemd_unit_is_hardened() -> None:
    unit = unit_settings(render_systemd_unit(load_model({})))
    expected = {
        "Type": ["notify"],
        "Restart": ["always"],
        "RestartSec": ["5"],
        "ExecStart": ["/opt/pyflannel/venv/bin/pyflanneld"],
        "EnvironmentFile": ["-/etc/pyflannel/pyflanneld.env"],
        "CapabilityBoundingSet": ["CAP_NET_ADMIN CAP_NET_RAW"],
        "AmbientCapabilities": ["CAP_NET_ADMIN CAP_NET_RAW"],
        "NoNewPrivileges": ["yes"],
        "ProtectSystem": ["strict"],
        "RuntimeDirectory": ["flannel"],
        "RuntimeDirectoryPreserve": ["yes"],
        "ReadWritePaths": ["-/run/xtables.lock"],
        "ProtectHome": ["yes"],
        "PrivateTmp": ["yes"],
        "PrivateDevices": ["yes"],
        "LimitNOFILE": ["1048576"],
        "WantedBy": ["multi-user.target"],
    }
    assert {key: unit.get(key) for key in expected} == expected


@pytest.mark.parametrize("backend", ["vxlan", "udp"])
def test_the_sandbox_rules_of_the_model_are_the_units(backend: str) -> None:
    # The model refuses agent files in directories the unit hides, by the unit's own settings.
    unit = render_systemd_unit(load_model({"flannel_backend_type": backend})).splitlines()
    assert set(SANDBOX_HIDDEN) <= set(unit)


def test_systemd_unit_follows_backend_firewall_and_paths() -> None:
    unit = unit_settings(
        render_systemd_unit(
            load_model(
                {
                    "flannel_backend_type": "udp",
                    "flannel_enable_nftables": True,
                    "flannel_subnet_file": "/run/pyflannel/net/subnet.env",
                    "flannel_agent_venv": "/usr/local/lib/pyflannel",
                    "flannel_agent_restart_sec": 2,
                }
            )
        )
    )
    assert unit["DeviceAllow"] == ["/dev/net/tun rw"] and "PrivateDevices" not in unit
    assert "ReadWritePaths" not in unit and "ExecStartPre" not in unit
    assert unit["RuntimeDirectory"] == ["pyflannel/net"]
    assert unit["ExecStart"] == ["/usr/local/lib/pyflannel/bin/pyflanneld"]
    assert unit["RestartSec"] == ["2"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("backend", ["vxlan", "udp"])
def test_systemd_accepts_the_unit(tmp_path: Path, backend: str) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    agent = venv / "bin" / "pyflanneld"
    agent.write_text("#!/bin/sh\n")
    agent.chmod(0o755)
    model = load_model({"flannel_agent_venv": str(venv), "flannel_backend_type": backend})
    unit = tmp_path / "pyflanneld.service"
    unit.write_text(render_systemd_unit(model))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stderr, result.stdout) == (0, "", "")


# --- all of a node's files ----------------------------------------------------------------------


def test_render_node_paths_and_modes() -> None:
    model = load_model(DUAL_STACK)
    files = render_node(model, "server-0")
    assert {path: rendered.mode for path, rendered in files.items()} == {
        "etc/cni/net.d/10-flannel.conflist": 0o644,
        "etc/kube-flannel/net-conf.json": 0o644,
        "etc/pyflannel/pyflanneld.env": 0o600,
        "etc/systemd/system/pyflanneld.service": 0o644,
        "run/flannel/subnet.env": 0o644,
    }
    assert files["run/flannel/subnet.env"].content == golden("dual-stack-subnet.env")


def test_render_node_leaves_subnet_env_to_the_agent_when_not_pinned() -> None:
    files = render_node(
        load_model({"flannel_cni_conf_dir": "/etc/cni/conf", "nodes": {"a": {}}}), "a"
    )
    assert sorted(files) == [
        "etc/cni/conf/10-flannel.conflist",
        "etc/kube-flannel/net-conf.json",
        "etc/pyflannel/pyflanneld.env",
        "etc/systemd/system/pyflanneld.service",
    ]
