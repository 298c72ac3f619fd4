"""site.yml with etcd authentication, on two systemd lab hosts over SSH: the agents get a user
(flannel_etcd_username and flannel_etcd_password, here as extra vars), and the etcd role turns
on authentication from the controller, with a role that may read and write only flannel's
prefix and root's password made and kept on the controller.

One lab serves the module, in this order: the whole flow converges and its re-run changes
nothing; on a node, its certificate alone reaches nothing and its user reaches flannel's prefix
and nothing else; root's password is on no node, and from the controller it reaches any key.
"""

from __future__ import annotations

import secrets
import shlex
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from pyflannel_runtime.lab.playbook import LAB_INVENTORY, run_playbook
from tests.integration.site_lab import assert_converged, lab_hosts, on_host

pytestmark = [pytest.mark.root, pytest.mark.podman]

PREFIX = "/coreos.com/network"
AGENT = "pyflannel"
PASSWORD = secrets.token_hex(12)
AUTH = {"flannel_etcd_username": AGENT, "flannel_etcd_password": PASSWORD}
CREDENTIALS = LAB_INVENTORY.parent / f"{LAB_INVENTORY.name}-credentials"
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
    assert "enable authentication" in first.output, first.explain()
    again = run_playbook("site.yml", extra_vars=AUTH)
    assert_converged(again, lab.names())
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


def test_roots_password_stays_on_the_controller(lab: Any) -> None:
    root = (CREDENTIALS / "etcd-auth" / "root").read_text().split()[0]
    assert oct((CREDENTIALS / "etcd-auth" / "root").stat().st_mode & 0o777) == "0o600"
    for name in lab.names():
        found = on_host(
            lab, name, f"grep -rlF {shlex.quote(root)} /etc /opt /run /var/lib/pyflannel || true"
        )
        assert found.strip() == "", (name, found)
    pki = CREDENTIALS / "etcd-pki"
    tls = [
        f"--cacert={pki / 'ca.crt'}",
        f"--cert={pki / 'node1' / 'client.crt'}",
        f"--key={pki / 'node1' / 'client.key'}",
    ]
    endpoint = f"--endpoints=https://{lab.host('node1').address}:2379"
    base = ["etcdctl", endpoint, *tls, f"--user=root:{root}", "--dial-timeout=3s"]
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
