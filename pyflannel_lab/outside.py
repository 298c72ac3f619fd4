"""The lab's stand-in for an address outside the cluster: a network namespace on the lab's
bridge with the slot's second address, and the connectivity suite's responder in it as a UDP
echo that answers with the source address it saw. Pods reach it only masqueraded: it has no
route to the pod network, so a reply to a pod's own address would go nowhere.

The inventory hands it to the verify role as ``flannel_verify_outside``; ``hosts down`` stops
the responder and removes the namespace and its link.
"""

from __future__ import annotations

import os
import signal
import subprocess
from ipaddress import IPv4Address, IPv4Network

from pydantic import BaseModel

from pyflannel_lab import underlay
from pyflannel_lab.errors import LabError
from pyflannel_runtime.connectivity import responder

PORT = 7472
ADDRESS_OFFSET = 2  # the bridge has the slot's first address, the hosts start at the 11th


class Outside(BaseModel):
    netns: str
    veth: str  # its root-namespace end, on the bridge
    address: IPv4Address
    port: int = PORT
    pid: int = 0

    @property
    def target(self) -> str:
        """``flannel_verify_outside``."""
        return f"{self.address}:{self.port}"


def plan(token: str, slot: IPv4Network) -> Outside:
    return Outside(
        netns=f"plab{token}out",
        veth=f"plab{token}o",
        address=slot.network_address + ADDRESS_OFFSET,
    )


def start(outside: Outside, bridge: str, slot: IPv4Network) -> Outside:
    """The namespace on the bridge and the responder in it (what is there already is reused)."""
    if not os.path.exists(f"/run/netns/{outside.netns}"):
        _run("ip", "netns", "add", outside.netns)
        underlay.delete_link(outside.veth)
        _run("ip", "link", "add", outside.veth, "type", "veth", "peer", "name", "eth0",
             "netns", outside.netns)  # fmt: skip
        _run("ip", "link", "set", outside.veth, "master", bridge, "up")
        _run("ip", "-n", outside.netns, "addr", "add", f"{outside.address}/{slot.prefixlen}",
             "dev", "eth0")  # fmt: skip
        _run("ip", "-n", outside.netns, "link", "set", "eth0", "up")
        _run("ip", "-n", outside.netns, "link", "set", "lo", "up")
    if outside.pid and responding(outside):
        return outside
    return outside.model_copy(update={"pid": _spawn(outside)})


def _spawn(outside: Outside) -> int:
    try:
        announced = responder.launch(
            ["--outside", outside.target, "--lifetime", "0"],
            prefix=["ip", "netns", "exec", outside.netns],
        )
    except OSError as err:
        raise LabError(f"{outside.netns}: {err}") from None
    return int(announced["pid"])


def responding(outside: Outside) -> bool:
    """Whether the recorded responder still runs."""
    try:
        with open(f"/proc/{outside.pid}/cmdline", "rb") as handle:
            return responder.MODULE.encode() in handle.read().split(b"\0")
    except OSError:
        return False


def stop(outside: Outside) -> None:
    if outside.pid and responding(outside):
        os.kill(outside.pid, signal.SIGTERM)
    if os.path.exists(f"/run/netns/{outside.netns}"):
        _run("ip", "netns", "delete", outside.netns)
    underlay.delete_link(outside.veth)


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {done.stderr.strip()}")
