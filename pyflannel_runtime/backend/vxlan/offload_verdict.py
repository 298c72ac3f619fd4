"""The auto verdict on the vxlan devices' tx checksum offload, as a file on the node: the
connectivity suite records it, the agent and the node checks read it (its format and what it
means are ``backend_spec.tx_offload``)."""

from __future__ import annotations

import os

from pyflannel_runtime.backend_spec.tx_offload import (
    AUTO_VERDICT_FILE,
    parse_verdict,
    render_verdict,
)
from pyflannel_runtime.fsutil import read_small_file, write_atomic

_VERDICT_LIMIT = 4096


def read_auto_verdict(path: str = AUTO_VERDICT_FILE) -> str | None:
    """The recorded auto verdict's reason; None when there is none (or it says on)."""
    try:
        text = read_small_file(path, _VERDICT_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return None
    return parse_verdict(text)


def record_auto_off(reason: str, path: str = AUTO_VERDICT_FILE) -> bool:
    """Record that offload is to stay off; False when that was recorded already."""
    text = render_verdict(reason)
    if read_auto_verdict(path) is not None:
        return False
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    write_atomic(path, text.encode(), 0o644)
    return True
