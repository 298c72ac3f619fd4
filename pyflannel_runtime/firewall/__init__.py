"""iptables/nftables traffic managers and the blackhole route (spec §6, §0 steps 12-15)."""

from pyflannel_runtime.firewall.command import CommandRunner, FirewallError
from pyflannel_runtime.firewall.iptables import IPTablesManager
from pyflannel_runtime.firewall.manager import (
    TrafficManager,
    new_traffic_manager,
    start_traffic_manager,
)
from pyflannel_runtime.firewall.nftables import NFTablesManager

__all__ = [
    "CommandRunner",
    "FirewallError",
    "IPTablesManager",
    "NFTablesManager",
    "TrafficManager",
    "new_traffic_manager",
    "start_traffic_manager",
]
