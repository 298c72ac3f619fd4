"""The controller's SSH to lab hosts: the options Ansible gets through the inventory, and the
lab's own commands (readiness, checks), which share Ansible's connection masters.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

from pyflannel_lab.errors import LabError
from pyflannel_lab.paths import STATE_ENV

SSH_FAILED = 255
# sun_path holds 107 bytes and a NUL; ssh binds a master at the path plus ".<16 random chars>"
# before renaming it. One socket per host address: a lab's directory serves one user.
_SOCKET_PATH_MAX = 107 - 17
_CONTROL_NAME = "%h"
_LONGEST_NAME = "255.255.255.255"


def check_control_dir(control_dir: Path) -> None:
    if len(f"{control_dir}/{_LONGEST_NAME}".encode()) > _SOCKET_PATH_MAX:
        raise LabError(
            f"{control_dir} is too long a path for SSH control sockets "
            f"(at most {_SOCKET_PATH_MAX - len(_LONGEST_NAME) - 1} bytes); "
            f"point {STATE_ENV} somewhere shorter"
        )


def common_options(control_dir: Path) -> list[str]:
    """No host-key prompts (lab hosts are new on every boot); connection reuse for speed."""
    return [
        "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null",
        "-o", "LogLevel=ERROR",
        "-o", "ControlMaster=auto",
        "-o", "ControlPersist=60s",
        "-o", f"ControlPath={control_dir}/{_CONTROL_NAME}",
    ]  # fmt: skip


def generate_key(path: Path) -> str:
    """A new ed25519 key pair at ``path``; returns the public key line."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "pyflannel-lab", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return path.with_suffix(".pub").read_text()


@dataclass(frozen=True)
class SshTarget:
    address: IPv4Address
    user: str
    key: Path
    control_dir: Path

    def argv(self, *options: str) -> list[str]:
        return [
            "ssh",
            *common_options(self.control_dir),
            "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=5",
            "-i", str(self.key),
            "-l", self.user,
            *options,
            str(self.address),
        ]  # fmt: skip

    def run(
        self, command: str, stdin: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``command`` through the remote shell; the caller judges the exit status."""
        try:
            return subprocess.run(
                [*self.argv(), command],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise LabError(f"{self.address}: {command!r} took longer than {timeout} s") from None

    def close_master(self) -> None:
        """Ends the shared connection (a no-op if there is none), before its host goes away."""
        subprocess.run(
            [*self.argv("-O", "exit")], capture_output=True, stdin=subprocess.DEVNULL, timeout=30
        )
