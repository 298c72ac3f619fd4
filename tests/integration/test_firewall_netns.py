"""Real iptables / nft inside a throwaway network namespace: the golden listings of flannel's
end-to-end suite (flannel-io/flannel e2e/rules.go).

Every command runs inside the test's own namespace; the root namespace is never touched.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import subprocess
from collections.abc import Coroutine, Iterator
from ipaddress import IPv4Network, IPv6Network
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pyflannel_runtime.firewall import CommandRunner, TrafficManager, start_traffic_manager
from pyflannel_runtime.firewall.blackhole import ensure_blackhole_route
from pyflannel_runtime.firewall.iptables import IPTablesManager
from pyflannel_runtime.firewall.nftables import NFTablesManager
from pyflannel_runtime.ops.reset import Leftovers, remove_leftovers

pytestmark = pytest.mark.root

T = TypeVar("T")
N4, S4 = IPv4Network("10.244.0.0/16"), IPv4Network("10.244.1.0/24")
N6, S6 = IPv6Network("fd00:10:244::/56"), IPv6Network("fd00:10:244:1::/64")

MASQ_V4 = """\
-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG
-N FLANNEL-POSTRTG
-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN
-A FLANNEL-POSTRTG -s 10.244.1.0/24 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j RETURN
-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.1.0/24 -m comment --comment "flanneld masq" -j RETURN
-A FLANNEL-POSTRTG ! -s 10.244.0.0/16 -d 10.244.1.0/24 -m comment --comment "flanneld masq" -j RETURN
-A FLANNEL-POSTRTG -s 10.244.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully
-A FLANNEL-POSTRTG ! -s 10.244.0.0/16 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully
"""

MASQ_V6 = """\
-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG
-N FLANNEL-POSTRTG
-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN
-A FLANNEL-POSTRTG -s fd00:10:244:1::/64 -d fd00:10:244::/56 -m comment --comment "flanneld masq" -j RETURN
-A FLANNEL-POSTRTG -s fd00:10:244::/56 -d fd00:10:244:1::/64 -m comment --comment "flanneld masq" -j RETURN
-A FLANNEL-POSTRTG ! -s fd00:10:244::/56 -d fd00:10:244:1::/64 -m comment --comment "flanneld masq" -j RETURN
-A FLANNEL-POSTRTG -s fd00:10:244::/56 ! -d ff00::/8 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully
-A FLANNEL-POSTRTG ! -s fd00:10:244::/56 -d fd00:10:244::/56 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully
"""

FORWARD_V4 = """\
-P FORWARD ACCEPT
-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD
-N FLANNEL-FWD
-A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT
-A FLANNEL-FWD -d 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT
"""

FORWARD_V6 = """\
-P FORWARD ACCEPT
-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD
-N FLANNEL-FWD
-A FLANNEL-FWD -s fd00:10:244::/56 -m comment --comment "flanneld forward" -j ACCEPT
-A FLANNEL-FWD -d fd00:10:244::/56 -m comment --comment "flanneld forward" -j ACCEPT
"""

NFT_POSTRTG_V4 = """\
table ip flannel-ipv4 {
	chain postrtg {
		comment "chain to manage traffic masquerading by flannel"
		type nat hook postrouting priority srcnat; policy accept;
		meta mark 0x00004000 return
		ip saddr 10.244.1.0/24 ip daddr 10.244.0.0/16 return
		ip saddr 10.244.0.0/16 ip daddr 10.244.1.0/24 return
		ip saddr != 10.244.1.0/24 ip daddr 10.244.0.0/16 return
		ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random
		ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random
	}
}
"""

NFT_FORWARD_V4 = """\
table ip flannel-ipv4 {
	chain forward {
		comment "chain to accept flannel traffic"
		type filter hook forward priority filter; policy accept;
		ip saddr 10.244.0.0/16 accept
		ip daddr 10.244.0.0/16 accept
	}
}
"""

NFT_POSTRTG_V6 = """\
table ip6 flannel-ipv6 {
	chain postrtg {
		comment "chain to manage traffic masquerading by flannel"
		type nat hook postrouting priority srcnat; policy accept;
		meta mark 0x00004000 return
		ip6 saddr fd00:10:244:1::/64 ip6 daddr fd00:10:244::/56 return
		ip6 saddr fd00:10:244::/56 ip6 daddr fd00:10:244:1::/64 return
		ip6 saddr != fd00:10:244:1::/64 ip6 daddr fd00:10:244::/56 return
		ip6 saddr fd00:10:244::/56 ip6 daddr != ff00::/8 masquerade fully-random
		ip6 saddr != fd00:10:244::/56 ip6 daddr fd00:10:244::/56 masquerade fully-random
	}
}
"""

NFT_FORWARD_V6 = """\
table ip6 flannel-ipv6 {
	chain forward {
		comment "chain to accept flannel traffic"
		type filter hook forward priority filter; policy accept;
		ip6 saddr fd00:10:244::/56 accept
		ip6 daddr fd00:10:244::/56 accept
	}
}
"""


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class Netns:
    def __init__(self, name: str) -> None:
        self.name = name
        self.runner = CommandRunner.in_netns(name)

    def sh(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.name, *argv],
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )

    def out(self, *argv: str) -> str:
        return self.sh(*argv).stdout

    def masq_listing(self, tool: str = "iptables") -> str:
        """flannel's e2e check: FLANNEL lines of POSTROUTING, then the FLANNEL-POSTRTG chain."""
        postrouting = self.out(tool, "-t", "nat", "-S", "POSTROUTING").splitlines()
        jumps = [line for line in postrouting if "FLANNEL" in line]
        return "".join(f"{line}\n" for line in jumps) + self.out(
            tool, "-t", "nat", "-S", "FLANNEL-POSTRTG"
        )

    def forward_listing(self, tool: str = "iptables") -> str:
        return self.out(tool, "-t", "filter", "-S", "FORWARD") + self.out(
            tool, "-t", "filter", "-S", "FLANNEL-FWD"
        )

    def nft_tables(self) -> list[str]:
        return self.out("nft", "list", "tables").splitlines()


@pytest.fixture
def netns() -> Iterator[Netns]:
    name = f"pfw-{secrets.token_hex(4)}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
    try:
        yield Netns(name)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True, timeout=30)


async def full_setup(manager: TrafficManager) -> None:
    await manager.setup_masq(N4, S4)
    await manager.setup_masq(N6, S6)
    await manager.setup_forward(N4)
    await manager.setup_forward(N6)


def test_iptables_golden_listings(netns: Netns) -> None:
    async def scenario() -> None:
        manager = await start_traffic_manager(False, netns.runner)
        assert isinstance(manager, IPTablesManager)
        await full_setup(manager)

    run(scenario())
    assert netns.masq_listing() == MASQ_V4
    assert netns.forward_listing() == FORWARD_V4
    assert netns.masq_listing("ip6tables") == MASQ_V6
    assert netns.forward_listing("ip6tables") == FORWARD_V6


def test_iptables_without_random_fully(netns: Netns) -> None:
    run(IPTablesManager(netns.runner, fully_random_disabled=True).setup_masq(N4, S4))
    assert netns.masq_listing() == MASQ_V4.replace(" --random-fully", "")


def test_iptables_setup_is_idempotent_and_jumps_stay_last(netns: Netns) -> None:
    run(full_setup(IPTablesManager(netns.runner)))
    netns.sh("iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "192.0.2.0/24", "-j", "RETURN")
    run(full_setup(IPTablesManager(netns.runner)))  # what a restart does

    assert netns.masq_listing() == MASQ_V4
    assert netns.forward_listing() == FORWARD_V4
    assert netns.masq_listing("ip6tables") == MASQ_V6
    assert netns.forward_listing("ip6tables") == FORWARD_V6
    postrouting = netns.out("iptables", "-t", "nat", "-S", "POSTROUTING").splitlines()
    assert postrouting[-2:] == [
        "-A POSTROUTING -s 192.0.2.0/24 -j RETURN",
        '-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG',
    ]


def test_ensure_recreates_deleted_rules_and_chains(
    netns: Netns, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel_runtime.firewall.iptables")
    manager = IPTablesManager(netns.runner)
    run(full_setup(manager))
    assert run(manager.ensure()) is False
    assert "Some iptables rules are missing; deleting and recreating rules" not in caplog.messages

    netns.sh("iptables", "-t", "nat", "-D", "FLANNEL-POSTRTG", "3")
    netns.sh("ip6tables", "-t", "filter", "-D", "FORWARD", "1")
    netns.sh("ip6tables", "-t", "filter", "-F", "FLANNEL-FWD")
    netns.sh("ip6tables", "-t", "filter", "-X", "FLANNEL-FWD")
    assert netns.masq_listing() != MASQ_V4

    assert run(manager.ensure()) is True
    assert "Some iptables rules are missing; deleting and recreating rules" in caplog.messages
    assert netns.masq_listing() == MASQ_V4
    assert netns.forward_listing("ip6tables") == FORWARD_V6
    assert netns.forward_listing() == FORWARD_V4


def test_resync_loop_restores_a_deleted_rule(netns: Netns) -> None:
    manager = IPTablesManager(netns.runner)

    async def scenario() -> str:
        await manager.setup_masq(N4, S4)
        resync = asyncio.create_task(manager.resync(0.05))
        try:
            netns.sh("iptables", "-t", "nat", "-D", "FLANNEL-POSTRTG", "1")
            # Liveness, not timing: wait (bounded) until some resync pass has repaired the chain.
            async with asyncio.timeout(60):
                while (listing := netns.masq_listing()) != MASQ_V4:
                    await asyncio.sleep(0.05)
            return listing
        finally:
            resync.cancel()

    assert run(scenario()) == MASQ_V4


def test_old_subnet_rules_are_removed(netns: Netns) -> None:
    old_subnet = IPv4Network("10.244.7.0/24")
    manager = IPTablesManager(netns.runner)
    run(manager.setup_masq(N4, old_subnet))
    assert "10.244.7.0/24" in netns.masq_listing()

    run(manager.remove_masq(N4, old_subnet))
    assert netns.masq_listing() == "-N FLANNEL-POSTRTG\n"
    run(manager.remove_masq(N4, old_subnet))  # only rules that exist are deleted: a no-op

    run(manager.setup_masq(N4, old_subnet))
    run(
        IPTablesManager(netns.runner).setup_masq(
            N4, S4, previous_network=N4, previous_subnet=old_subnet
        )
    )
    assert netns.masq_listing() == MASQ_V4


def test_nft_golden_listings_and_idempotence(netns: Netns) -> None:
    async def scenario() -> None:
        manager = await start_traffic_manager(True, netns.runner)
        assert isinstance(manager, NFTablesManager)
        await full_setup(manager)
        await full_setup(manager)

    run(scenario())
    assert netns.out("nft", "list", "chain", "ip", "flannel-ipv4", "postrtg") == NFT_POSTRTG_V4
    assert netns.out("nft", "list", "chain", "ip", "flannel-ipv4", "forward") == NFT_FORWARD_V4
    assert netns.out("nft", "list", "chain", "ip6", "flannel-ipv6", "postrtg") == NFT_POSTRTG_V6
    assert netns.out("nft", "list", "chain", "ip6", "flannel-ipv6", "forward") == NFT_FORWARD_V6
    table = netns.out("nft", "list", "table", "ip6", "flannel-ipv6").splitlines()
    assert table[:2] == ["table ip6 flannel-ipv6 {", '\tcomment "rules for flannel-ipv6"']


def test_nft_without_fully_random(netns: Netns) -> None:
    async def scenario() -> None:
        manager = NFTablesManager(netns.runner, fully_random_disabled=True)
        await manager.init()
        await manager.setup_masq(N4, S4)

    run(scenario())
    listing = netns.out("nft", "list", "chain", "ip", "flannel-ipv4", "postrtg")
    assert listing == NFT_POSTRTG_V4.replace(" fully-random", "")


def test_switching_iptables_to_nft_removes_the_iptables_chains(netns: Netns) -> None:
    async def scenario() -> None:
        await full_setup(await start_traffic_manager(False, netns.runner))
        await full_setup(await start_traffic_manager(True, netns.runner))

    run(scenario())
    for tool in ("iptables", "ip6tables"):
        assert "FLANNEL" not in netns.out(tool, "-t", "nat", "-S")
        assert "FLANNEL" not in netns.out(tool, "-t", "filter", "-S")
        assert netns.out(tool, "-t", "filter", "-S", "FORWARD") == "-P FORWARD ACCEPT\n"
    assert netns.out("nft", "list", "chain", "ip", "flannel-ipv4", "forward") == NFT_FORWARD_V4


def test_switching_nft_to_iptables_removes_the_nft_tables(netns: Netns) -> None:
    async def scenario() -> None:
        await full_setup(await start_traffic_manager(True, netns.runner))
        await full_setup(await start_traffic_manager(False, netns.runner))

    run(scenario())
    tables = netns.nft_tables()
    assert "table ip flannel-ipv4" not in tables
    assert "table ip6 flannel-ipv6" not in tables
    assert netns.masq_listing() == MASQ_V4
    assert netns.forward_listing("ip6tables") == FORWARD_V6


def test_blackhole_route_is_added_once(netns: Netns) -> None:
    async def scenario() -> list[bool]:
        return [
            await ensure_blackhole_route(S4, netns=netns.name),
            await ensure_blackhole_route(S4, netns=netns.name),
            await ensure_blackhole_route(S6, netns=netns.name),
            await ensure_blackhole_route(S6, netns=netns.name),
        ]

    assert run(scenario()) == [True, False, True, False]
    assert netns.out("ip", "route", "show", "type", "blackhole").split() == [
        "blackhole",
        "10.244.1.0/24",
    ]
    assert netns.out("ip", "-6", "route", "show", "type", "blackhole").startswith(
        "blackhole fd00:10:244:1::/64 "
    )


def not_flannels(netns: Netns) -> dict[str, list[str]]:
    """Everything in both families' iptables and in nft that has nothing of flannel's."""
    seen = {
        tool: [
            line
            for line in netns.out(tool).splitlines()
            if "FLANNEL" not in line and not line.startswith("#")
        ]
        for tool in ("iptables-save", "ip6tables-save")
    }
    seen["nft"] = [t for t in netns.nft_tables() if "flannel" not in t]
    return seen


def test_reset_removes_flannels_chains_jumps_tables_routes_and_cni_state_and_nothing_else(
    netns: Netns, tmp_path: Path
) -> None:
    async def flannel() -> None:
        await full_setup(IPTablesManager(netns.runner))
        await NFTablesManager(netns.runner).init()  # as a switch from nft mode can leave them

    run(flannel())
    # The external interface, with host-gw's routes to two peers' subnets.
    for argv in (
        ["ip", "link", "add", "ext0", "type", "veth", "peer", "name", "ext1"],
        ["ip", "addr", "add", "192.0.2.1/24", "dev", "ext0"],
        ["ip", "link", "set", "ext0", "up"],
        ["ip", "route", "add", "10.244.5.0/24", "via", "192.0.2.5"],
        ["ip", "route", "add", "10.244.6.0/24", "via", "192.0.2.6"],
    ):
        netns.sh(*argv)
    # Someone else's: a chain with a rule and a jump into it, a masquerade rule, an nft table,
    # a route out of the pod network and one into it that flannel never writes (proto static).
    for argv in (
        ["iptables", "-N", "KEEP-ME"],
        ["iptables", "-A", "KEEP-ME", "-s", "192.0.2.0/24", "-j", "RETURN"],
        ["iptables", "-I", "FORWARD", "-j", "KEEP-ME"],
        ["ip6tables", "-t", "nat", "-A", "POSTROUTING", "-s", "fd00:1::/64", "-j", "MASQUERADE"],
        ["nft", "add", "table", "inet", "keep-me"],
        ["ip", "route", "add", "203.0.113.0/24", "via", "192.0.2.7"],
        ["ip", "route", "add", "10.244.9.0/24", "via", "192.0.2.9", "proto", "static"],
    ):
        netns.sh(*argv)
    others = not_flannels(netns)
    assert "table inet keep-me" in others["nft"]  # beside iptables-nft's own tables
    # The plugin's state and host-local's store of this network; another network's store.
    state, ipam = tmp_path / "cni-flannel", tmp_path / "cni-networks"
    conflist = tmp_path / "10-flannel.conflist"
    conflist.write_text(
        json.dumps(
            {
                "name": "cbr0",
                "cniVersion": "0.3.1",
                "plugins": [
                    {"type": "flannel", "dataDir": str(state), "ipam": {"dataDir": str(ipam)}}
                ],
            }
        )
    )
    for path in (state / "c0ffee", ipam / "cbr0" / "10.244.1.2", ipam / "other" / "10.9.0.2"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("c0ffee\neth0")

    def reset(check: bool) -> Leftovers:
        return remove_leftovers(str(conflist), [N4, N6], check=check, netns=netns.name)

    predicted = reset(check=True)
    assert "FLANNEL" in netns.out("iptables-save") and (state / "c0ffee").exists()
    assert "10.244.5.0/24" in netns.out("ip", "route")
    removed = reset(check=False)
    assert removed == predicted
    assert removed.directories == (str(state), str(ipam / "cbr0"))
    assert [route.split(" dev ")[0] for route in removed.routes] == [
        "route 10.244.5.0/24 via 192.0.2.5",
        "route 10.244.6.0/24 via 192.0.2.6",
    ]
    for family in ("iptables", "ip6tables"):
        assert f"{family} -t nat -N FLANNEL-POSTRTG" in removed.firewall
        assert f"{family} -t filter -N FLANNEL-FWD" in removed.firewall
    assert removed.firewall[-2:] == ("nft table ip flannel-ipv4", "nft table ip6 flannel-ipv6")

    for tool in ("iptables-save", "ip6tables-save"):
        assert "FLANNEL" not in netns.out(tool)
    assert not_flannels(netns) == others
    assert netns.out("ip", "-4", "route") == (
        "10.244.9.0/24 via 192.0.2.9 dev ext0 proto static linkdown \n"
        "192.0.2.0/24 dev ext0 proto kernel scope link src 192.0.2.1 linkdown \n"
        "203.0.113.0/24 via 192.0.2.7 dev ext0 linkdown \n"
    )
    assert not state.exists() and not (ipam / "cbr0").exists()
    assert (ipam / "other" / "10.9.0.2").exists()
    assert not reset(check=False).found
