"""glibc heap settings that keep the agent's resident memory down at thousands of peers.

Both are no-ops where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("pyflannel.agent")

_M_ARENA_MAX = -8


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt  # noqa: B018 - probing for glibc
        return libc
    except (OSError, AttributeError):
        return None


def limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's per-thread arenas before the worker threads start (netlink and the etcd
    client each run in threads); every extra arena keeps its own freed-but-held pages."""
    libc = _libc()
    if libc is not None and not libc.mallopt(_M_ARENA_MAX, arenas):
        log.debug("mallopt(M_ARENA_MAX) refused")


def release_free_memory() -> None:
    """Hand the heap freed by a full sync or reconcile (thousands of decoded leases, dumped
    entries and planned writes) back to the kernel; glibc would otherwise keep it, counted
    as the agent's RSS."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
