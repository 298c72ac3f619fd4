"""leases_info against a real etcd and the Node API TEST DOUBLE (tests/fakes/kube_api.py): every
lease, the inventory host each belongs to, the orphans and the free subnets; then the module
in a playbook on this machine, its etcd connection set once through module_defaults for the
action group pyflannel.network.etcd, run with the agent's virtualenv's Python although the
host's interpreter is one without the runtime."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import pytest

from pyflannel_lab.etcd_server import EtcdServer
from pyflannel_lab.playbook import run_playbook
from pyflannel_runtime.ops.leases import InventoryHost, read_leases, report_dict
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings
from pyflannel_runtime.subnet.kube.kube import KubeSettings
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data
from tests.fakes.kube_api import FakeKubeApi

CONFIG = '{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}'
MAC = "0a:58:0a:f4:01:00"
HOSTS = [
    InventoryHost("node1", frozenset({ip_address("198.51.100.11")})),
    InventoryHost("node2", frozenset({ip_address("198.51.100.12")})),
]
# The project's virtualenv holds pyflannel_runtime, as an agent's does.
VENV = Path(sys.executable).parent.parent


def lease_value(public_ip: str) -> str:
    data = vxlan_backend_data(1, MAC)
    return (
        f'{{"PublicIP":"{public_ip}","PublicIPv6":null,"BackendType":"vxlan","BackendData":{data}}}'
    )


def fill_etcd(server: EtcdServer, prefix: str) -> None:
    """node1's lease (600 s), node2's reservation, a gone node's lease, and a value that is no
    lease."""
    server.etcdctl("put", f"{prefix}/config", CONFIG)
    lease = server.etcdctl("lease", "grant", "600").split()[1]
    server.etcdctl(
        "put", "--lease", lease, f"{prefix}/subnets/10.244.1.0-24", lease_value("198.51.100.11")
    )
    server.etcdctl("put", f"{prefix}/subnets/10.244.2.0-24", lease_value("198.51.100.12"))
    server.etcdctl(
        "put", "--lease", lease, f"{prefix}/subnets/10.244.9.0-24", lease_value("198.51.100.99")
    )
    server.etcdctl("put", f"{prefix}/subnets/10.244.4.0-24", "not a lease")


@pytest.mark.etcd
def test_etcd_leases_their_hosts_orphans_and_free_subnets(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    before = time.time()
    fill_etcd(etcd_server, etcd_prefix)
    store = EtcdSettings(endpoints=(etcd_server.endpoint,), prefix=etcd_prefix)
    result = report_dict(read_leases(store, HOSTS))
    after = time.time()
    assert result["store"] == "etcd"
    leases = {lease["subnet"]: lease for lease in result["leases"]}
    assert sorted(leases) == ["10.244.1.0/24", "10.244.2.0/24", "10.244.9.0/24"]
    own = leases["10.244.1.0/24"]
    assert (own["host"], own["reservation"], own["backend"], own["vtep_mac"]) == (
        "node1",
        False,
        "vxlan",
        MAC,
    )
    # The etcd lease was granted between `before` and the read, for 600 s (whole seconds).
    expires = datetime.fromisoformat(own["expires"]).timestamp()
    assert before + 599 <= expires <= after + 601
    pinned = leases["10.244.2.0/24"]
    assert (pinned["host"], pinned["reservation"], pinned["expires"]) == ("node2", True, None)
    assert [o["subnet"] for o in result["orphans"]] == ["10.244.9.0/24"]
    assert result["orphans"][0]["public_ip"] == "198.51.100.99"
    (usage,) = result["utilisation"]
    assert (usage["total"], usage["used"], usage["free"]) == (255, 3, 252)
    assert [u["name"] for u in result["unreadable"]] == ["10.244.4.0-24"]


P = "flannel.alpha.coreos.com/"


def annotations(public_ip: str) -> dict[str, str]:
    return {
        P + "kube-subnet-manager": "true",
        P + "backend-type": "vxlan",
        P + "backend-data": vxlan_backend_data(1, MAC),
        P + "public-ip": public_ip,
    }


def test_kubernetes_leases_by_node_with_their_hosts_and_orphans(tmp_path: Path) -> None:
    net_conf = tmp_path / "net-conf.json"
    net_conf.write_text(CONFIG)
    with FakeKubeApi() as api:
        api.add_node("node1", pod_cidr="10.244.0.0/24", annotations=annotations("198.51.100.11"))
        api.add_node("gone", pod_cidr="10.244.5.0/24", annotations=annotations("198.51.100.55"))
        # Not (yet) a flannel node: no lease.
        api.add_node("node2", pod_cidr="10.244.1.0/24")
        store = KubeSettings(api_url=api.url, net_config_path=str(net_conf))
        result = report_dict(read_leases(store, HOSTS))
    assert result["store"] == "kube"
    assert [(lease["node"], lease["subnet"], lease["host"]) for lease in result["leases"]] == [
        ("node1", "10.244.0.0/24", "node1"),
        ("gone", "10.244.5.0/24", None),
    ]
    assert [o["node"] for o in result["orphans"]] == ["gone"]
    assert all(not lease["reservation"] and lease["expires"] is None for lease in result["leases"])
    (usage,) = result["utilisation"]
    # 10.244.0.0/24 is below flannel's SubnetMin: kube-controller-manager hands it out.
    assert (usage["used"], usage["outside"]) == (1, 1)
    assert "controller manager assigns podCIDRs" in result["notes"][0]


PLAYBOOK = """
- name: The etcd connection once, for every module of the group
  hosts: localhost
  gather_facts: false
  module_defaults:
    group/pyflannel.network.etcd:
      etcd_endpoints: ["{endpoint}"]
      etcd_prefix: "{prefix}"
      agent_env: ""
  tasks:
    - name: Publish the network config
      pyflannel.network.network_config:
        config: '{config}'
      register: published

    - name: List the leases, the hosts from the inventory
      pyflannel.network.leases_info:
      register: leases

    - name: Check this host's routes (no lease is this host's)
      pyflannel.network.routes:
        public_ip: 192.0.2.250
        fail_on_problems: false
      check_mode: true
      register: routes

    - name: A virtualenv that is not there
      pyflannel.network.leases_info:
        venv: "{out}/no-venv"
      register: missing
      ignore_errors: true

    - name: A virtualenv without the runtime
      pyflannel.network.leases_info:
        venv: "{out}/bare-venv"
      register: bare
      ignore_errors: true

    - name: Keep the results
      ansible.builtin.copy:
        content: "{{{{ {{'published': published, 'leases': leases, 'routes': routes, 'missing': missing, 'bare': bare}} | to_json }}}}"
        dest: "{out}/results.json"
        mode: "0600"
"""


def inventory(path: Path) -> Path:
    """This machine, whose own Python has no pyflannel_runtime, and two hosts known only by
    their addresses (never contacted)."""
    path.write_text(
        "[local]\n"
        f"localhost ansible_connection=local ansible_python_interpreter=/usr/bin/python3"
        f" flannel_agent_venv={VENV}\n"
        "[flannel_nodes]\n"
        "node1 ansible_host=198.51.100.11\n"
        "node2 ansible_host=198.51.100.12\n"
    )
    return path


@pytest.mark.etcd
def test_module_defaults_set_the_etcd_connection_once_for_the_group(
    etcd_server: EtcdServer, etcd_prefix: str, tmp_path: Path
) -> None:
    fill_etcd(etcd_server, etcd_prefix)
    etcd_server.etcdctl("del", f"{etcd_prefix}/config")
    subprocess.run(
        ["/usr/bin/python3", "-m", "venv", "--without-pip", tmp_path / "bare-venv"], check=True
    )
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        PLAYBOOK.format(
            endpoint=etcd_server.endpoint, prefix=etcd_prefix, config=CONFIG, out=tmp_path
        )
    )
    run = run_playbook(str(playbook), inventories=[inventory(tmp_path / "hosts.ini")])
    assert run.returncode == 0, run.explain()
    results: dict[str, Any] = json.loads((tmp_path / "results.json").read_text())
    assert results["published"]["changed"]
    assert (
        etcd_server.etcdctl("get", "--print-value-only", f"{etcd_prefix}/config").strip() == CONFIG
    )
    leases = results["leases"]
    assert [(lease["subnet"], lease["host"]) for lease in leases["leases"]] == [
        ("10.244.1.0/24", "node1"),
        ("10.244.2.0/24", "node2"),
        ("10.244.9.0/24", None),
    ]
    routes = results["routes"]
    assert routes["problems"][0] == (
        "no lease belongs to this host (192.0.2.250); the datapath was not checked"
    )
    assert routes["leases"]["total"] == 3
    missing = results["missing"]
    assert missing["failed"]
    assert missing["msg"].startswith("pyflannel_runtime is not installed on this host: ")
    assert f"{tmp_path}/no-venv/bin/python" in missing["msg"]
    bare = results["bare"]
    assert bare["failed"] and "(pyflannel_runtime)" in bare["msg"]
    assert f"the agent's virtualenv {tmp_path}/bare-venv lacks it" in bare["msg"]


KNOWN_PLAYBOOK = """
- name: What etcd holds, read once by node_facts, stands for the modules that would read it again
  hosts: localhost
  gather_facts: false
  vars:
    # Modules that would fail to start here: a task that runs one fails.
    no_venv: "{out}/no-venv"
    checks: "{{{{ ansible_facts.pyflannel_host.checks }}}}"
  tasks:
    - name: The config and the leases, with the agent's settings (from its environment here)
      pyflannel.network.node_facts:
        checks:
          network_config: true
          leases: true
      environment:
        FLANNELD_ETCD_ENDPOINTS: "{endpoint}"
        FLANNELD_ETCD_PREFIX: "{prefix}"

    - name: The config etcd holds
      pyflannel.network.network_config: &publish
        etcd_endpoints: ["{endpoint}"]
        etcd_prefix: "{prefix}"
        agent_env: ""
        config: '{config}'
        known_config: "{{{{ checks.network_config.config }}}}"
        venv: "{{{{ no_venv }}}}"
      register: published

    - name: The leases, matched to the inventory's hosts here
      pyflannel.network.leases_info:
        known: "{{{{ checks.leases }}}}"
        venv: "{{{{ no_venv }}}}"
      register: leases

    - name: Another config runs the module
      pyflannel.network.network_config:
        <<: *publish
        config: '{other}'
      register: other
      ignore_errors: true

    - name: Keep the results
      ansible.builtin.copy:
        content: "{{{{ {{'checks': checks, 'published': published, 'leases': leases, 'other': other}} | to_json }}}}"
        dest: "{out}/results.json"
        mode: "0600"
"""


@pytest.mark.etcd
def test_what_node_facts_read_stands_for_the_publish_and_the_leases(
    etcd_server: EtcdServer, etcd_prefix: str, tmp_path: Path
) -> None:
    fill_etcd(etcd_server, etcd_prefix)
    playbook = tmp_path / "play.yml"
    other = '{"Network": "10.245.0.0/16", "Backend": {"Type": "vxlan"}}'
    playbook.write_text(
        KNOWN_PLAYBOOK.format(
            endpoint=etcd_server.endpoint,
            prefix=etcd_prefix,
            config=CONFIG,
            other=other,
            out=tmp_path,
        )
    )
    run = run_playbook(str(playbook), inventories=[inventory(tmp_path / "hosts.ini")])
    assert run.returncode == 0, run.explain()
    results: dict[str, Any] = json.loads((tmp_path / "results.json").read_text())
    assert results["checks"]["network_config"] == {"config": CONFIG}
    # Read without the inventory: no lease has a host yet.
    assert {lease["host"] for lease in results["checks"]["leases"]["leases"]} == {None}
    published = results["published"]
    assert not published["changed"]
    assert published["keys"] == [
        {"key": f"{etcd_prefix}/config", "before": CONFIG, "after": CONFIG, "changed": False}
    ]
    leases = results["leases"]
    assert [(lease["subnet"], lease["host"]) for lease in leases["leases"]] == [
        ("10.244.1.0/24", "node1"),
        ("10.244.2.0/24", "node2"),
        ("10.244.9.0/24", None),
    ]
    assert [orphan["subnet"] for orphan in leases["orphans"]] == ["10.244.9.0/24"]
    assert leases["utilisation"][0]["used"] == 3
    assert [u["name"] for u in leases["unreadable"]] == ["10.244.4.0-24"]
    # A config etcd does not hold: the module runs, and cannot start without its virtualenv.
    assert results["other"]["failed"]
    assert results["other"]["msg"].startswith("pyflannel_runtime is not installed on this host")
    assert etcd_server.etcdctl("get", "--print-value-only", f"{etcd_prefix}/config").strip() == (
        CONFIG
    )
