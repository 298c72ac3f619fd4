"""Doing things inside a named network namespace from the outside.

setns(2) with CLONE_NEWNET only moves the calling thread, so a short-lived helper thread
enters the namespace, does its one job (open a socket, write a sysctl) and exits; sockets
stay bound to the namespace they were created in.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pyroute2 import IPRoute

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
NETNS_RUN_DIR = "/run/netns"

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def run_in_netns(netns: str | None, job: Callable[[], T]) -> T:
    """Run `job` in the named namespace (or right here when `netns` is None)."""
    if netns is None:
        return job()
    outcome: dict[str, Any] = {}

    def helper() -> None:
        try:
            _setns(os.path.join(NETNS_RUN_DIR, netns))
            outcome["value"] = job()
        except BaseException as err:
            outcome["error"] = err

    thread = threading.Thread(target=helper, name=f"netns-{netns}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]


def iproute(netns: str | None) -> IPRoute:
    """A pyroute2 handle for the namespace; never creates it (pyroute2's default would)."""
    # Here, not at the top: a module run that takes the namespace helpers alone (the lease and
    # repair paths) need not load pyroute2. The agent's programmer imports it at start anyway.
    # A short-lived process (a module run, the command line) that opens a handle needs no more
    # of pyroute2 than the agent does; a process that imported pyroute2 already keeps it whole.
    from pyflannel_runtime.netlink.lean_pyroute2 import defer_package_imports

    defer_package_imports()
    from pyroute2 import IPRoute

    if netns is None:
        return IPRoute()
    if not os.path.exists(os.path.join(NETNS_RUN_DIR, netns)):
        raise FileNotFoundError(f"network namespace {netns} does not exist")
    return IPRoute(netns=netns, flags=0)


def write_sysctl(netns: str | None, name: str, value: str) -> None:
    """Write /proc/sys/<name> as seen from the namespace."""

    def write() -> None:
        with open(f"/proc/sys/{name}", "w") as handle:
            handle.write(value)

    run_in_netns(netns, write)
