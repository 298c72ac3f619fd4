"""``pyflannel connectivity``: the suite on this node alone, with the verify role's code.

On one node the suite wires its two probe pods, runs the scenarios that stay on the node (pod
to pod: ICMP, a TCP stream, UDP) and pod to an outside address, names the likely cause of a
failure from what the node shows (its firewall, the vxlan device's tx checksum offload, the
pod MTU against subnet.env), removes the probes and says whether anything was left. The
scenarios across nodes need every node's probe pods at once: the verify role runs those.
"""

from __future__ import annotations

import argparse
import json
import sys
from ipaddress import IPv4Network

from pyflannel_runtime import DEFAULT_SUBNET_FILE
from pyflannel_runtime.backend_spec import tx_offload

HELP = "run the connectivity suite's scenarios on this node"
DESCRIPTION = (
    "Wire two probe pods through this node's CNI conflist and run the connectivity suite's "
    "scenarios that stay on the node: pod to pod (ICMP, a 1 MiB TCP stream with its byte count "
    "and digest checked, UDP checksummed end to end), and pod to --outside (masqueraded), with "
    "the likely cause of each failure; then remove the probes. The scenarios across nodes run "
    "in the verify role (site.yml --tags flannel_preflight,flannel_connectivity). Exit status: "
    "0 all passed, 1 a scenario failed or something was left behind, 2 the suite could not run."
)
DEFAULT_CONFLIST = "/etc/cni/net.d/10-flannel.conflist"
_LOCAL_GROUPS = ("pods", "outside")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default="pyflannel-probe", help="the probe pods' name")
    parser.add_argument("--conflist", default=DEFAULT_CONFLIST, help="the node's CNI conflist")
    parser.add_argument("--bin-dir", default="/opt/cni/bin", help="the CNI bin directory")
    parser.add_argument(
        "--outside",
        default="",
        metavar="ADDRESS[:PORT]",
        help="an address outside the pod network to reach (with a port: a UDP echo there, "
        "the suite's responder with --outside, shows the masqueraded source)",
    )
    parser.add_argument(
        "--vxlan-device", default="flannel.1", help="the vxlan device ('' for other backends)"
    )
    parser.add_argument("--subnet-file", default=DEFAULT_SUBNET_FILE, help="the agent's subnet.env")
    parser.add_argument("--nftables", action="store_true", help="the agent runs in nftables mode")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")


def command(args: argparse.Namespace) -> int:
    from pyflannel_runtime.connectivity.causes import view_of
    from pyflannel_runtime.connectivity.summary import summary_lines
    from pyflannel_runtime.ops import connectivity
    from pyflannel_runtime.ops.node_check import read_subnet_env
    from pyflannel_runtime.ops.probe import ProbeError

    env = read_subnet_env(args.subnet_file)
    network = IPv4Network(env.get("FLANNEL_NETWORK") or "10.244.0.0/16")
    node = "this node"
    try:
        setup = connectivity.setup(
            args.name,
            args.conflist,
            args.bin_dir,
            "",
            nftables_mode=args.nftables,
            vxlan_device=args.vxlan_device,
            offload_mode=tx_offload.DEFAULT_MODE,
        )
    except ProbeError as err:
        print(f"pyflannel connectivity: {err}", file=sys.stderr)
        return 2
    try:
        result = connectivity.run(
            node,
            {node: setup},
            network,
            args.outside,
            vxlan_device=args.vxlan_device,
            groups=_LOCAL_GROUPS,
        )
    except ValueError as err:
        print(f"pyflannel connectivity: {err}", file=sys.stderr)
        return 2
    finally:
        cleaned = connectivity.teardown(args.name, args.conflist, args.bin_dir)
    view = view_of(node, {"subnet_env": env}, setup, result.as_dict(), None)
    left = [*cleaned["problems"], *cleaned["left_behind"]]
    if args.output == "json":
        print(json.dumps({"setup": setup, **result.as_dict(), "left_behind": left}, indent=2))
    else:
        lines = summary_lines([node], result.rows, {node: result.times}, {node: view})
        lines += [f"left behind: {item}" for item in left]
        print("\n".join(lines))
    return 1 if any(row.failed for row in result.rows) or left else 0
