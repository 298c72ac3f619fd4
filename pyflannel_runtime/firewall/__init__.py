"""iptables/nftables traffic managers and the blackhole route.

flannel-io/flannel pkg/trafficmngr/; the startup steps in main.go: main. docs/compatibility.md,
"iptables and nftables rules".
"""

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
