"""An agent that restarts resumes its lease watch from the revision it kept instead of listing
every lease (pyflannel_runtime/subnet/etcd/resume.py), and lists them when what it kept cannot
be used: compacted, another cluster, a revision etcd has not reached (a restore), a torn or
garbage file. Real etcd (Debian's etcd-server); the first test with real agents and kernels.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pyflannel_lab.churn import kernel_entries
from pyflannel_lab.etcd_server import EtcdServer
from pyflannel_lab.netns_agents import PREFIX, AgentLab
from pyflannel_lab.netns_lab import LabHost
from pyflannel_runtime.subnet.etcd.client import EtcdClient, RangeReply
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings, EtcdSubnetManager
from pyflannel_runtime.subnet.etcd.resume import STATE_FILE_NAME
from pyflannel_runtime.subnet.watcher import LeaseScope, LeaseWatcher
from pyflannel_runtime.wire.lease import LeaseAttrs, make_subnet_key
from pyflannel_runtime.wire.netconf import parse_config
from pyflannel_runtime.wire.subnet_env import PreviousSubnets
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data

pytestmark = pytest.mark.etcd

T = TypeVar("T")
CONFIG = '{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}'
RESUMED = "Resuming the lease watch from revision"
# What each run's subnet.env would name, by etcd and prefix.
PREVIOUS: dict[tuple[str, str], PreviousSubnets] = {}
WAIT = 30.0  # a safety net against hangs, never an assertion


def run(coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def attrs(ip: str, mac: str = "aa:bb:cc:00:00:01") -> LeaseAttrs:
    return LeaseAttrs(
        public_ip=IPv4Address(ip), backend_type="vxlan", backend_data=vxlan_backend_data(1, mac)
    )


def subnet_key(prefix: str, subnet: str) -> str:
    return f"{prefix}/subnets/{make_subnet_key(IPv4Network(subnet), None)}"


def put_peer(server: EtcdServer, prefix: str, subnet: str, ip: str, *lease: str) -> None:
    server.etcdctl("put", *lease, subnet_key(prefix, subnet), attrs(ip).to_json())


@dataclass
class Ranges:
    """Every range request the manager's client sent: (key, whether it read no values)."""

    calls: list[tuple[bytes, bool]]

    def listings(self, prefix: str) -> int:
        """Full reads of the subnets prefix (the checks that read no values left out)."""
        return sum(key == f"{prefix}/subnets/".encode() and not n for key, n in self.calls)


@pytest.fixture
def ranges(monkeypatch: pytest.MonkeyPatch) -> Iterator[Ranges]:
    seen = Ranges([])
    original = EtcdClient.range_reply

    async def recorded(self: EtcdClient, key: bytes, *args: Any, **kw: Any) -> RangeReply:
        seen.calls.append((key, bool(kw.get("count_only") or kw.get("newest_only"))))
        return await original(self, key, *args, **kw)

    monkeypatch.setattr(EtcdClient, "range_reply", recorded)
    yield seen


async def peers_of(
    server: EtcdServer, prefix: str, state: Path | None, until: Callable[[set[str]], bool]
) -> set[tuple[str, str]]:
    """Start a manager as the agent does (its state file beside its subnet file, or none: a
    plain listing; the subnet its subnet.env would name), take the lease at 10.0.0.1 and
    apply its watch until ``until(subnets)``; the peers then, as (subnet, lease JSON); the
    manager closes (and keeps its state)."""
    settings = EtcdSettings(
        endpoints=(server.endpoint,),
        prefix=prefix,
        watch_state_file=str(state) if state else "",
        previous=PREVIOUS.get((server.endpoint, prefix), PreviousSubnets()),
    )
    manager = EtcdSubnetManager(settings)
    try:
        own = await manager.acquire_lease(attrs("10.0.0.1"))
        PREVIOUS[(server.endpoint, prefix)] = PreviousSubnets(subnet=own.subnet)
        scope = LeaseScope.of(parse_config(CONFIG), check_lengths=True)
        watcher = LeaseWatcher(own, scope)
        watch = manager.watch_leases()
        try:
            while True:
                watcher.apply(await asyncio.wait_for(anext(watch), WAIT))
                if until({str(lease.subnet) for lease in watcher.leases}):
                    return {(str(lease.subnet), lease.attrs.to_json()) for lease in watcher.leases}
        finally:
            await watch.aclose()
    finally:
        await manager.close()


def listed(server: EtcdServer, prefix: str) -> set[tuple[str, str]]:
    """The peers a plain listing gives (no state), for comparison."""
    return run(peers_of(server, prefix, None, lambda _: True))


def everything(_: set[str]) -> bool:
    return True


def first_run(server: EtcdServer, prefix: str, state: Path) -> None:
    """The config, two peers, and a run that keeps its state."""
    server.etcdctl("put", f"{prefix}/config", CONFIG)
    put_peer(server, prefix, "10.244.2.0/24", "10.0.0.2")
    put_peer(server, prefix, "10.244.3.0/24", "10.0.0.3")
    run(peers_of(server, prefix, state, lambda s: len(s) == 2))
    assert state.exists()


def changes_while_down(server: EtcdServer, prefix: str) -> None:
    server.etcdctl("del", subnet_key(prefix, "10.244.2.0/24"))
    put_peer(server, prefix, "10.244.3.0/24", "10.0.0.33")
    put_peer(server, prefix, "10.244.4.0/24", "10.0.0.4")


def until_converged(subnets: set[str]) -> bool:
    return subnets == {"10.244.3.0/24", "10.244.4.0/24"}


# --- the kernel, with real agents -----------------------------------------------------------


def wait_routes(lab: AgentLab, host_index: int, wanted: set[IPv4Network]) -> None:
    deadline = time.monotonic() + WAIT
    while kernel_entries(lab, host_index).routes != wanted:
        if time.monotonic() > deadline:
            raise AssertionError(f"routes {kernel_entries(lab, host_index).routes} != {wanted}")
        time.sleep(0.1)


def leased(lab: AgentLab, host: LabHost) -> IPv4Network:
    """The subnet the host's agent leased (its subnet.env)."""
    env = dict(line.split("=", 1) for line in lab.subnet_file(host).read_text().split())
    return IPv4Network(env["FLANNEL_SUBNET"], strict=False)


def test_a_restart_resumes_and_programs_what_a_full_listing_does() -> None:
    """While the agent is down: a peer stops and its lease is deleted, another's etcd lease
    runs out (etcd deletes its key), a new one comes. The restarted agent resumes (no
    listing) and its kernel holds exactly what a start that lists everything gives it."""
    with AgentLab({"Type": "vxlan"}, hosts=3, prefix="prs", lab_pods=False) as lab:
        lab.start_all()
        down, gone, stays = lab.net.hosts
        expiring, new = IPv4Network("10.244.200.0/24"), IPv4Network("10.244.201.0/24")
        expiring_key = f"{PREFIX}/subnets/{make_subnet_key(expiring, None)}"
        lease_id = lab.etcdctl("lease", "grant", "10").split()[1]
        peer = attrs("192.0.2.200", "0e:00:00:00:00:c8").to_json()
        lab.etcdctl("put", f"--lease={lease_id}", expiring_key, peer)
        wait_routes(lab, 0, {leased(lab, gone), leased(lab, stays), expiring})

        lab.stop_agent(down)  # SIGTERM: it keeps its watch's state
        lab.stop_agent(gone, signal.SIGKILL)
        lab.etcdctl("del", f"{PREFIX}/subnets/{make_subnet_key(leased(lab, gone), None)}")
        new_key = f"{PREFIX}/subnets/{make_subnet_key(new, None)}"
        lab.etcdctl("put", new_key, attrs("192.0.2.201", "0e:00:00:00:00:c9").to_json())
        deadline = time.monotonic() + WAIT
        while lab.etcdctl("get", "--keys-only", expiring_key).strip():
            assert time.monotonic() < deadline, "the etcd lease never ran out"
            time.sleep(0.2)

        lab.start_agent(down)
        lab.wait_ready(down)
        wait_routes(lab, 0, {leased(lab, stays), new})
        resumed = kernel_entries(lab, 0)
        assert lab.agents[down.n].log().count(RESUMED) == 1

        lab.stop_agent(down)
        (lab.subnet_file(down).parent / STATE_FILE_NAME).unlink()
        lab.start_agent(down)
        lab.wait_ready(down)
        wait_routes(lab, 0, {leased(lab, stays), new})
        assert lab.agents[down.n].log().count(RESUMED) == 1  # this start listed
        assert kernel_entries(lab, 0) == resumed


# --- the manager: what it reads, and when it lists instead ----------------------------------


def test_a_resumed_watch_reads_only_what_changed(
    etcd_server: EtcdServer,
    etcd_prefix: str,
    tmp_path: Path,
    ranges: Ranges,
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = tmp_path / STATE_FILE_NAME
    first_run(etcd_server, etcd_prefix, state)
    changes_while_down(etcd_server, etcd_prefix)
    ranges.calls.clear()
    with caplog.at_level(logging.INFO):
        resumed = run(peers_of(etcd_server, etcd_prefix, state, until_converged))
    assert RESUMED in caplog.text
    assert ranges.listings(etcd_prefix) == 0
    assert resumed == listed(etcd_server, etcd_prefix)


def test_the_first_snapshot_of_a_resume_holds_what_changed_while_down(
    etcd_server: EtcdServer, etcd_prefix: str, tmp_path: Path, ranges: Ranges
) -> None:
    """The first snapshot already has the peers that came or changed while the agent was down
    (the watch's replay applied up to etcd's newest lease): a full reconcile from the kept
    leases alone would remove a new peer's kernel entries until the replay brought it back."""
    state = tmp_path / STATE_FILE_NAME
    first_run(etcd_server, etcd_prefix, state)
    changes_while_down(etcd_server, etcd_prefix)
    ranges.calls.clear()

    async def first_snapshot() -> set[tuple[str, str]]:
        settings = EtcdSettings(
            endpoints=(etcd_server.endpoint,),
            prefix=etcd_prefix,
            watch_state_file=str(state),
            previous=PREVIOUS[(etcd_server.endpoint, etcd_prefix)],
        )
        manager = EtcdSubnetManager(settings)
        try:
            own = await manager.acquire_lease(attrs("10.0.0.1"))
            watch = manager.watch_leases()
            try:
                batch = await asyncio.wait_for(anext(watch), WAIT)
            finally:
                await watch.aclose()
        finally:
            await manager.close()
        assert batch.snapshot is not None
        return {
            (str(lease.subnet), lease.attrs.to_json())
            for lease in batch.snapshot
            if lease.subnet != own.subnet
        }

    snapshot = run(first_snapshot())
    assert ranges.listings(etcd_prefix) == 0
    assert snapshot == listed(etcd_server, etcd_prefix)


def test_a_compacted_revision_lists_and_converges(
    etcd_factory: Callable[..., EtcdServer],
    etcd_prefix: str,
    tmp_path: Path,
    ranges: Ranges,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = etcd_factory()
    state = tmp_path / STATE_FILE_NAME
    first_run(server, etcd_prefix, state)
    changes_while_down(server, etcd_prefix)
    revision = server.etcdctl("get", "-w", "fields", f"{etcd_prefix}/config")
    now = next(line for line in revision.splitlines() if line.startswith('"Revision"'))
    server.etcdctl("compact", now.split(":")[1].strip())
    ranges.calls.clear()
    with caplog.at_level(logging.INFO):
        peers = run(peers_of(server, etcd_prefix, state, until_converged))
    assert "required revision has been compacted" in caplog.text
    assert RESUMED not in caplog.text
    assert ranges.listings(etcd_prefix) == 1
    assert peers == listed(server, etcd_prefix)


def test_a_state_of_another_cluster_lists_and_converges(
    etcd_factory: Callable[..., EtcdServer],
    etcd_prefix: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, other = etcd_factory(), etcd_factory()
    state = tmp_path / STATE_FILE_NAME
    first_run(first, etcd_prefix, state)
    # The other cluster is further on, so that the kept revision is one it has.
    for n in range(30):
        other.etcdctl("put", f"/filler/{n}", "x")
    other.etcdctl("put", f"{etcd_prefix}/config", CONFIG)
    put_peer(other, etcd_prefix, "10.244.3.0/24", "10.0.0.33")
    put_peer(other, etcd_prefix, "10.244.4.0/24", "10.0.0.4")
    with caplog.at_level(logging.INFO):
        peers = run(peers_of(other, etcd_prefix, state, until_converged))
    assert "the leases kept from the last run are of etcd cluster" in caplog.text
    assert RESUMED not in caplog.text
    assert peers == listed(other, etcd_prefix)


def test_a_revision_etcd_has_not_reached_after_a_restore_lists_and_converges(
    etcd_factory: Callable[..., EtcdServer],
    etcd_prefix: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """etcd restored from a backup taken before the revision the agent kept: the same cluster
    (the restore keeps its name and peers), an older history."""
    server = etcd_factory()
    server.etcdctl("put", f"{etcd_prefix}/config", CONFIG)
    put_peer(server, etcd_prefix, "10.244.3.0/24", "10.0.0.3")
    backup = tmp_path / "backup.db"
    server.etcdctl("snapshot", "save", str(backup))
    state = tmp_path / STATE_FILE_NAME
    put_peer(server, etcd_prefix, "10.244.2.0/24", "10.0.0.2")
    run(peers_of(server, etcd_prefix, state, lambda s: len(s) == 2))

    server.kill()
    data = server.workdir / "data"
    data.rename(server.workdir / "data.before-restore")
    peer_url = f"http://{server.host}:{server.peer_port}"
    server.etcdctl(
        "snapshot",
        "restore",
        str(backup),
        f"--data-dir={data}",
        "--name=pyft",
        f"--initial-cluster=pyft={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
    )
    server.spawn()
    assert server.wait_healthy()
    with caplog.at_level(logging.INFO):
        peers = run(peers_of(server, etcd_prefix, state, lambda s: s == {"10.244.3.0/24"}))
    assert "required revision is a future revision" in caplog.text
    assert RESUMED not in caplog.text
    assert peers == listed(server, etcd_prefix)


@pytest.mark.parametrize("damage", ["torn", "garbage", "empty", "other prefix"])
def test_a_torn_or_garbage_state_file_is_ignored(
    etcd_server: EtcdServer,
    etcd_prefix: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    damage: str,
) -> None:
    state = tmp_path / STATE_FILE_NAME
    first_run(etcd_server, etcd_prefix, state)
    kept = state.read_bytes()
    damaged = {
        "torn": kept[: len(kept) // 2],
        "garbage": b"\x00\xff" * 100,
        "empty": b"",
        "other prefix": kept.replace(b'"prefix":"', b'"prefix":"L290aGVy', 1),
    }[damage]
    state.write_bytes(damaged)
    changes_while_down(etcd_server, etcd_prefix)
    with caplog.at_level(logging.INFO):
        peers = run(peers_of(etcd_server, etcd_prefix, state, until_converged))
    assert "Ignoring the lease watch's state in" in caplog.text
    assert RESUMED not in caplog.text
    assert peers == listed(etcd_server, etcd_prefix)
