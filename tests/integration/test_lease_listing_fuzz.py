"""Whatever lies under the subnets prefix in a real etcd, every consumer of the lease listing
answers with one of its documented outcomes: `ops.verify.verify` with a report that accounts
for every key, and the routes module (check mode, through its test harness) with a result, never
a traceback. Keys and values are arbitrary: leases inside the network, outside it, of the wrong
length, with no subnet in either family ("0.0.0.0-0"), IPv6-only, dual-stack, unparsable keys
and unreadable values.

etcd runs in a network namespace of its own, and both consumers read from inside it (its
kernel is empty of flannel's devices), so nothing here touches this machine's network.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyflannel_lab.etcd_server import EtcdServer, start_etcd
from pyflannel_runtime.netlink.netns import run_in_netns
from pyflannel_runtime.ops.verify import Datapath, Host, verify
from pyflannel_runtime.subnet.etcd.client import Endpoint, EtcdClient
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings
from tests.unit.plugins.conftest import run_module_main

pytestmark = [pytest.mark.root, pytest.mark.etcd]

CONFIG = {
    "Network": "10.244.0.0/16",
    "EnableIPv6": True,
    "IPv6Network": "fd00::/48",
    "Backend": {"Type": "vxlan"},
}
OWN_KEY = "10.244.1.0-24&fd00:0:0:1::-64"
OWN_IP = IPv4Address("192.0.2.50")


def lease_value(public_ip: str, mac: str = "0a:58:0a:f4:05:00") -> str:
    return json.dumps(
        {"PublicIP": public_ip, "BackendType": "vxlan", "BackendData": {"VtepMAC": mac}}
    )


@dataclass(frozen=True)
class Entry:
    key: str
    value: str
    # What the consumers must make of it: a peer ("peer"), a lease they refuse to program
    # ("rejected"), or something that is not a lease at all ("unreadable").
    expect: str


subnet_n = st.integers(2, 250)
peer_ip = st.integers(60, 250).map(lambda n: f"192.0.2.{n}")
good_value = st.builds(lease_value, peer_ip)
bad_value = st.one_of(
    st.just(""),
    st.just("{not json"),
    st.just("[" * 200 + "]" * 200),
    st.text(max_size=40).filter(lambda t: not t.strip().startswith("{")),
    st.just(json.dumps({"PublicIP": "not-an-ip", "BackendType": "vxlan"})),
)
entries = st.one_of(
    st.builds(lambda n, v: Entry(f"10.244.{n}.0-24", v, "peer"), subnet_n, good_value),
    st.builds(
        lambda n, v: Entry(f"10.244.{n}.0-24&fd00:0:0:{n}::-64", v, "peer"), subnet_n, good_value
    ),
    st.builds(lambda n, v: Entry(f"0.0.0.0-0&fd00:0:0:{n}::-64", v, "peer"), subnet_n, good_value),
    st.builds(lambda v: Entry("0.0.0.0-0", v, "rejected"), good_value),
    st.builds(lambda n, v: Entry(f"172.16.{n}.0-24", v, "rejected"), subnet_n, good_value),
    st.builds(lambda n, v: Entry(f"10.99.{n}.0-24", v, "rejected"), subnet_n, good_value),
    st.builds(lambda n, v: Entry(f"10.244.{n}.128-25", v, "rejected"), subnet_n, good_value),
    st.builds(
        lambda n, v: Entry(f"10.244.{n}.0-24&fd99:0:0:{n}::-64", v, "rejected"),
        subnet_n,
        good_value,
    ),
    st.builds(lambda n, v: Entry(f"10.244.{n}.0-24", v, "unreadable"), subnet_n, bad_value),
    st.builds(
        lambda k, v: Entry(k, v, "unreadable"),
        st.text(
            st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=30
        ).filter(lambda k: not k[-1:].isdigit()),
        good_value,
    ),
)
# One entry per key: the store holds one value per key.
listings = st.lists(entries, max_size=8, unique_by=lambda e: e.key)


@dataclass
class Store:
    netns: str
    etcd: EtcdServer

    def fill(self, listing: list[Entry]) -> EtcdSettings:
        """A fresh prefix holding the network config, this host's own lease and `listing`."""
        prefix = f"/fuzz-{secrets.token_hex(6)}/network"
        items = {
            f"{prefix}/config": json.dumps(CONFIG),
            f"{prefix}/subnets/{OWN_KEY}": lease_value(str(OWN_IP), "0a:58:0a:f4:01:00"),
            **{f"{prefix}/subnets/{entry.key}": entry.value for entry in listing},
        }

        async def put_all() -> None:
            client = EtcdClient(Endpoint(self.etcd.host, self.etcd.client_port))
            try:
                for key, value in items.items():
                    await client.put(key.encode(), value.encode())
            finally:
                await client.close()

        run_in_netns(self.netns, lambda: asyncio.run(put_all()))
        return EtcdSettings(endpoints=(self.etcd.endpoint,), prefix=prefix, request_timeout=20)


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    netns = f"plf-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        etcd = start_etcd(netns=netns)
        try:
            yield Store(netns, etcd)
        finally:
            etcd.stop()
    finally:
        subprocess.run(["ip", "netns", "delete", netns], check=True)


def expected_counts(listing: list[Entry]) -> dict[str, int]:
    return {
        kind: sum(1 for e in listing if e.expect == kind)
        for kind in ("peer", "rejected", "unreadable")
    }


fuzz = settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])


@fuzz
@given(listing=listings)
def test_verify_accounts_for_every_key(store: Store, listing: list[Entry]) -> None:
    settings_ = store.fill(listing)
    report = verify(settings_, Host(netns=store.netns, public_ip=OWN_IP))
    want = expected_counts(listing)
    states = [status.datapath for status in report.leases]
    assert states.count(Datapath.OWN) == 1
    assert len(report.unreadable) == want["unreadable"], report.unreadable
    assert states.count(Datapath.REJECTED) == want["rejected"], report.leases
    assert report.rejected == want["rejected"] + want["unreadable"]
    assert len(report.leases) == 1 + want["peer"] + want["rejected"]
    for status in report.leases:
        lease = status.row.lease
        if lease.subnet is None and lease.ipv6_subnet is None:
            assert status.datapath is Datapath.REJECTED and "no subnet" in status.note
    # Every peer the agent would program is told apart as programmed, missing or skipped.
    assert all(
        s.datapath
        in (
            Datapath.OWN,
            Datapath.REJECTED,
            Datapath.MISSING,
            Datapath.SKIPPED,
            Datapath.PROGRAMMED,
        )
        for s in report.leases
    )
    assert report.rejected == 0 or not report.ok


@fuzz
@given(listing=listings)
def test_the_routes_module_reports_and_never_fails_on_the_stores_leases(
    store: Store, listing: list[Entry], tmp_path_factory: pytest.TempPathFactory
) -> None:
    from ansible_collections.pyflannel.network.plugins.modules import routes

    settings_ = store.fill(listing)
    subnet_file = tmp_path_factory.mktemp("routes") / "subnet.env"
    args = {
        "etcd_endpoints": list(settings_.endpoints),
        "etcd_prefix": settings_.prefix,
        "public_ip": str(OWN_IP),
        "subnet_file": str(subnet_file),
        "healthz_port": 0,
        "fail_on_problems": False,
    }
    result = run_in_netns(store.netns, lambda: run_module_main(routes.main, args, check=True))
    want = expected_counts(listing)
    assert not result["failed"], result
    assert result["writes"] == 0
    assert result["leases"]["rejected"] == want["rejected"] + want["unreadable"]
    assert len(result["rejected"]) == want["rejected"] + want["unreadable"]
    # The store's leases are never this node's problems (those would fail the module).
    assert not set(result["rejected"]) & set(result["problems"])
    assert result["leases"]["total"] == 1 + want["peer"] + want["rejected"]
    if result["rejected"]:
        assert any("rejected, never programmed" in w for w in result.get("warnings", []))
    text = json.dumps(result)
    assert "Traceback" not in text and "Error(" not in text
