"""CNI GC of 200 stale attachments vs. the 200 DELs a runtime would have sent instead.

Each round sets up 200 attachments of one flannel network the way ADD leaves them (a host-local
allocation through Debian's host-local, and flannel's saved delegate config), then releases
them twice over, alternately first: once by one GC call of the installed ``flannel`` plugin
with an empty ``cni.dev/valid-attachments`` list (each saved config replayed as a DEL through
Debian's bridge, which calls host-local), once by 200 ``flannel`` DEL calls. Both go through
the same real plugins, with no network namespace (GC may assume it gone; DEL without one only
releases the IPAM side, as after a crash). A third variant measures GC of 200 allocations that
lost their saved config (host-local's DEL straight away). No root needed.

    .venv/bin/python bench/bench_cni_gc.py [--attachments 200] [--rounds 5]

The last line is ``metric: <ratio>`` (GC time / time of the 200 DELs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from sigterm import interrupt_on_sigterm

from pyflannel_runtime.cni.delegate import build_delegate, encode_delegate
from pyflannel_runtime.cni.install import install_plugin
from pyflannel_runtime.cni.plugin_config import parse_netconf
from pyflannel_runtime.cni.state import save_config
from pyflannel_runtime.wire.subnet_env import parse_cni_subnet_env

PLUGINS = "/usr/lib/cni"
SUBNET_ENV = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.8.1/23\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"


class Site:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.bin = work / "bin"
        self.bin.mkdir()
        install_plugin(str(self.bin))
        for name in ("bridge", "host-local"):
            (self.bin / name).symlink_to(Path(PLUGINS) / name)
        (work / "subnet.env").write_text(SUBNET_ENV)
        self.conf = {
            "name": "gcbench",
            "type": "flannel",
            "cniVersion": "0.3.1",
            "subnetFile": str(work / "subnet.env"),
            "dataDir": str(work / "state"),
            "ipam": {"dataDir": str(work / "ipam")},
        }
        self.env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CNI_PATH": str(self.bin)}
        netconf = parse_netconf(json.dumps(self.conf).encode())
        self.delegate = encode_delegate(
            build_delegate(netconf, parse_cni_subnet_env(SUBNET_ENV, "subnet.env"))
        )

    def _run(self, command: str, config: bytes, **env: str) -> None:
        plugin = str(self.bin / ("host-local" if command == "ADD" else "flannel"))
        done = subprocess.run(
            [plugin], input=config, env=dict(self.env, CNI_COMMAND=command, **env),
            capture_output=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{command} failed: {done.stdout!r} {done.stderr!r}")

    def attach(self, ids: list[str], saved: bool) -> None:
        """What ADD leaves behind, without the interface: host-local's file, flannel's config."""
        for container_id in ids:
            self._run(
                "ADD", self.delegate, CNI_CONTAINERID=container_id, CNI_IFNAME="eth0",
                CNI_NETNS="/nonexistent",
            )  # fmt: skip
            if saved:
                save_config(str(self.work / "state"), container_id, self.delegate)

    def allocated(self) -> int:
        return sum(1 for p in (self.work / "ipam" / "gcbench").iterdir() if p.name[0].isdigit())

    def gc(self) -> float:
        conf = dict(self.conf, cniVersion="1.1.0", **{"cni.dev/valid-attachments": []})
        start = time.perf_counter()
        self._run("GC", json.dumps(conf).encode())
        return time.perf_counter() - start

    def dels(self, ids: list[str]) -> float:
        conf = json.dumps(self.conf).encode()
        start = time.perf_counter()
        for container_id in ids:
            self._run("DEL", conf, CNI_CONTAINERID=container_id, CNI_IFNAME="eth0")
        return time.perf_counter() - start


def main() -> None:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attachments", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gcbench-"))
    try:
        site = Site(work)
        ids = [f"bench{i:04d}" for i in range(args.attachments)]
        timings: dict[str, list[float]] = {"gc": [], "dels": [], "gc_orphans": []}
        for round_no in range(args.rounds):
            order = ("gc", "dels") if round_no % 2 == 0 else ("dels", "gc")
            for variant in (*order, "gc_orphans"):
                site.attach(ids, saved=variant != "gc_orphans")
                assert site.allocated() == len(ids)
                elapsed = site.dels(ids) if variant == "dels" else site.gc()
                if site.allocated() or os.listdir(work / "state"):
                    raise RuntimeError(f"{variant} left attachments behind")
                timings[variant].append(elapsed)
        gc_s, dels_s = statistics.median(timings["gc"]), statistics.median(timings["dels"])
        orphans_s = statistics.median(timings["gc_orphans"])
        n = args.attachments
        print(f"GC of {n} stale attachments (saved config replayed): {gc_s * 1000:.0f} ms")
        print(
            f"GC of {n} allocations without saved config (host-local DEL): {orphans_s * 1000:.0f} ms"
        )
        print(f"{n} flannel DELs, one per container: {dels_s * 1000:.0f} ms")
        print(f"(medians of {args.rounds} rounds)")
        print(f"metric: {gc_s / dels_s:.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
