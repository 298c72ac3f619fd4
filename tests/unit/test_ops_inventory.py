"""ops/inventory.py: an inventory's flannel variables checked as one cluster, problems named by
host and variable."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network
from typing import Any

import pytest

from pyflannel_runtime.ops.inventory import InventoryError, check_inventory

HOSTS = ("h1", "h2", "h3")
ETCD = {
    "flannel_datastore": "etcd",
    "flannel_etcd_endpoints": ["https://198.51.100.11:2379"],
    "flannel_etcd_cafile": "/etc/pyflannel/pki/ca.crt",
    "flannel_etcd_certfile": "/etc/pyflannel/pki/client.crt",
    "flannel_etcd_keyfile": "/etc/pyflannel/pki/client.key",
}


def node_facts(
    address: str, prefixlen: int = 24, mtu: int = 1500, vxlan: bool = True
) -> dict[str, Any]:
    return {
        "links": [
            {
                "name": "lo",
                "index": 1,
                "mtu": 65536,
                "addrs": [{"ip": "127.0.0.1", "prefixlen": 8}],
            },
            {
                "name": "eth0",
                "index": 2,
                "mtu": mtu,
                "addrs": [{"ip": address, "prefixlen": prefixlen, "flags": 0x80}],
            },
        ],
        "default_route": {"4": 2, "6": None},
        "routes": {},
        "backends": {
            "vxlan": {"supported": vxlan, "reason": "" if vxlan else "Unknown device type."},
            "udp": {"supported": True, "reason": ""},
            "host-gw": {"supported": True, "reason": ""},
        },
    }


def lab_facts(**changes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    facts = {h: node_facts(f"198.51.100.{11 + i}") for i, h in enumerate(HOSTS)}
    facts.update(changes)
    return facts


def inventory(common: dict[str, Any] | None = None, **per_host: dict[str, Any]) -> dict[str, Any]:
    shared = {**ETCD, **(common or {})}
    return {h: {**shared, **per_host.get(h, {})} for h in HOSTS}


def problems(settings: dict[str, Any], facts: Any = None, **kw: Any) -> list[str]:
    with pytest.raises(InventoryError) as err:
        check_inventory(settings, facts, **kw)
    return err.value.problems


def test_a_lab_inventory_plans_each_node_from_its_facts() -> None:
    checked = check_inventory(
        inventory(h2={"flannel_node_subnet": "10.244.7.0/24"}),
        lab_facts(h3=node_facts("198.51.100.13", mtu=9000)),
    )
    assert checked.model.flannel_datastore == "etcd"
    h2 = checked.node("h2")
    assert h2.subnet == IPv4Network("10.244.7.0/24") and h2.mtu == 1450
    assert checked.node("h3").mtu == 9000 - 50
    assert checked.networks["h1"].interface.ext_addr == IPv4Address("198.51.100.11")
    assert checked.networks["h1"].network == IPv4Network("198.51.100.0/24")


def test_a_host_that_differs_on_a_cluster_setting_is_named() -> None:
    found = problems(inventory(h2={"flannel_backend_type": "host-gw"}))
    assert found == [
        "h2: flannel_backend_type: 'host-gw' here but the default on h1, h3; "
        "cluster-wide settings must be equal on every flannel node"
    ]


def test_a_subnet_length_that_does_not_fit_the_network_names_every_host() -> None:
    found = problems(inventory({"flannel_network": "10.244.0.0/16", "flannel_subnet_len": 12}))
    assert len(found) == 3
    assert all(
        p.startswith(f"{h}: flannel_subnet_len: ") for h, p in zip(HOSTS, found, strict=True)
    )


def test_an_unknown_backend_is_named() -> None:
    found = problems(inventory({"flannel_backend_type": "geneve"}))
    assert found[0].startswith("h1: flannel_backend_type: ") and "vxlan" in found[0]


def test_overlapping_pinned_subnets_name_both_hosts() -> None:
    found = problems(
        inventory(
            h1={"flannel_node_subnet": "10.244.3.0/24"},
            h3={"flannel_node_subnet": "10.244.3.0/24"},
        )
    )
    assert found == [
        "h3: flannel_node_subnet: 10.244.3.0/24 overlaps h1's flannel_node_subnet 10.244.3.0/24"
    ]


def test_a_missing_interface_fails_with_flannels_message_and_the_hosts_interfaces() -> None:
    found = problems(inventory(h3={"flannel_interface": "eth9"}), lab_facts())
    assert len(found) == 1
    assert found[0].startswith("h3: flannel_interface: ")
    assert "eth9" in found[0] and "(interfaces on h3: lo, eth0)" in found[0]


def test_a_misspelt_variable_is_caught_with_a_suggestion() -> None:
    found = problems(inventory(h1={"flannel_backnd_type": "vxlan"}))
    assert found == [
        "h1: flannel_backnd_type: unknown variable (did you mean flannel_backend_type?)"
    ]


def test_role_variables_named_as_known_are_accepted() -> None:
    settings = inventory({"flannel_etcd_data_dir": "/var/lib/etcd"})
    check_inventory(settings, known_variables=["flannel_etcd_data_dir"])


def test_a_value_equal_to_the_default_is_not_a_choice() -> None:
    # Role defaults mirror the model: the etcd prefix's default with the kubernetes datastore
    # must not count as an etcd-only setting given by the user.
    settings = {
        h: {"flannel_etcd_prefix": "/coreos.com/network", "flannel_healthz_ip": "0.0.0.0"}
        for h in HOSTS
    }
    assert check_inventory(settings).model.flannel_datastore == "kubernetes"


def test_a_kernel_without_the_backend_is_named() -> None:
    found = problems(inventory(), lab_facts(h2=node_facts("198.51.100.12", vxlan=False)))
    assert found == [
        "h2: flannel_backend_type: the kernel of h2 cannot create vxlan devices "
        "(Unknown device type.)"
    ]


def test_host_gw_needs_one_l2_segment() -> None:
    found = problems(
        inventory({"flannel_backend_type": "host-gw"}),
        lab_facts(h3=node_facts("203.0.113.13")),
    )
    needs = "flannel_backend_type: host-gw needs every node on one L2 segment, but "
    assert any(p.startswith(f"h3: {needs}203.0.113.13 (h3) is not on h1's eth0") for p in found)
    assert any("198.51.100.11 (h1) is not on h3's eth0 network 203.0.113.0/24" in p for p in found)
