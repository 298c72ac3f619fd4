"""ops/inventory.py: an inventory's flannel variables checked as one cluster, problems named by
host and variable."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

import pytest

from pyflannel_controller.inventory import InventoryError, check_inventory

HOSTS = ("h1", "h2", "h3")
ETCD = {
    "flannel_datastore": "etcd",
    "flannel_etcd_endpoints": ["https://198.51.100.11:2379"],
    "flannel_etcd_cafile": "/etc/pyflannel/pki/ca.crt",
    "flannel_etcd_certfile": "/etc/pyflannel/pki/client.crt",
    "flannel_etcd_keyfile": "/etc/pyflannel/pki/client.key",
}


def node_facts(
    address: str,
    prefixlen: int = 24,
    mtu: int = 1500,
    vxlan: bool = True,
    files: dict[str, bool] | None = None,
) -> dict[str, Any]:
    return {
        "files": files or {},
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


def test_a_removed_variable_says_what_replaced_it() -> None:
    found = problems(inventory(h2={"flannel_reset_flush_iptables": True}))
    assert found == [
        "h2: flannel_reset_flush_iptables: removed: reset.yml removes flannel's own iptables "
        "chains and the jumps into them, and flushes no table"
    ]


def test_role_variables_named_as_known_are_accepted() -> None:
    settings = inventory({"flannel_etcd_data_dir": "/var/lib/etcd"})
    checked = check_inventory(settings, lab_facts(), known_variables=["flannel_etcd_data_dir"])
    assert tuple(sorted(checked.networks)) == HOSTS
    # the same inventory, with the name not declared by any role, is refused for it on every host
    refused = problems(settings)
    assert [p.split(" (")[0] for p in refused] == [
        f"{h}: flannel_etcd_data_dir: unknown variable" for h in HOSTS
    ]


def test_a_value_equal_to_the_default_is_not_a_choice() -> None:
    # Role defaults mirror the model: the etcd prefix's default with the kubernetes datastore
    # must not count as an etcd-only setting given by the user.
    settings = {
        h: {
            "flannel_etcd_prefix": "/coreos.com/network",
            "flannel_healthz_ip": "0.0.0.0",
            "flannel_kubeconfig_file": "/etc/kubernetes/kubelet.conf",
        }
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


# --- the Kubernetes datastore's kubeconfig ---------------------------------------------------

KUBE = {"flannel_datastore": "kubernetes", "flannel_kubeconfig_file": "/etc/pyflannel/kubeconfig"}
KUBECONFIG = b"""\
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: "https://198.51.100.1:6443", certificate-authority-data: Y2E=}
users:
- name: flannel
  user: {token: secret}
contexts:
- name: flannel@lab
  context: {cluster: lab, user: flannel}
current-context: flannel@lab
"""


def kube_inventory(common: dict[str, Any] | None = None, **per_host: Any) -> dict[str, Any]:
    return {h: {**KUBE, **(common or {}), **per_host.get(h, {})} for h in HOSTS}


def kube_facts(kubeconfig_on: tuple[str, ...] = HOSTS) -> dict[str, dict[str, Any]]:
    path = KUBE["flannel_kubeconfig_file"]
    return {
        h: node_facts(f"198.51.100.{11 + i}", files={path: h in kubeconfig_on})
        for i, h in enumerate(HOSTS)
    }


def test_a_systemd_agent_needs_a_kubeconfig_with_the_kubernetes_datastore() -> None:
    found = problems(kube_inventory({"flannel_kubeconfig_file": None}))
    assert len(found) == 3
    assert found[0].startswith(
        "h1: flannel_kubeconfig_file: required with flannel_datastore kubernetes "
        "(a systemd service has no pod service account)"
    )


def test_a_kubeconfig_the_nodes_have_is_checked_in_their_facts() -> None:
    checked = check_inventory(kube_inventory(), kube_facts())
    assert checked.model.flannel_kubeconfig_file == "/etc/pyflannel/kubeconfig"
    assert problems(kube_inventory(), kube_facts(kubeconfig_on=("h1", "h3"))) == [
        "h2: flannel_kubeconfig_file: /etc/pyflannel/kubeconfig is not a file on h2 (put one "
        "there, or set flannel_kubeconfig_src to have the agent role copy one)"
    ]


def test_a_kubeconfig_copied_from_the_controller_is_read_and_checked_there(tmp_path: Path) -> None:
    source = tmp_path / "flannel.kubeconfig"
    source.write_bytes(KUBECONFIG)
    read: list[str] = []

    def read_source(path: str) -> bytes:
        read.append(path)
        return Path(path).read_bytes()

    # Per host (nodes may have credentials of their own); not on the nodes yet, so no facts.
    settings = kube_inventory(h2={"flannel_kubeconfig_src": str(source)})
    checked = check_inventory(settings, kube_facts(kubeconfig_on=("h1", "h3")), [], read_source)
    assert read == [str(source)] and checked.model.flannel_datastore == "kubernetes"


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, " cannot be read on the controller: "),
        (b"- just\n- a list\n", ": not a kubeconfig (not a YAML mapping)"),
        (b"clusters: [\n", ": not a kubeconfig: while parsing a flow "),
        (b"\xff\xfe", ": not a kubeconfig: not UTF-8 text"),
        (
            b"a: &a [x, x, x, x, x, x, x, x, x]\n"
            + b"".join(
                b"%c: &%c [*%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c]\n" % ((c, c) + (c - 1,) * 9)
                for c in range(ord("b"), ord("k"))
            ),
            ": not a kubeconfig: its aliases expand to more than ",
        ),
        (b"[" * 100 + b"]" * 100, ": not a kubeconfig: it nests deeper than 64 levels"),
        (
            KUBECONFIG.replace(b"current-context: flannel@lab", b"current-context: admin@lab"),
            ": not a kubeconfig the agent can use: current-context 'admin@lab' is not in contexts",
        ),
        (
            KUBECONFIG.replace(b'server: "https://198.51.100.1:6443", ', b""),
            ": not a kubeconfig the agent can use: context 'flannel@lab' names cluster 'lab', "
            "which is not in clusters or has no server",
        ),
    ],
)
def test_a_source_that_is_no_usable_kubeconfig_is_named(
    tmp_path: Path, content: bytes | None, why: str
) -> None:
    source = tmp_path / "flannel.kubeconfig"
    if content is not None:
        source.write_bytes(content)
    settings = kube_inventory({"flannel_kubeconfig_src": str(source)})
    found = problems(settings, None, read_source=lambda path: Path(path).read_bytes())
    assert len(found) == 3
    assert found[0].startswith(f"h1: flannel_kubeconfig_src: {str(source)!r}{why}"), found[0]


def test_the_kubeconfig_source_belongs_to_the_kubernetes_datastore(tmp_path: Path) -> None:
    assert problems(inventory(h3={"flannel_kubeconfig_src": str(tmp_path)})) == [
        "h3: flannel_kubeconfig_src: only used with flannel_datastore kubernetes"
    ]
    found = problems(
        kube_inventory({"flannel_kubeconfig_file": None, "flannel_kubeconfig_src": "k.yml"})
    )
    assert found[0] == (
        "h1: flannel_kubeconfig_file: required when flannel_kubeconfig_src is set "
        "(where on each node the agent role puts the copy)"
    )


def test_the_restart_batch_is_a_number_of_hosts_or_a_percentage() -> None:
    batch = "flannel_agent_restart_batch"
    check_inventory(inventory({batch: "34%"}), known_variables=[batch])
    # -e gives "2", a YAML inventory 2: the same value.
    check_inventory(inventory({batch: 2}, h2={batch: "2"}), known_variables=[batch])
    assert problems(inventory(h3={batch: "none"}), known_variables=[batch]) == [
        "h3: flannel_agent_restart_batch: 'none': expected a number of hosts (1 or more)"
        " or a percentage of them, like 25%"
    ]


def test_the_restart_batch_is_one_value_for_the_play() -> None:
    batch = "flannel_agent_restart_batch"
    assert problems(inventory({batch: 1}, h2={batch: "50%"}), known_variables=[batch]) == [
        "h2: flannel_agent_restart_batch: '50%' here but '1' on h1, h3; it must be one value"
        " for every flannel node"
    ]
    assert problems(inventory(h1={batch: 2}), known_variables=[batch]) == [
        "h1: flannel_agent_restart_batch: '2' here but the default on h2, h3; it must be one"
        " value for every flannel node"
    ]
