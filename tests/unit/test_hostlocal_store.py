"""Reading host-local's disk store, and its pool size, checked against Debian's host-local."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyflannel_runtime.cni.hostlocal_store import (
    Allocation,
    address_pool,
    count_in_pool,
    parse_entry,
    read_allocations,
    store_dir,
)

HOST_LOCAL = "/usr/lib/cni/host-local"
CI = settings(deadline=None, suppress_health_check=list(HealthCheck), max_examples=200)


def test_entries_new_legacy_and_other_files() -> None:
    assert parse_entry("10.1.2.3", b"abc\r\neth0") == Allocation("10.1.2.3", 4, "abc", "eth0")
    assert parse_entry("fd00::5", b" abc\r\nnet1 \n") == Allocation("fd00::5", 6, "abc", "net1")
    assert parse_entry("10.1.2.3", b"abc") == Allocation("10.1.2.3", 4, "abc", "")
    for name in ("lock", "last_reserved_ip.0", "10.1.2", "x:y"):
        assert parse_entry(name, b"abc\r\neth0") is None


def test_store_dir_defaults_to_host_locals() -> None:
    assert store_dir(None, "cbr0") == "/var/lib/cni/networks/cbr0"
    assert store_dir("/d", "cbr0") == "/d/cbr0"


def test_read_allocations_skips_what_is_not_an_allocation(tmp_path: Path) -> None:
    (tmp_path / "lock").write_bytes(b"")
    (tmp_path / "last_reserved_ip.0").write_bytes(b"10.1.2.9")
    (tmp_path / "10.1.2.10").write_bytes(b"b\r\neth0")
    (tmp_path / "10.1.2.9").write_bytes(b"a\r\neth0")
    (tmp_path / "10.1.2.11").write_bytes(b"x" * 5000)
    (tmp_path / "10.1.2.12").mkdir()
    allocations, problems = read_allocations(str(tmp_path))
    assert allocations == [
        Allocation("10.1.2.9", 4, "a", "eth0"),
        Allocation("10.1.2.10", 4, "b", "eth0"),
    ]
    assert len(problems) == 2
    assert "10.1.2.11 is larger than 4096 bytes" in problems[0] + problems[1]
    assert read_allocations(str(tmp_path / "missing")) == ([], [])


@CI
@given(
    version=st.sampled_from([4, 6]),
    value=st.integers(min_value=0),
    length=st.integers(min_value=0, max_value=128),
)
def test_pool_is_the_subnet_without_network_gateway_and_broadcast(
    version: int, value: int, length: int
) -> None:
    bits = 32 if version == 4 else 128
    kind = ipaddress.IPv4Network if version == 4 else ipaddress.IPv6Network
    network = kind((value % 2**bits, min(length, bits)), strict=False)
    pool = address_pool(str(network))
    if network.num_addresses < 4:  # host-local refuses a /31 or /127 and smaller
        assert pool.capacity == 0
        assert not any(pool.contains(str(a)) for a in (network.network_address, network[-1]))
        return
    gateway = network.network_address + 1
    last = network.broadcast_address - (1 if version == 4 else 0)
    assert pool.capacity == int(last) - int(gateway)
    assert pool.contains(str(gateway + 1)) and pool.contains(str(last))
    for outside in (network.network_address, gateway, network.broadcast_address):
        assert pool.contains(str(outside)) == (version == 6 and outside == last)
    if int(last) + 1 < 2**bits:
        assert not pool.contains(str(last + 1))


@pytest.mark.skipif(not os.path.exists(HOST_LOCAL), reason="containernetworking-plugins missing")
@pytest.mark.parametrize("subnet", ["10.9.0.0/29", "10.9.0.16/28", "10.9.0.0/30", "fd00:9::/125"])
def test_host_local_fills_exactly_the_pool(tmp_path: Path, subnet: str) -> None:
    conf = json.dumps(
        {
            "cniVersion": "0.3.1",
            "name": "pool",
            "ipam": {
                "type": "host-local",
                "dataDir": str(tmp_path),
                "ranges": [[{"subnet": subnet}]],
            },
        }
    ).encode()
    added = 0
    while True:
        env = {
            "CNI_COMMAND": "ADD",
            "CNI_CONTAINERID": f"ctr{added}",
            "CNI_IFNAME": "eth0",
            "CNI_NETNS": "/nonexistent",
            "CNI_PATH": "/usr/lib/cni",
        }
        done = subprocess.run([HOST_LOCAL], input=conf, env=env, capture_output=True, check=False)
        if done.returncode != 0:
            assert b"no IP addresses available in range set" in done.stdout
            break
        added += 1
    pool = address_pool(subnet)
    directory = store_dir(str(tmp_path), "pool")
    assert added == pool.capacity == count_in_pool(directory, pool)
    allocations, problems = read_allocations(directory)
    assert problems == []
    assert sorted(a.container_id for a in allocations) == sorted(f"ctr{i}" for i in range(added))
    assert {a.ifname for a in allocations} == {"eth0"}
    assert all(pool.contains(a.address) for a in allocations)
