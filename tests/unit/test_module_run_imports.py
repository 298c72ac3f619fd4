"""What a collection module's run on a node loads stays what that run uses: each module run is a
fresh interpreter on every host in every run, so a library imported at the top of a shared
runtime module is a cost paid by every run that never uses it (bench/bench_module_imports.py
measures it). Each case runs in a fresh interpreter and looks at its sys.modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = "ansible_collections.pyflannel.network.plugins.modules"


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code` (the collection importable
    by its FQCN, as in a module run)."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'collections'}:{ROOT}"},
        cwd=ROOT,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def pyroute2_parts(modules: set[str]) -> set[str]:
    """pyroute2's modules loaded (its package object alone, the agent's lean stand-in
    from netlink.lean_pyroute2, costs nothing)."""
    return {name for name in modules if name.startswith("pyroute2.")}


@pytest.mark.parametrize(
    "runtime_modules",
    [
        # the settings every module starts from, the lease reports, the network config
        ("pyflannel_runtime.ops.agent_settings", "pyflannel_runtime.ops.leases"),
        ("pyflannel_runtime.ops.publish", "pyflannel_runtime.ops.lease"),
        # the datapath check's planning and repair, and node_reset (own netlink sockets)
        ("pyflannel_runtime.ops.repair", "pyflannel_runtime.ops.reset"),
        # the connectivity suite and the disruption probe, before a run reads the kernel
        ("pyflannel_runtime.ops.connectivity", "pyflannel_runtime.ops.disruption"),
    ],
)
def test_runtime_paths_that_read_no_kernel_load_no_pyroute2(
    runtime_modules: tuple[str, ...],
) -> None:
    loaded = loaded_after("\n".join(f"import {name}" for name in runtime_modules))
    assert set(runtime_modules) <= loaded
    assert pyroute2_parts(loaded) == set()


def test_a_handle_opened_for_a_module_run_loads_only_rtnetlink() -> None:
    """The connectivity suite reads its host's addresses; pyroute2's whole package (NDB with
    sqlite3, IPDB, conntrack, ...) stays unloaded, as in the agent."""
    loaded = loaded_after(
        "from pyflannel_runtime.ops.connectivity import local_addresses\n"
        "assert '127.0.0.1' in local_addresses()"
    )
    assert "pyroute2.iproute.linux" in loaded
    assert not {"pyroute2.ndb", "pyroute2.ipdb", "pyroute2.conntrack", "sqlite3"} & loaded


def test_the_etcd_health_check_loads_no_ansible_urls() -> None:
    """node_facts asks an etcd member's /health with the standard library: ansible's urls (with
    email.mime and cryptography) stays unloaded."""
    loaded = loaded_after(
        f"from {MODULES}.node_facts import _etcd_health\n"
        "answer = _etcd_health({'url': 'http://127.0.0.1:9/health', 'cafile': None,\n"
        "                       'certfile': None, 'keyfile': None})\n"
        "assert answer['healthy'] is False, answer"
    )
    assert "urllib.request" in loaded
    assert not {"ansible.module_utils.urls", "email.mime", "cryptography"} & loaded
