"""A device's tx checksum offload through the kernel's ethtool interface, as ``ethtool -k`` and
``ethtool -K <dev> tx on|off`` reach it: the SIOCETHTOOL ioctl with ETHTOOL_GTXCSUM and
ETHTOOL_STXCSUM (include/uapi/linux/ethtool.h), no ethtool binary.

ETHTOOL_STXCSUM switches every tx checksum feature of the device together (NETIF_F_CSUM_MASK:
a vxlan device has only tx-checksum-ip-generic, the feature flannel's troubleshooting guide
turns off); ETHTOOL_GTXCSUM says whether any of them is on. The ioctl acts on the device of
that name in the network namespace of the socket it is issued on, so the socket is opened
inside the namespace.
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct

from pyflannel_runtime.netlink.netns import run_in_netns

SIOCETHTOOL = 0x8946
ETHTOOL_GTXCSUM = 0x16
ETHTOOL_STXCSUM = 0x17
IFNAMSIZ = 16


class _EthtoolValue(ctypes.Structure):
    _fields_ = [("cmd", ctypes.c_uint32), ("data", ctypes.c_uint32)]


def _ethtool(sock: socket.socket, device: str, cmd: int, data: int = 0) -> int:
    name = device.encode()
    if not 0 < len(name) < IFNAMSIZ:
        raise OSError(f"{device!r} is not a device name")
    value = _EthtoolValue(cmd, data)
    # struct ifreq: the name, then (in the union) a pointer to the ethtool command.
    request = bytearray(struct.pack(f"{IFNAMSIZ}sP", name, ctypes.addressof(value)))
    request += bytes(40 - len(request))
    try:
        fcntl.ioctl(sock.fileno(), SIOCETHTOOL, request)
    except OSError as err:
        raise OSError(err.errno, f"ethtool on {device}: {err.strerror}") from None
    return int(value.data)


def _socket(netns: str | None) -> socket.socket:
    return run_in_netns(netns, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))


def tx_checksum_offload(device: str, netns: str | None = None) -> bool:
    """Whether any tx checksum offload of the device is on; OSError (ENODEV) without it."""
    with _socket(netns) as sock:
        return _ethtool(sock, device, ETHTOOL_GTXCSUM) != 0


def set_tx_checksum_offload(device: str, enabled: bool, netns: str | None = None) -> bool:
    """Switch the device's tx checksum offload; True when it changed. Needs CAP_NET_ADMIN."""
    with _socket(netns) as sock:
        if (_ethtool(sock, device, ETHTOOL_GTXCSUM) != 0) == enabled:
            return False
        _ethtool(sock, device, ETHTOOL_STXCSUM, int(enabled))
        return True
