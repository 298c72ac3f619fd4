"""pyflannel.network.node_facts asks a real etcd member's /health over TLS with a client
certificate, as the etcd role's wait does, so that a re-run can leave a healthy member alone;
and says why a member it cannot vouch for is not healthy."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.pyflannel.network.plugins.modules import node_facts

from pyflannel_lab.etcd_server import EtcdServer
from tests.integration.etcd_tls import make_tls_material
from tests.unit.plugins.conftest import RunModule, run_module_main


@pytest.fixture
def run_module() -> RunModule:
    return run_module_main


def health(run_module: RunModule, spec: dict[str, Any]) -> dict[str, Any]:
    facts = run_module(node_facts.main, {"etcd_health": spec}, check=True)
    assert not facts["failed"], facts
    found: dict[str, Any] = facts["ansible_facts"]["pyflannel_host"]["etcd_health"]
    return found


def test_a_members_health_over_tls_and_why_it_is_not_healthy(
    tmp_path: Path, etcd_factory: Callable[..., EtcdServer], run_module: RunModule
) -> None:
    tls = make_tls_material(tmp_path / "pki")
    server = etcd_factory(tls=tls)
    url = f"{server.endpoint}/health"
    spec = {
        "url": url,
        "cafile": tls.ca_file,
        "certfile": tls.client_cert,
        "keyfile": tls.client_key,
    }
    assert health(run_module, spec) == {"url": url, "healthy": True, "reason": ""}
    # Without a client certificate the member refuses the connection.
    refused = health(run_module, {**spec, "certfile": None, "keyfile": None})
    assert not refused["healthy"] and refused["reason"]
    # A CA that did not sign the member's certificate: not trusted.
    other = make_tls_material(tmp_path / "other")
    untrusted = health(run_module, {**spec, "cafile": other.ca_file})
    assert not untrusted["healthy"] and "certificate verify failed" in untrusted["reason"]
    server.kill()
    down = health(run_module, spec)
    assert not down["healthy"] and "refused" in down["reason"].lower(), down
