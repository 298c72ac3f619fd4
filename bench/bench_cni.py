"""ADD+DEL through our ``flannel`` plugin vs. calling ``bridge`` directly with the same delegate.

Both run in one process, against the same pair of network namespaces (a "host" namespace that
holds the bridge and a "pod" namespace that receives eth0), alternating in rounds so that
machine load affects both alike. The bridge config is exactly the delegate flannel saves.
Needs root. Prints the timings and ends with ``cni_add_del_ratio: <flannel / bridge>`` and
``cni_over_floor: <flannel / floor>`` (the median over rounds of each round's ratio), the floor
being what any CPython plugin pays: the same bridge ADD and DEL, each behind a bare
``python -I -S`` that execs the bridge plugin, in the same round (the bridge's ADD+DEL alone
and two bare starts alone are printed too, as a cross-check).

Each DEL comes 100 ms after its ADD, untimed, as a pod outlives its ADD by far more. Without
the pause the bridge's DEL costs more the longer after the ADD it runs (19 ms at once, 23 ms
8 ms later, a plateau of 26-28 ms from 30 ms on, here), so a plugin would be charged twice
for its own start-up, and the bridge called alone would get a DEL no real pod gets.

    sudo .venv/bin/python bench/bench_cni.py [--iterations N]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyflannel_runtime.cni.install import install_plugin

BRIDGE = "/usr/lib/cni/bridge"
# A pod's lifetime, at its shortest: past the time after which the bridge's DEL costs the same.
POD_LIFETIME_S = 0.1
# The cheapest CPython plugin there is: a bare interpreter that becomes the bridge plugin.
SHIM = [sys.executable, "-I", "-S", "-c", f"import posix; posix.execv({BRIDGE!r}, [{BRIDGE!r}])"]


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def _call(
    plugin: list[str], command: str, container_id: str, config: bytes, env: dict[str, str]
) -> None:
    proc_env = dict(env, CNI_COMMAND=command, CNI_CONTAINERID=container_id)
    result = subprocess.run(plugin, input=config, env=proc_env, capture_output=True)
    if result.returncode != 0:
        raise RuntimeError(f"{plugin} {command} failed: {result.stdout!r} {result.stderr!r}")


def _add_del(plugin: list[str], container_id: str, config: bytes, env: dict[str, str]) -> float:
    """The time ADD took plus the time DEL took, POD_LIFETIME_S apart."""
    start = time.perf_counter()
    _call(plugin, "ADD", container_id, config, env)
    added = time.perf_counter()
    time.sleep(POD_LIFETIME_S)
    start_del = time.perf_counter()
    _call(plugin, "DEL", container_id, config, env)
    return (added - start) + (time.perf_counter() - start_del)


def inner(work: Path, pod_netns: str, iterations: int) -> None:
    """Runs inside the host namespace (via ``ip netns exec``)."""
    flannel = str(work / "bin" / "flannel")
    flannel_conf = (work / "flannel.json").read_bytes()
    bridge_conf = (work / "bridge.json").read_bytes()
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "CNI_NETNS": pod_netns,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": f"{work / 'bin'}:/usr/lib/cni",
    }
    timings: dict[str, list[float]] = {"flannel": [], "bridge": [], "floor": [], "interpreter": []}
    for round_no in range(-2, iterations):  # two warm-up rounds
        for name, plugin, conf in (
            ("flannel", [flannel], flannel_conf),
            ("bridge", [BRIDGE], bridge_conf),
            ("floor", SHIM, bridge_conf),
        ):
            elapsed = _add_del(plugin, f"bench-{name}-{round_no + 2}", conf, env)
            if round_no >= 0:
                timings[name].append(elapsed)
        # Two bare interpreter starts (one per ADD, one per DEL) with the launcher's flags.
        start = time.perf_counter()
        for _ in range(2):
            _run([sys.executable, "-I", "-S", "-c", "pass"])
        if round_no >= 0:
            timings["interpreter"].append(time.perf_counter() - start)
    leftovers = sorted(p.name for p in (work / "data").iterdir())
    if leftovers:
        raise RuntimeError(f"flannel left state files behind: {leftovers}")
    flannel_ms = statistics.median(timings["flannel"]) * 1000
    bridge_ms = statistics.median(timings["bridge"]) * 1000
    floor_ms = statistics.median(timings["floor"]) * 1000
    starts_ms = statistics.median(timings["interpreter"]) * 1000
    print(f"iterations: {iterations}")
    print(f"flannel ADD+DEL median: {flannel_ms:.1f} ms")
    print(f"bridge  ADD+DEL median: {bridge_ms:.1f} ms")
    print(f"2 bare python -I -S starts median: {starts_ms:.1f} ms")
    print(f"bridge + 2 bare starts, apart: {bridge_ms + starts_ms:.1f} ms")
    print(f"floor (bridge ADD+DEL, each behind a bare python -I -S): {floor_ms:.1f} ms")
    print(f"floor_ratio: {floor_ms / bridge_ms:.3f}")
    # Each round's flannel over the same round's floor: the machine's load of the moment
    # weighs on both, where a ratio of medians taken apart would mix moments.
    paired = [f / floor for f, floor in zip(timings["flannel"], timings["floor"], strict=True)]
    print(
        f"flannel / floor, per round: median {statistics.median(paired):.3f}, "
        f"range {min(paired):.3f}-{max(paired):.3f}"
    )
    print(f"cni_add_del_ratio: {flannel_ms / bridge_ms:.3f}")
    print(f"cni_over_floor: {statistics.median(paired):.3f}")


def _write_configs(work: Path, tag: str) -> None:
    from pyflannel_runtime.cni.delegate import build_delegate, encode_delegate
    from pyflannel_runtime.cni.plugin_config import parse_netconf
    from pyflannel_runtime.wire.subnet_env import parse_cni_subnet_env

    subnet_env = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.9.1/24\n"
    subnet_env += "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
    (work / "subnet.env").write_text(subnet_env)
    flannel = {
        "cniVersion": "0.3.1",
        "name": f"pcnib-{tag}",
        "type": "flannel",
        "subnetFile": str(work / "subnet.env"),
        "dataDir": str(work / "data"),
        "ipam": {"dataDir": str(work / "ipam")},
        "delegate": {"bridge": f"pcnib{tag}", "hairpinMode": True, "isDefaultGateway": True},
    }
    flannel_bytes = json.dumps(flannel).encode()
    (work / "flannel.json").write_bytes(flannel_bytes)
    delegate = build_delegate(
        parse_netconf(flannel_bytes), parse_cni_subnet_env(subnet_env, "subnet.env")
    )
    (work / "bridge.json").write_bytes(encode_delegate(delegate))


def outer(iterations: int) -> None:
    if os.geteuid() != 0:
        sys.exit("bench_cni.py needs root (network namespaces)")
    tag = secrets.token_hex(3)
    host_ns, pod_ns = f"pcnib-{tag}-h", f"pcnib-{tag}-p"
    work = Path(tempfile.mkdtemp(prefix=f"pcnib-{tag}-"))
    try:
        install_plugin(str(work / "bin"))
        _write_configs(work, tag)
        _run(["ip", "netns", "add", host_ns])
        _run(["ip", "netns", "add", pod_ns])
        _run(["ip", "-n", pod_ns, "link", "set", "lo", "up"])
        subprocess.run(
            ["ip", "netns", "exec", host_ns, sys.executable, "-I", __file__, "--inner",
             str(work), f"/run/netns/{pod_ns}", str(iterations)],
            check=True,
        )  # fmt: skip
    finally:
        for namespace in (pod_ns, host_ns):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--inner", nargs=3, metavar=("WORK", "POD_NETNS", "N"))
    args = parser.parse_args()
    if args.inner:
        inner(Path(args.inner[0]), args.inner[1], int(args.inner[2]))
    else:
        # imported here: the inner run's -I leaves bench/ off the import path
        from sigterm import interrupt_on_sigterm

        interrupt_on_sigterm()
        outer(args.iterations)


if __name__ == "__main__":
    main()
