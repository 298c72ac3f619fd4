"""The connectivity suite on one node: what the verify role's tasks and ``pyflannel
connectivity`` call, in three steps.

``setup`` wires two probe pods through the node's CNI conflist (as ``ops.probe`` does for one),
starts the responder (``connectivity.responder``) in them and on the host, and reads what a
failure's cause would need: the pod MTU, the firewall, the vxlan device's tx checksum offload.
``run`` runs every scenario from this node to the others (their setups say where their pods
and ports are), counts the checksum errors its pods and host saw meanwhile, and in
``auto`` offload mode turns the offload off when the UDP checksum scenario failed with
checksum errors, then runs that scenario again. ``teardown`` stops the responder, removes the
probe pods (CNI DEL, namespace) and reports whatever is left behind: a namespace, the process,
a host-local allocation or a flannel state file of a probe pod.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from ipaddress import IPv4Network
from typing import Any

from pyflannel_runtime.backend.vxlan import offload_verdict
from pyflannel_runtime.backend_spec import tx_offload
from pyflannel_runtime.connectivity import responder, snmp
from pyflannel_runtime.connectivity.firewall_facts import read_firewall
from pyflannel_runtime.connectivity.run import Endpoint, Outside, SuiteRun
from pyflannel_runtime.connectivity.scenarios import GROUPS, Row, Verdict
from pyflannel_runtime.ops.probe import (
    NETNS_DIR,
    ProbeError,
    add_pod,
    interface_mtu,
    remove_pod,
)

# Long enough for any play between the setup and the clean-up; the clean-up ends it sooner.
RESPONDER_LIFETIME = 300.0
_STOP_TIMEOUT = 3.0


def pod_names(name: str) -> tuple[str, str]:
    """The probe pods: the one the other nodes reach, and its neighbour on the same node."""
    return name, f"{name}-2"


def _pid_file(name: str) -> str:
    return f"/run/{name}.responder.pid"


# --- setup ----------------------------------------------------------------------------------


def setup(
    name: str,
    conflist: str,
    bin_dir: str,
    host_address: str,
    *,
    nftables_mode: bool = False,
    vxlan_device: str = "",
    offload_mode: str = tx_offload.DEFAULT_MODE,
    lifetime: float = RESPONDER_LIFETIME,
) -> dict[str, Any]:
    """Probe pods and the responder (with a UDP echo on `host_address` for the other nodes'
    pods, unless it is empty; ending by itself after `lifetime` seconds); raises ProbeError.
    What an interrupted run left is removed first."""
    teardown(name, conflist, bin_dir)
    names = pod_names(name)
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        pods = list(pool.map(lambda n: add_pod(n, conflist, bin_dir), names))
    try:
        ready = start_responder(list(names), host_address, name, lifetime)
    except BaseException:
        teardown(name, conflist, bin_dir)
        raise
    return {
        "pods": [{"name": pod.name, "ip": pod.ip, **ready["pods"][pod.name]} for pod in pods],
        "pod_mtu": interface_mtu(names[0]),
        "host": {"address": host_address, "udp_port": ready.get("host_udp_port", 0)},
        "responder_pid": ready["pid"],
        "firewall": read_firewall(nftables_mode).as_dict(),
        "offload": offload_state(vxlan_device, offload_mode),
    }


def start_responder(
    pods: Sequence[str], host_address: str, name: str, lifetime: float = RESPONDER_LIFETIME
) -> dict[str, Any]:
    """The responder as a process of its own (it outlives this one), once it listens."""
    args = ["--lifetime", str(lifetime), *(f"--pod={pod}" for pod in pods)]
    if host_address:
        args.append(f"--host-address={host_address}")
    try:
        announced = responder.launch(args)
    except OSError as err:
        raise ProbeError(str(err)) from None
    with open(_pid_file(name), "w") as handle:
        handle.write(f"{announced['pid']}\n")
    return announced


def offload_state(device: str, mode: str) -> dict[str, Any]:
    """The vxlan device's tx checksum offload ({} without a device)."""
    if not device:
        return {}
    from pyflannel_runtime.netlink.ethtool import tx_checksum_offload

    try:
        enabled: bool | None = tx_checksum_offload(device)
    except OSError:
        enabled = None
    return {"device": device, "enabled": enabled, "mode": mode}


# --- run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    rows: list[Row]
    times: dict[str, float]
    csum_errors: dict[str, int]  # "pod" / "host": checksum errors counted meanwhile
    offload_change: str  # what auto did ("" nothing)
    offload: dict[str, Any]  # the vxlan device's tx checksum offload at the end

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": [row.as_dict() for row in self.rows],
            "times": self.times,
            "csum_errors": self.csum_errors,
            "offload_change": self.offload_change,
            "offload": self.offload,
            "failures": sum(row.failed for row in self.rows),
            "failed_paths": [f"{r.scenario} to {r.target}" for r in self.rows if r.failed],
        }


def run(
    node: str,
    setups: Mapping[str, Mapping[str, Any]],
    pod_network: IPv4Network,
    outside: str = "",
    *,
    vxlan_device: str = "",
    offload_mode: str = tx_offload.DEFAULT_MODE,
    verdict_file: str = tx_offload.AUTO_VERDICT_FILE,
    groups: Sequence[str] = GROUPS,
) -> RunResult:
    """The scenarios of `groups` from `node` to the other nodes in `setups` (each node's setup
    result, this one's included). ValueError for an unusable `outside`."""
    offload = offload_state(vxlan_device, offload_mode)
    me = Endpoint.of(node, setups[node])
    peers = [Endpoint.of(n, s) for n, s in setups.items() if n != node]
    suite = SuiteRun(me, peers, Outside.parse(outside), local_addresses(), pod_network)
    places = [pod.name for pod in me.pods]
    before = _csum_counters(places)
    rows, times = suite.run(groups)
    change = ""
    if _auto_turns_off(rows, offload):
        change = _turn_offload_off(rows, vxlan_device, verdict_file)
        rerun, rerun_times = suite.run(("checksums",))
        rows = [r for r in rows if r.scenario != "udp-checksum"] + rerun
        times["checksums"] += rerun_times["checksums"]
        offload = offload_state(vxlan_device, offload_mode)
    after = _csum_counters(places)
    errors = {
        where: after[where] - before[where]
        for where in ("pod", "host")
        if after[where] > before[where]
    }
    return RunResult(rows, times, errors, change, offload)


def _csum_counters(pods: Sequence[str]) -> dict[str, int]:
    return {
        "pod": sum(snmp.read_counters(pod).get(snmp.UDP_CSUM_ERRORS, 0) for pod in pods),
        "host": snmp.read_counters(None).get(snmp.UDP_CSUM_ERRORS, 0),
    }


def _auto_turns_off(rows: Sequence[Row], offload: Mapping[str, Any]) -> bool:
    """auto mode, the device's offload on, and this node's datagrams arrived with bad
    checksums somewhere."""
    if offload.get("mode") != "auto" or offload.get("enabled") is not True:
        return False
    return any(_csum_failure(row) for row in rows)


def _csum_failure(row: Row) -> bool:
    return (
        row.scenario == "udp-checksum"
        and row.verdict is Verdict.FAIL
        and bool(row.data.get("pod_csum_errors") or row.data.get("host_csum_errors"))
    )


def _turn_offload_off(rows: Sequence[Row], device: str, verdict_file: str) -> str:
    from pyflannel_runtime.netlink.ethtool import set_tx_checksum_offload

    failed = [row for row in rows if _csum_failure(row)]
    reason = "UDP checksums failed through it to " + ", ".join(
        f"{row.target} ({row.detail})" for row in failed
    )
    offload_verdict.record_auto_off(reason, verdict_file)
    set_tx_checksum_offload(device, False)
    return f"turned tx checksum offload off on {device} (auto): {reason}"


def local_addresses() -> list[str]:
    """This host's IPv4 addresses."""
    from pyflannel_runtime.netlink.netns import iproute

    with iproute(None) as ipr:
        return [str(msg.get_attr("IFA_ADDRESS")) for msg in ipr.get_addr(family=2)]


# --- teardown -------------------------------------------------------------------------------


def teardown(name: str, conflist: str, bin_dir: str) -> dict[str, Any]:
    """Stop the responder, remove the probe pods; what was removed and what is left."""
    stopped = stop_responder(name)

    def remove(pod: str) -> str:
        """'' removed, 'absent' nothing there, else why it could not be removed."""
        try:
            return "" if remove_pod(pod, conflist, bin_dir) else "absent"
        except ProbeError as err:
            return str(err)

    names = pod_names(name)
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        outcomes = dict(zip(names, pool.map(remove, names), strict=True))
    removed = [pod for pod, outcome in outcomes.items() if not outcome]
    problems = [outcome for outcome in outcomes.values() if outcome not in ("", "absent")]
    left = left_behind(name, conflist)
    return {
        "responder_stopped": stopped,
        "removed": removed,
        "problems": problems,
        "left_behind": left,
    }


def stop_responder(name: str) -> bool:
    """SIGTERM to the responder the pid file names (if it is still that process)."""
    return stop_recorded(_pid_file(name), responder.MODULE)


def stop_recorded(path: str, module: str) -> bool:
    """SIGTERM to the process pid file `path` names, if it still runs `module` (SIGKILL when
    it lingers); the pid file goes either way. True when there was such a process."""
    try:
        with open(path) as handle:
            pid = int(handle.read().strip() or 0)
    except (OSError, ValueError):
        return False
    stopped = False
    if pid and runs(pid, module):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_TIMEOUT
        while runs(pid, module) and time.monotonic() < deadline:
            time.sleep(0.05)
        if runs(pid, module):
            os.kill(pid, signal.SIGKILL)
        stopped = True
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return stopped


def runs(pid: int, module: str) -> bool:
    """Whether process `pid` is alive and runs ``python -m <module>``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            words = handle.read().split(b"\0")
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return module.encode() in words and state != "Z"


def left_behind(name: str, conflist: str) -> list[str]:
    """Anything of the probe pods still on the node."""
    from pyflannel_runtime.cni.hostlocal_store import read_allocations
    from pyflannel_runtime.ipam.node import IpamError, load_target

    names = pod_names(name)
    left = [f"network namespace {pod}" for pod in names if (NETNS_DIR / pod).exists()]
    if os.path.exists(_pid_file(name)):
        left.append(f"responder pid file {_pid_file(name)}")
    try:
        target = load_target(conflist)
    except IpamError as err:
        return [*left, f"pod addresses not checked: {err}"]
    if target.hostlocal_dir is not None:
        allocations, _ = read_allocations(target.hostlocal_dir)
        left += [
            f"host-local allocation {a.address} of {a.container_id}"
            for a in allocations
            if a.container_id in names
        ]
    left += [
        f"flannel state file {os.path.join(target.state_dir, pod)}"
        for pod in names
        if os.path.exists(os.path.join(target.state_dir, pod))
    ]
    return left
