"""etcd authentication for flannel's agents against a real etcd 3.4 with TLS and client
certificates (pyflannel_runtime/ops/etcd_auth.py, the etcd role's etcd_auth module): the agents'
user and a node's certificate can read and write flannel's prefix and nothing else; root (the
operator's, kept on the controller) can do anything, and the network_config and lease modules'
work runs with it; a second run changes nothing; an agent with its user gets a lease and
watches; a wrong root password is refused by name.
"""

from __future__ import annotations

import asyncio
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import pytest

from pyflannel_lab.etcd_server import EtcdServer
from pyflannel_runtime.ops.etcd_auth import AuthSetup, EtcdAuthError, ensure_auth
from pyflannel_runtime.ops.lease import NodeLease, release_etcd
from pyflannel_runtime.ops.publish import publish
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings, EtcdSubnetManager
from pyflannel_runtime.wire.lease import LeaseAttrs
from tests.integration.etcd_tls import gateway_client, make_tls_material

pytestmark = pytest.mark.etcd

PREFIX = "/coreos.com/network"
CONFIG = '{"Network": "10.244.0.0/16", "Backend": {"Type": "host-gw"}}'
AGENT = "flannel"
SETUP = AuthSetup(PREFIX, AGENT, "agent-secret", "root-secret", ("pyft-client",))


def settings(server: EtcdServer, **extra: Any) -> EtcdSettings:
    """Through the JSON gateway, as the agents and the modules talk to etcd: a client
    certificate without a common name (see etcd_tls.gateway_client)."""
    assert server.tls is not None
    cert, key = gateway_client(Path(server.tls.ca_file).parent, server.tls)
    return EtcdSettings(
        endpoints=(server.endpoint,),
        prefix=PREFIX,
        cafile=server.tls.ca_file,
        certfile=cert,
        keyfile=key,
        **extra,
    )


def try_etcdctl(server: EtcdServer, *args: str, user: str | None = None) -> str:
    """etcdctl's output, or its error."""
    try:
        return server.etcdctl(*args, user=user)
    except RuntimeError as err:
        return str(err)


def test_agents_reach_flannels_prefix_and_nothing_else(etcd_factory: Any, tmp_path: Path) -> None:
    server: EtcdServer = etcd_factory(tls=make_tls_material(tmp_path / "tls"))
    server.etcdctl("put", "/elsewhere/secret", "x")

    planned = ensure_auth(settings(server), SETUP, check=True)
    assert planned[-1] == "enable authentication"
    assert try_etcdctl(server, "get", "--print-value-only", "/elsewhere/secret") == "x\n"
    done = ensure_auth(settings(server), SETUP, check=False)
    assert done == planned
    assert ensure_auth(settings(server), SETUP, check=False) == []

    agent = f"{AGENT}:agent-secret"
    for user in (agent, None):  # the agents' user; a node's certificate on its own
        assert "OK" in try_etcdctl(server, "put", f"{PREFIX}/config", CONFIG, user=user)
        assert CONFIG in try_etcdctl(server, "get", f"{PREFIX}/config", user=user)
        for args in (
            ("get", "/elsewhere/secret"),
            ("put", "/elsewhere/secret", "y"),
            ("put", "/coreos.com/networkX", "y"),
            ("get", "--prefix", "/"),
            ("del", "/elsewhere/secret"),
        ):
            assert "permission denied" in try_etcdctl(server, *args, user=user), (user, args)
    root = "root:root-secret"
    assert try_etcdctl(server, "get", "--print-value-only", "/elsewhere/secret", user=root) == "x\n"
    assert "OK" in try_etcdctl(server, "put", "/elsewhere/other", "z", user=root)

    async def agent_run() -> None:
        manager = EtcdSubnetManager(settings(server, username=AGENT, password="agent-secret"))
        try:
            lease = await manager.acquire_lease(LeaseAttrs.from_json(b'{"PublicIP":"192.0.2.1"}'))
            watch = manager.watch_leases()
            first = await asyncio.wait_for(anext(watch), 20)
            assert first.snapshot is not None and lease.subnet is not None
            await watch.aclose()
        finally:
            await manager.close()

    asyncio.run(asyncio.wait_for(agent_run(), 60))

    # The network_config and lease modules' work, with the operator's credentials.
    operator = settings(server, username="root", password="root-secret")
    other = '{"Network": "10.245.0.0/16", "Backend": {"Type": "host-gw"}}'
    (config,) = publish(operator, other, check=False)
    assert config.changed and config.after == other
    node = NodeLease(public_ip=IPv4Address("192.0.2.1"))
    released = release_etcd(operator, node, check=False)
    assert released.changed
    assert (
        try_etcdctl(server, "get", "--prefix", "--keys-only", f"{PREFIX}/subnets/", user=root) == ""
    )

    changed = AuthSetup(PREFIX, AGENT, "new-agent-secret", "root-secret", ("pyft-client",))
    assert ensure_auth(settings(server), changed, check=False) == [
        f"change the password of {AGENT}"
    ]
    wrong = AuthSetup(PREFIX, AGENT, "new-agent-secret", "not-roots", ())
    with pytest.raises(EtcdAuthError, match="refuses root's password"):
        ensure_auth(settings(server), wrong, check=False)
