"""podman with its CNI backend as a real CNI consumer of the flannel plugin, confined.

Everything podman touches is confined: it runs inside a private mount and network namespace
held by a ``sleep`` process, with overlays on /run and /var/lib whose upper dirs are in the
lab's scratch dir, and its storage, config and temp dirs in that scratch dir too. The bridge,
portmap's nat chains and the ip_forward sysctl therefore live in that network namespace and
vanish with it; ``podman_lab`` checks that the root namespace is unchanged afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyflannel_runtime.cni.install import install_plugin

IMAGE = "localhost/pcni-bbx:1"
LAB_HOST_LINK = re.compile(r"plab[0-9a-f]{6}")


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


def root_namespace_state() -> dict[str, str]:
    """What this lab must leave as it found it. The links of lab hosts (their names carry
    ``plab`` and their token) are left out: another test's lab may come or go meanwhile."""
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True)
    names = (line.split(":")[1].strip() for line in links.stdout.splitlines())
    return {
        "tables": tables.stdout,
        "links": "\n".join(name for name in names if not LAB_HOST_LINK.match(name)),
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text(),
    }


class PodmanLab:
    def __init__(self, root: Path, tag: str, third_octet: int, prefixlen: int = 24) -> None:
        self.root = root
        self.network = f"pcni-{tag}"
        self.bridge = f"pcni{tag}"
        self.gateway = f"10.244.{third_octet}.1"
        self.prefixlen = prefixlen
        self.subnet = f"10.244.{third_octet}.0/{prefixlen}"
        self.data_dir = root / "flannel-data"
        self.ipam_dir = root / "ipam"
        self.holder: subprocess.Popen[bytes] | None = None

    # --- set-up -------------------------------------------------------------------------------

    @property
    def conflist(self) -> Path:
        return self.root / "cni/net.d" / f"{self.network}.conflist"

    @property
    def cni_bin(self) -> Path:
        return self.root / "cni/bin"

    def build(self) -> None:
        root = self.root
        for sub in ("cni/bin", "cni/net.d", "tmp", "libpod", "graph", "runroot"):
            (root / sub).mkdir(parents=True)
        for link in os.listdir("/usr/lib/cni"):
            (root / "cni/bin" / link).symlink_to(Path("/usr/lib/cni") / link)
        install_plugin(str(root / "cni/bin"))
        (root / "containers.conf").write_text(
            "[containers]\n"
            'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
            "[network]\n"
            'network_backend = "cni"\n'
            f'cni_plugin_dirs = ["{root}/cni/bin"]\n'
            f'network_config_dir = "{root}/cni/net.d"\n'
            "[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'events_logfile_path = "{root}/events.log"\n'
            f'tmp_dir = "{root}/libpod"\n'
        )
        (root / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{root}/graph"\nrunroot = "{root}/runroot"\n'
        )
        (root / "subnet.env").write_text(
            f"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET={self.gateway}/{self.prefixlen}\n"
            "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
        )
        conflist = {
            "name": self.network,
            "cniVersion": "0.3.1",
            "plugins": [
                {
                    "type": "flannel",
                    "subnetFile": str(root / "subnet.env"),
                    "dataDir": str(self.data_dir),
                    "ipam": {"dataDir": str(self.ipam_dir)},
                    "delegate": {
                        "bridge": self.bridge,
                        "hairpinMode": True,
                        "isDefaultGateway": True,
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        self.conflist.write_text(json.dumps(conflist))
        self._build_image()

    def _build_image(self) -> None:
        rootfs = self.root / "rootfs"
        for sub in ("bin", "etc", "www"):
            (rootfs / sub).mkdir(parents=True)
        shutil.copy("/bin/busybox", rootfs / "bin/busybox")
        subprocess.run(
            ["chroot", str(rootfs), "/bin/busybox", "--install", "-s", "/bin"], check=True
        )
        (rootfs / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (rootfs / "etc/group").write_text("root:x:0:\n")
        (rootfs / "www/index.html").write_text(f"hello from {self.network}\n")
        subprocess.run(
            ["tar", "-C", str(rootfs), "-cf", str(self.root / "rootfs.tar"), "."], check=True
        )

    def start_namespaces(self) -> None:
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--net", "--propagation", "private", "sleep", "infinity"]
        )
        own_mnt = os.stat("/proc/self/ns/mnt").st_ino
        deadline = time.monotonic() + 10
        while os.stat(f"/proc/{self.holder.pid}/ns/mnt").st_ino == own_mnt:
            assert time.monotonic() < deadline, "unshare did not start"
            time.sleep(0.02)
        mounts = []
        for target, name in (("/run", "run"), ("/var/lib", "varlib")):
            upper, work = self.root / f"ovl/{name}-up", self.root / f"ovl/{name}-work"
            upper.mkdir(parents=True)
            work.mkdir(parents=True)
            mounts.append(
                f"mount -t overlay overlay -o lowerdir={target},upperdir={upper},workdir={work} {target}"
            )
        self.enter(["sh", "-ec", " && ".join([*mounts, "ip link set lo up"])])

    # --- running things inside --------------------------------------------------------------

    def enter(
        self, argv: list[str], check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        assert self.holder is not None
        return subprocess.run(
            ["nsenter", "-t", str(self.holder.pid), "-m", "-n", *argv],
            input=input,
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )

    def with_podman_env(self, *argv: str) -> list[str]:
        """``argv`` run with the lab's podman configuration in its environment (podman itself,
        or a tool that asks podman)."""
        env = {
            "CONTAINERS_CONF": str(self.root / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(self.root / "storage.conf"),
            "TMPDIR": str(self.root / "tmp"),
        }
        return ["env", *(f"{k}={v}" for k, v in env.items()), *argv]

    def podman(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = self.enter(self.with_podman_env("podman", *args), check=False)
        if check and result.returncode != 0:
            raise AssertionError(
                f"podman {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
            )
        return result

    def container_ip(self, name: str) -> str:
        template = f'{{{{(index .NetworkSettings.Networks "{self.network}").IPAddress}}}}'
        return self.podman("inspect", name, "--format", template).stdout.strip()

    def leased_ips(self) -> list[str]:
        leases = self.ipam_dir / self.network
        if not leases.exists():
            return []
        return sorted(p.name for p in leases.iterdir() if p.name.startswith("10."))

    def saved_configs(self) -> list[str]:
        return sorted(os.listdir(self.data_dir)) if self.data_dir.exists() else []

    # --- tear-down ----------------------------------------------------------------------------

    def close(self) -> None:
        if self.holder is None:
            return
        try:
            self.podman("rm", "--all", "--force", "--time", "0", check=False)
            self.podman("rmi", "--all", "--force", check=False)
        finally:
            self.holder.send_signal(signal.SIGKILL)
            self.holder.wait(timeout=10)
            self.holder = None


@contextlib.contextmanager
def podman_lab_in_scratch(prefixlen: int = 24) -> Iterator[PodmanLab]:
    """A lab with the busybox image imported; skips when a tool is missing, and checks on the
    way out that the root network namespace looks as before."""
    for tool in ("podman", "runc", "conmon", "unshare", "nsenter", "nft"):
        _need(tool)
    if not os.path.exists("/bin/busybox"):
        pytest.skip("busybox-static is not installed")
    before = root_namespace_state()
    tag = secrets.token_hex(3)
    root = Path(tempfile.mkdtemp(prefix=f"pcni-{tag}-"))
    lab = PodmanLab(root, tag, third_octet=secrets.randbelow(200) + 20, prefixlen=prefixlen)
    try:
        lab.build()
        lab.start_namespaces()
        lab.podman("import", str(root / "rootfs.tar"), IMAGE)
        yield lab
    finally:
        try:
            lab.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    after = root_namespace_state()
    assert after == before, {k: (before[k], after[k]) for k in before if before[k] != after[k]}
