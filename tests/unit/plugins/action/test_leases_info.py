"""The leases_info action plugin's controller-side part: the inventory's hosts and the addresses
each is known by, from the preflight's facts and ansible_host."""

from __future__ import annotations

from ansible_collections.pyflannel.network.plugins.action.leases_info import (
    host_addresses,
    inventory_hosts,
)


def test_the_preflights_addresses_then_ansible_host_each_once() -> None:
    host_vars = {
        "_flannel_node": {"public_ip": "198.51.100.11", "public_ipv6": "2001:db8::11"},
        "ansible_facts": {
            "pyflannel_host": {
                "links": [
                    {"name": "lo", "addrs": [{"ip": "127.0.0.1"}, {"ip": "::1"}]},
                    {"name": "eth0", "addrs": [{"ip": "198.51.100.11"}, {"ip": "fe80::1"}]},
                    {"name": "eth1", "addrs": [{"ip": "192.0.2.11"}]},
                ]
            }
        },
        "ansible_host": "203.0.113.11",
    }
    assert host_addresses("node1", host_vars) == [
        "198.51.100.11",
        "2001:db8::11",
        "192.0.2.11",
        "203.0.113.11",
    ]


def test_without_facts_ansible_host_or_the_name_when_it_is_an_address() -> None:
    assert host_addresses("node1", {"ansible_host": "198.51.100.11"}) == ["198.51.100.11"]
    assert host_addresses("198.51.100.12", {}) == ["198.51.100.12"]
    assert host_addresses("node3.example", {"ansible_host": "node3.example"}) == []
    unset = {"_flannel_node": {"public_ip": None, "public_ipv6": None}, "ansible_host": "0.0.0.0"}
    assert host_addresses("node4", unset) == []


def test_every_host_of_the_inventory() -> None:
    hostvars = {"a": {"ansible_host": "192.0.2.1"}, "b": {}}
    assert inventory_hosts(["a", "b"], hostvars) == [
        {"name": "a", "addresses": ["192.0.2.1"]},
        {"name": "b", "addresses": []},
    ]
