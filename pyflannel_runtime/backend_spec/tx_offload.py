"""Whether the vxlan devices keep tx checksum offload: pyflanneld's
``--vxlan-tx-checksum-offload`` (on, off or auto).

On some kernels and NICs UDP through flannel.<VNI> arrives with bad checksums while the
device offloads them (flannel #1279 and #2152, kubespray #6115; flannel's troubleshooting guide
has operators run ``ethtool -K flannel.1 tx-checksum-ip-generic off`` by hand). ``on`` is the
kernel's default, ``off`` turns offload off on every device the agent creates or finds, and
``auto`` follows the verdict the connectivity suite records on the node: off once UDP
checksums were seen failing through the device, on otherwise.

The verdict is a small text file the suite writes and the agent only reads: ``off: <why>``.
Pure: the file itself is read and written by ``backend/vxlan/offload_verdict.py``.
"""

from __future__ import annotations

MODES = ("on", "off", "auto")
DEFAULT_MODE = "on"
# Survives reboots: the device comes back with the kernel's default until it is turned off.
AUTO_VERDICT_FILE = "/var/lib/pyflannel/vxlan-tx-checksum-offload"
_OFF = "off"


def check_mode(mode: str) -> None:
    """ValueError unless `mode` is one of MODES."""
    if mode not in MODES:
        raise ValueError(f"must be one of {', '.join(MODES)}")


def parse_verdict(text: str) -> str | None:
    """The reason an auto verdict turned offload off, or None when it does not say off."""
    first = text.splitlines()[0] if text.strip() else ""
    word, _, reason = first.partition(":")
    if word.strip() != _OFF:
        return None
    return reason.strip() or "the connectivity suite turned it off"


def render_verdict(reason: str) -> str:
    return f"{_OFF}: {' '.join(reason.split())}\n"


def wanted(mode: str, verdict: str | None) -> bool:
    """Whether offload should be on, for a mode and the auto verdict's reason (None: none)."""
    if mode == "auto":
        return verdict is None
    return mode != _OFF


def describe(mode: str, enabled: bool | None, verdict: str | None) -> str:
    """One line for people: the device's state and where it comes from."""
    state = "unknown" if enabled is None else ("on" if enabled else "off")
    if mode == "auto":
        source = f"auto: {verdict}" if verdict is not None else "auto: no checksum errors seen"
    else:
        source = f"--vxlan-tx-checksum-offload={mode}"
    return f"tx checksum offload {state} ({source})"
