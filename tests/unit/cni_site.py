"""A node's flannel network in a scratch dir for unit tests of GC, STATUS and ``pyflannel ipam``:
Debian's bridge and host-local on its CNI path (GC runs DEL without a network namespace, which
releases the IPAM side only, so no root is needed), and state written the way ADD leaves it.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

from pyflannel_runtime.cni.delegate import build_delegate, encode_delegate
from pyflannel_runtime.cni.hostlocal_store import parse_address
from pyflannel_runtime.cni.plugin import run
from pyflannel_runtime.cni.plugin_config import parse_netconf
from pyflannel_runtime.cni.state import save_config
from pyflannel_runtime.wire.subnet_env import parse_cni_subnet_env

PLUGINS = Path("/usr/lib/cni")
SUBNET_ENV = (
    "FLANNEL_NETWORK=10.5.0.0/16\nFLANNEL_SUBNET=10.5.3.1/24\n"
    "FLANNEL_IPV6_NETWORK=fd05::/48\nFLANNEL_IPV6_SUBNET=fd05:0:3::1/64\n"
    "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
)
# A delegate that answers VERSION with $FAKE_VERSIONS, records each other command's stdin in
# $FAKE_LOG, and fails with code 50 when $FAKE_FAIL is set.
FAKE_DELEGATE = """#!/bin/sh
if [ "$CNI_COMMAND" = VERSION ]; then
  printf '{"cniVersion":"1.1.0","supportedVersions":[%s]}' "$FAKE_VERSIONS"; exit 0
fi
cat > "$FAKE_LOG/$CNI_COMMAND.stdin"
if [ -n "$FAKE_FAIL" ]; then echo '{"code": 50, "msg": "bridge is down"}'; exit 1; fi
"""


def install_fake_delegate(bin_dir: Path, name: str) -> None:
    (bin_dir / name).write_text(FAKE_DELEGATE)
    (bin_dir / name).chmod(0o755)


class CniSite:
    """One node's flannel network ``gcnet`` in a scratch dir, with the real plugins on its CNI
    path (fake delegates go there too) and a log dir for them."""

    def __init__(self, root: Path, subnet_env: str = SUBNET_ENV) -> None:
        self.root = root
        self.bin = root / "bin"
        self.log = root / "log"
        for directory in (self.bin, self.log):
            directory.mkdir()
        for name in ("bridge", "host-local"):
            (self.bin / name).symlink_to(PLUGINS / name)
        self.state = root / "state"
        self.store = root / "ipam" / "gcnet"
        self.subnet_env = root / "subnet.env"
        self.subnet_env.write_text(subnet_env)

    def conf(self, **extra: object) -> dict[str, object]:
        conf: dict[str, object] = {
            "name": "gcnet",
            "type": "flannel",
            "cniVersion": "1.1.0",
            "subnetFile": str(self.subnet_env),
            "dataDir": str(self.state),
            "ipam": {"dataDir": str(self.root / "ipam")},
        }
        conf.update(extra)
        return conf

    def write_conflist(self) -> Path:
        """The network as a conflist, kube-flannel style (flannel, then portmap)."""
        plugin = {k: v for k, v in self.conf().items() if k not in ("name", "cniVersion")}
        conflist = {
            "name": "gcnet",
            "cniVersion": "0.3.1",
            "plugins": [plugin, {"type": "portmap", "capabilities": {"portMappings": True}}],
        }
        path = self.root / "net.d" / "10-flannel.conflist"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(conflist))
        return path

    def delegate(self, **delegate: object) -> bytes:
        """The delegate config flannel's ADD saves for this network."""
        conf = self.conf(cniVersion="0.3.1", delegate=delegate or None)
        env = parse_cni_subnet_env(self.subnet_env.read_text(), str(self.subnet_env))
        return encode_delegate(build_delegate(parse_netconf(json.dumps(conf).encode()), env))

    def attach(self, container_id: str, saved: bool = True, ifname: str = "eth0") -> None:
        """What a flannel ADD leaves on disk: host-local's files and the saved config."""
        config = self.delegate()
        env = {
            "CNI_COMMAND": "ADD",
            "CNI_CONTAINERID": container_id,
            "CNI_IFNAME": ifname,
            "CNI_NETNS": "/nonexistent",
            "CNI_PATH": str(self.bin),
        }
        done = subprocess.run(
            [str(self.bin / "host-local")], input=config, env=env, capture_output=True, check=False
        )
        assert done.returncode == 0, done.stdout
        if saved:
            save_config(str(self.state), container_id, config)

    def allocated(self) -> dict[str, tuple[str, str]]:
        """address -> (container ID, ifname)"""
        if not self.store.exists():
            return {}
        found = {}
        for path in self.store.iterdir():
            if parse_address(path.name) is not None:
                cid, _, ifname = path.read_bytes().decode().partition("\r\n")
                found[path.name] = (cid, ifname)
        return found

    def holders(self) -> set[str]:
        return {cid for cid, _ in self.allocated().values()}

    def saved(self) -> list[str]:
        return sorted(os.listdir(self.state)) if self.state.exists() else []

    def call(
        self, command: str, env: dict[str, str] | None = None, **extra: object
    ) -> tuple[int, bytes, bytes]:
        """The plugin run in-process for ``command``: (status, stdout, stderr)."""
        environ = {
            "CNI_COMMAND": command,
            "CNI_PATH": str(self.bin),
            "PATH": "/usr/bin:/bin",
            "FAKE_LOG": str(self.log),
        }
        stdout, stderr = io.BytesIO(), io.BytesIO()
        stdin = io.BytesIO(json.dumps(self.conf(**extra)).encode())
        status = run(environ | (env or {}), stdin, stdout, stderr)
        return status, stdout.getvalue(), stderr.getvalue()

    def gc(
        self, valid: list[str] | None, env: dict[str, str] | None = None, **extra: object
    ) -> tuple[int, bytes, bytes]:
        if valid is not None:
            extra["cni.dev/valid-attachments"] = [
                {"containerID": c, "ifname": "eth0"} for c in valid
            ]
        return self.call("GC", env, **extra)
