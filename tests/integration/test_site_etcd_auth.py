"""site.yml with etcd authentication, on two systemd lab hosts over SSH: the agents get a user
(flannel_etcd_username and flannel_etcd_password, here as extra vars), and the etcd role turns
on authentication from the controller, with a role that may read and write only flannel's
prefix and root's password made and kept on the controller.

One lab serves the module, in this order: the whole flow converges and its re-run changes
nothing; on a node, its certificate alone reaches nothing and its user reaches flannel's prefix
and nothing else; root's password is on no node, and from the controller it reaches any key;
the operator's network_config and lease modules, run on the controller with root's password,
read the net-conf and pin and release a node's subnet.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyflannel_lab.playbook import LAB_INVENTORY, run_playbook
from tests.integration.site_lab import assert_converged, lab_hosts, on_host

pytestmark = [pytest.mark.root, pytest.mark.podman]

PREFIX = "/coreos.com/network"
AGENT = "pyflannel"
PASSWORD = secrets.token_hex(12)
AUTH = {"flannel_etcd_username": AGENT, "flannel_etcd_password": PASSWORD}
CREDENTIALS = LAB_INVENTORY.parent / f"{LAB_INVENTORY.name}-credentials"
# The etcd role's task, changed once for the cluster.
AUTH_TURNED_ON = re.compile(r"Etcd \| Authentication for the agents[^\n]*\n+changed: \[node1[\] ]")
NODE_TLS = (
    "--cacert=/etc/pyflannel/pki/etcd-ca.crt --cert=/etc/pyflannel/pki/etcd-client.crt "
    "--key=/etc/pyflannel/pki/etcd-client.key"
)


@pytest.fixture(scope="module")
def lab() -> Iterator[Any]:
    with lab_hosts(2) as state:
        yield state


def etcdctl_on(lab: Any, name: str, *args: str, user: str | None = None) -> str:
    """etcdctl on the node against node1's member, with the node's client certificate; its
    output, or its error."""
    endpoint = f"https://{lab.host('node1').address}:2379"
    who = f"--user={shlex.quote(user)}" if user else ""
    command = (
        f"ETCDCTL_API=3 etcdctl --endpoints={endpoint} {NODE_TLS} {who} --dial-timeout=3s "
        f"{shlex.join(args)} 2>&1 || true"
    )
    return on_host(lab, name, command)


def test_the_flow_converges_with_authentication_and_the_rerun_changes_nothing(lab: Any) -> None:
    first = run_playbook("site.yml", extra_vars=AUTH)
    assert_converged(first, lab.names())
    assert AUTH_TURNED_ON.search(first.output), first.explain()
    again = run_playbook("site.yml", extra_vars=AUTH)
    assert_converged(again, lab.names(), suite=False)
    assert set(again.changed().values()) == {0}, again.explain()


def test_a_nodes_certificate_and_user_reach_flannels_prefix_only(lab: Any) -> None:
    agent = f"{AGENT}:{PASSWORD}"
    for name in lab.names():
        assert '"Backend"' in etcdctl_on(lab, name, "get", f"{PREFIX}/config", user=agent)
        for args in (
            ("get", "/pyft-outside"),
            ("put", "/pyft-outside", "x"),
            ("get", "--prefix", "/"),
        ):
            assert "permission denied" in etcdctl_on(lab, name, *args, user=agent), (name, args)
        # The certificate alone names nobody: etcd lets it do nothing.
        alone = etcdctl_on(lab, name, "get", f"{PREFIX}/config")
        assert "user name is empty" in alone or "permission denied" in alone, alone


def roots_password() -> str:
    return (CREDENTIALS / "etcd-auth" / "root").read_text().split()[0]


def controller_tls(lab: Any) -> dict[str, str]:
    """The etcd connection from the controller: node1's member, with the controller's copy of
    node1's client certificate."""
    pki = CREDENTIALS / "etcd-pki"
    return {
        "endpoint": f"https://{lab.host('node1').address}:2379",
        "cafile": str(pki / "ca.crt"),
        "certfile": str(pki / "node1" / "client.crt"),
        "keyfile": str(pki / "node1" / "client.key"),
    }


def test_roots_password_stays_on_the_controller(lab: Any) -> None:
    root = roots_password()
    assert oct((CREDENTIALS / "etcd-auth" / "root").stat().st_mode & 0o777) == "0o600"
    for name in lab.names():
        found = on_host(
            lab, name, f"grep -rlF {shlex.quote(root)} /etc /opt /run /var/lib/pyflannel || true"
        )
        assert found.strip() == "", (name, found)
    tls = controller_tls(lab)
    base = [
        "etcdctl",
        f"--endpoints={tls['endpoint']}",
        f"--cacert={tls['cafile']}",
        f"--cert={tls['certfile']}",
        f"--key={tls['keyfile']}",
        f"--user=root:{root}",
        "--dial-timeout=3s",
    ]
    env = {"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"}
    subprocess.run([*base, "put", "/pyft-outside", "root's"], env=env, check=True, timeout=30)
    done = subprocess.run(
        [*base, "get", "--print-value-only", "/pyft-outside"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert done.stdout == "root's\n"


# A node the lab does not have, in a subnet none of its agents holds.
OPERATOR_NODE = {"public_ip": "192.0.2.250", "subnet": "10.244.250.0/24"}


def operator_play(lab: Any, root_password: str) -> list[dict[str, Any]]:
    """The operator's modules in a play on the controller, as etcd's root: the net-conf as it
    is (read, nothing to write), OPERATOR_NODE's subnet pinned, then released."""
    tls = controller_tls(lab)
    etcd = {
        "etcd_endpoints": [tls["endpoint"]],
        "etcd_prefix": PREFIX,
        "etcd_cafile": tls["cafile"],
        "etcd_certfile": tls["certfile"],
        "etcd_keyfile": tls["keyfile"],
        "etcd_username": "root",
        "etcd_password": root_password,
    }
    # The stored value exactly (etcdctl's plain output adds a newline).
    listed = on_host(
        lab,
        "node1",
        f"ETCDCTL_API=3 etcdctl --endpoints={tls['endpoint']} {NODE_TLS} "
        f"--user={shlex.quote(AGENT + ':' + PASSWORD)} get -w json {PREFIX}/config",
    )
    config = base64.b64decode(json.loads(listed)["kvs"][0]["value"]).decode()
    return [
        {
            "name": "The operator's modules",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            # The modules run with the controller's own virtualenv (the collection's plugins need
            # the runtime there), and read no agent's environment file.
            "module_defaults": {
                "group/pyflannel.network.flannel": {"venv": sys.prefix},
                "group/pyflannel.network.etcd": {**etcd, "agent_env": ""},
            },
            "tasks": [
                {
                    "name": "The net-conf, as it is",
                    "pyflannel.network.network_config": {"config": config},
                    "register": "__config",
                },
                {
                    "name": "Pin a node's subnet",
                    "pyflannel.network.lease": {**OPERATOR_NODE, "state": "present"},
                    "register": "__pinned",
                },
                {
                    "name": "Release it",
                    "pyflannel.network.lease": {
                        **OPERATOR_NODE,
                        "state": "absent",
                        "release_reservation": True,
                    },
                    "register": "__released",
                },
                {
                    "name": "The modules did what they were asked",
                    "ansible.builtin.assert": {
                        "that": [
                            "not __config.changed",
                            "__pinned.changed",
                            "__pinned['keys'][0].after is search('192.0.2.250')",
                            "__released.changed",
                            "__released['keys'][0].after is none",
                        ]
                    },
                },
            ],
        }
    ]


def test_the_operators_modules_work_with_roots_password(lab: Any, tmp_path: Path) -> None:
    playbook = tmp_path / "operator.yml"
    playbook.write_text(json.dumps(operator_play(lab, roots_password())))
    run = run_playbook(str(playbook))
    assert run.returncode == 0 and run.changed() == {"localhost": 2}, run.explain()
    key = f"{PREFIX}/subnets/10.244.250.0-24"
    assert etcdctl_on(lab, "node1", "get", key, user=f"{AGENT}:{PASSWORD}") == ""
