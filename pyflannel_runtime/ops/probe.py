"""A throwaway pod on this host, wired through the real CNI plugin, to test pod reachability.

The pod is a network namespace named after the probe; ADD and DEL go through the first plugin
of the node's conflist (the flannel plugin, which delegates to bridge and host-local) exactly as
a container runtime calls it, so a working probe means pods really get addresses and routes.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.cni.invoke import InvokeError, exec_plugin, find_in_path
from pyflannel_runtime.cni.skel import CniError

NETNS_DIR = Path("/run/netns")
_IFNAME = "eth0"


class ProbeError(PyflannelError):
    """The probe pod could not be wired or removed; ``str()`` says why."""


@dataclass(frozen=True)
class ProbePod:
    name: str
    ip: str
    created: bool  # False: it was already there (left by an earlier run)


def _plugin_config(conflist_path: str) -> bytes:
    """The conflist's first plugin as a single network config (libcni's buildOneConfig)."""
    try:
        conflist = json.loads(Path(conflist_path).read_bytes())
        first = dict(conflist["plugins"][0])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
        raise ProbeError(f"{conflist_path}: not a usable conflist: {err}") from None
    first.update(name=conflist.get("name", ""), cniVersion=conflist.get("cniVersion", ""))
    return json.dumps(first).encode()


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _cni(command: str, name: str, conflist_path: str, bin_dir: str) -> bytes:
    config = _plugin_config(conflist_path)
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_CONTAINERID": name,
        "CNI_NETNS": str(NETNS_DIR / name),
        "CNI_IFNAME": _IFNAME,
        "CNI_PATH": bin_dir,
    }
    try:
        plugin = find_in_path(json.loads(config)["type"], bin_dir)
        stdout, _ = exec_plugin(command, plugin, config, env)
    except (CniError, InvokeError, OSError) as err:
        raise ProbeError(f"CNI {command} for {name} failed: {err}") from None
    return stdout


def _pod_ip(name: str) -> str | None:
    done = _run("ip", "-netns", name, "-json", "-4", "address", "show", "dev", _IFNAME)
    if done.returncode != 0:
        return None
    for link in json.loads(done.stdout or "[]"):
        for addr in link.get("addr_info", ()):
            return str(addr["local"])
    return None


def interface_mtu(name: str) -> int | None:
    """The MTU of the probe pod's interface (None when it cannot be read)."""
    done = _run("ip", "-netns", name, "-json", "link", "show", "dev", _IFNAME)
    if done.returncode != 0:
        return None
    links = json.loads(done.stdout or "[]")
    return int(links[0]["mtu"]) if links and "mtu" in links[0] else None


def add_pod(name: str, conflist_path: str, bin_dir: str) -> ProbePod:
    """The probe pod's address, wiring it first when it is not there yet."""
    if (NETNS_DIR / name).exists():
        ip = _pod_ip(name)
        if ip is not None:
            return ProbePod(name, ip, created=False)
        remove_pod(name, conflist_path, bin_dir)
    done = _run("ip", "netns", "add", name)
    if done.returncode != 0:
        raise ProbeError(f"ip netns add {name}: {done.stderr.strip()}")
    try:
        result = json.loads(_cni("ADD", name, conflist_path, bin_dir))
        ip = str(result["ips"][0]["address"]).split("/")[0]
    except BaseException:
        _run("ip", "netns", "delete", name)
        raise
    return ProbePod(name, ip, created=True)


def remove_pod(name: str, conflist_path: str, bin_dir: str) -> bool:
    """CNI DEL and the namespace gone; False when there was nothing to remove. A pod whose
    namespace is gone already (the node rebooted under it) still gets its DEL, which releases
    its address, when the flannel plugin kept its state."""
    if not (NETNS_DIR / name).exists():
        if not _plugin_state(name, conflist_path):
            return False
        _cni("DEL", name, conflist_path, bin_dir)
        return True
    try:
        _cni("DEL", name, conflist_path, bin_dir)
    finally:
        done = _run("ip", "netns", "delete", name)
    if done.returncode != 0:
        raise ProbeError(f"ip netns delete {name}: {done.stderr.strip()}")
    return True


def _plugin_state(name: str, conflist_path: str) -> bool:
    """Whether the flannel plugin holds a saved config for the pod (its ADD went through)."""
    from pyflannel_runtime.ipam.node import IpamError, load_target

    try:
        target = load_target(conflist_path)
    except IpamError:
        return False
    return os.path.exists(os.path.join(target.state_dir, name))


def ping_from(name: str, targets: Sequence[str]) -> dict[str, bool]:
    """Whether each target answers an ICMP echo from inside the probe pod (three tries)."""
    running = {
        target: subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                name,
                "ping",
                "-n",
                "-q",
                "-c",
                "3",
                "-i",
                "0.2",
                "-W",
                "2",
                target,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for target in targets
    }
    return {target: process.wait() == 0 for target, process in running.items()}
