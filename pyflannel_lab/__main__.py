"""``python -m pyflannel_lab``: the lab's command line.

hosts up [--hosts N] [--etcd-members M] [--release R[,R...]]
                        boot N hosts (default 3, or one per release listed), the first M
                        (default 1) etcd members, all of Debian release R (default bookworm) or
                        host by host of the releases listed; write the inventory (reuses a lab
                        that is up, growing it to N hosts)
hosts add [--count N] [--release R]
                        boot N more hosts (default 1) into the running lab and its inventory
hosts remove NAME       throw one host away and take it out of the inventory
hosts stop NAME         power one host off (its address and inventory entry stay)
hosts start NAME        power it on again
hosts down              remove the lab; the image cache stays
hosts status            the hosts, their addresses and containers
hosts restart NAME      reboot one host (same address, same NIC)
image [--release R]     build the release's host image if the cache lacks it; print its tag
podman-env              shell exports that point podman (or molecule) at the lab's storage
netns up [--backend B] [--hosts N]
                        the agent-only lab in network namespaces: etcd, pyflanneld, CNI pods
netns down              remove it
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from collections.abc import Sequence

from pyflannel_lab import hosts, netns_cli, rootfs
from pyflannel_lab.errors import LabError
from pyflannel_lab.paths import cache_dir
from pyflannel_lab.podman import Podman


def _release_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--release",
        choices=rootfs.RELEASES,
        default=rootfs.DEFAULT_RELEASE,
        help=f"{what} (default {rootfs.DEFAULT_RELEASE})",
    )


def _print_lab(state: hosts.LabState) -> None:
    states = hosts.container_states(state)
    images = ", ".join(dict.fromkeys(host.image for host in state.hosts))
    print(f"underlay {state.network} on bridge {state.bridge}; images {images}")
    for host in state.hosts:
        print(f"  {host.name:<8} {host.address!s:<16} {host.release:<9} {states[host.name]}")
    print(f"inventory: {state.inventory}")


def _up(args: argparse.Namespace) -> int:
    started = time.monotonic()
    releases = args.release.split(",") if args.release else []
    if args.hosts is not None:
        count = args.hosts
    else:
        count = len(releases) if len(releases) > 1 else hosts.DEFAULT_HOSTS
    state = hosts.up(count, etcd_members=args.etcd_members, releases=releases)
    _print_lab(state)
    print(
        f"up in {time.monotonic() - started:.1f} s; try: ansible -i {state.inventory} all -m ping"
    )
    return 0


def _down(args: argparse.Namespace) -> int:
    started = time.monotonic()
    if hosts.down():
        print(f"down in {time.monotonic() - started:.1f} s")
    else:
        print("no lab is up")
    return 0


def _status(args: argparse.Namespace) -> int:
    state = hosts.load()
    if state is None:
        print("no lab is up")
        return 1
    _print_lab(state)
    return 0


def _add(args: argparse.Namespace) -> int:
    for host in hosts.add(args.count, release=args.release):
        print(f"{host.name} is up at {host.address}")
    return 0


def _host_action(args: argparse.Namespace) -> int:
    action, done = _HOST_ACTIONS[args.action]
    host = action(args.name)
    print(f"{host.name} ({host.address}) {done}")
    return 0


_HOST_ACTIONS = {
    "restart": (hosts.restart_host, "is back"),
    "stop": (hosts.stop_host, "is powered off"),
    "start": (hosts.start_host, "is back"),
    "remove": (hosts.remove_host, "is gone, and out of the inventory"),
}


def _image(args: argparse.Namespace) -> int:
    print(rootfs.ensure_image(release=args.release))
    return 0


def _podman_env(args: argparse.Namespace) -> int:
    podman = Podman(cache_dir())
    podman.configure()
    for name, value in podman.env().items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m pyflannel_lab", description="Lab hosts for the playbook."
    )
    commands = top.add_subparsers(required=True, metavar="COMMAND")
    host_commands = commands.add_parser("hosts", help="lab hosts").add_subparsers(
        required=True, metavar="ACTION"
    )
    up = host_commands.add_parser("up", help="boot the hosts and write the inventory")
    up.add_argument("--hosts", type=int, help="how many (default 3, or one per release given)")
    up.add_argument(
        "--etcd-members",
        type=int,
        default=1,
        help="how many of them (the first) form the etcd cluster (default 1)",
    )
    up.add_argument(
        "--release",
        metavar="R[,R...]",
        help=f"the Debian release of every host ({', '.join(rootfs.RELEASES)}; default "
        f"{rootfs.DEFAULT_RELEASE}), or a comma-separated list, host by host",
    )
    up.set_defaults(handler=_up)
    add = host_commands.add_parser("add", help="boot more hosts into the running lab")
    add.add_argument("--count", type=int, default=1, help="how many (default 1)")
    _release_option(add, "their Debian release")
    add.set_defaults(handler=_add)
    host_commands.add_parser("down", help="remove the lab").set_defaults(handler=_down)
    host_commands.add_parser("status", help="show the lab").set_defaults(handler=_status)
    for action, what in (
        ("restart", "reboot one host"),
        ("stop", "power one host off"),
        ("start", "power a stopped host on"),
        ("remove", "throw one host away and take it out of the inventory"),
    ):
        command = host_commands.add_parser(action, help=what)
        command.add_argument("name")
        command.set_defaults(handler=_host_action, action=action)
    image = commands.add_parser("image", help="build a release's host image; print its tag")
    _release_option(image, "the Debian release")
    image.set_defaults(handler=_image)
    commands.add_parser("podman-env", help="exports for the lab's podman").set_defaults(
        handler=_podman_env
    )
    netns_cli.add_commands(commands)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="lab: %(message)s", stream=sys.stderr)
    try:
        code: int = args.handler(args)
    except LabError as err:
        print(f"lab: {err}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
