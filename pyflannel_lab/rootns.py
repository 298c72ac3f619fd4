"""What podman can change in the root namespace, recorded before a lab and restored after it.

The lab itself runs its containers with ``--network none`` and ``--cgroupns=private``, so none
of this should change; restoring is the safety net for what podman does otherwise:
netavark's ``NETAVARK_*`` nft tables, the root ``net.ipv4.ip_forward=1`` it sets, and systemd
in a privileged container remounting the host's cgroup2 with ``nsdelegate`` (an option a
plain ``mount -o remount`` keeps, so the remount goes through mount(2) directly).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
from pathlib import Path

from pydantic import BaseModel

IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
MOUNTINFO = Path("/proc/self/mountinfo")
MS_REMOUNT = 32
MS_RELATIME = 1 << 21


class RootSnapshot(BaseModel):
    ip_forward: str
    nft_tables: list[str]
    nsdelegate_mounts: list[str]  # cgroup2 mount points that had nsdelegate


def snapshot() -> RootSnapshot:
    return RootSnapshot(
        ip_forward=IP_FORWARD.read_text().strip(),
        nft_tables=nft_tables(),
        nsdelegate_mounts=nsdelegate_mounts(MOUNTINFO.read_text()),
    )


def restore(before: RootSnapshot) -> list[str]:
    """Undo what differs from ``before``; returns what was undone, for the log."""
    undone = []
    for table in sorted(set(nft_tables()) - set(before.nft_tables)):
        if "NETAVARK" in _nft("list", "table", *table.split()):
            _nft("delete", "table", *table.split())
            undone.append(f"deleted nft table {table}")
    if IP_FORWARD.read_text().strip() != before.ip_forward:
        IP_FORWARD.write_text(before.ip_forward + "\n")
        undone.append(f"net.ipv4.ip_forward back to {before.ip_forward}")
    for mount_point in nsdelegate_mounts(MOUNTINFO.read_text()):
        if mount_point not in before.nsdelegate_mounts:
            _remount_plain(mount_point)
            undone.append(f"{mount_point} remounted without nsdelegate")
    return undone


def nft_tables() -> list[str]:
    """``family name`` of every nft table."""
    return [line.removeprefix("table ") for line in _nft("list", "tables").splitlines() if line]


def nsdelegate_mounts(mountinfo: str) -> list[str]:
    mounts = []
    for line in mountinfo.splitlines():
        fields = line.split()
        separator = fields.index("-")
        fstype, super_options = fields[separator + 1], fields[separator + 3]
        if fstype == "cgroup2" and "nsdelegate" in super_options.split(","):
            mounts.append(fields[4])
    return mounts


def _remount_plain(mount_point: str) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.mount(None, mount_point.encode(), None, MS_REMOUNT | MS_RELATIME, b"") != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"remount {mount_point}: {os.strerror(errno)}")


def _nft(*args: str) -> str:
    return subprocess.run(["nft", *args], capture_output=True, text=True, check=True).stdout
