"""glibc heap settings that keep the agent's resident memory down at thousands of peers.

Both are no-ops where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("pyflannel.agent")

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_MMAP_THRESHOLD = 128 * 1024  # glibc's default, held there


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt  # noqa: B018 - probing for glibc
        return libc
    except (OSError, AttributeError):
        return None


def tune_heap(arenas: int = 2) -> None:
    """Before the worker threads start (netlink and the etcd client each run in threads):

    * cap glibc's per-thread arenas: every extra arena keeps its own freed-but-held pages;
    * hold the mmap threshold at its default: glibc raises it after freeing a large block (up
      to 32 MiB), after which large buffers (the 1 MiB that `netlink.batch` receives each
      batch's acknowledgements into, a lease listing) come from the heap, where what is left
      of them once shrunk, or one long-lived object allocated after them, keeps the heap from
      shrinking. Held, each is mapped and unmapped on its own (bench/bench_churn.py, five
      minutes of churn with four full reconciles: RSS growth 5.0 MiB without it, 3.5 with it).
    """
    libc = _libc()
    if libc is None:
        return
    if not libc.mallopt(_M_ARENA_MAX, arenas):
        log.debug("mallopt(M_ARENA_MAX) refused")
    if not libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD):
        log.debug("mallopt(M_MMAP_THRESHOLD) refused")


def release_free_memory() -> None:
    """Hand the heap freed by a full sync or reconcile (thousands of decoded leases, dumped
    entries and planned writes) back to the kernel; glibc would otherwise keep it, counted
    as the agent's RSS."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
