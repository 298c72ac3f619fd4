"""What the agent keeps between runs to resume its lease watch instead of listing every lease.

A restart storm costs etcd N^2: every restarting agent lists every lease. Instead the agent
keeps, beside its subnet file, every key under the subnets prefix with its value as its watch
last had them, the revision they are at and the ID of the cluster that served them. A
restart takes them as its first snapshot and watches from the next revision: only what
changed while it was down comes from etcd, deletions included (an expired etcd lease deletes
its key, and the watch replays that deletion). The manager checks the file against etcd first
(``EtcdSubnetManager``) and lists everything, as without a file, when etcd compacted that
revision, has not reached it (restored from an older backup), is another cluster, or counts
another number of keys at it.

The file is a cache: a torn or garbage one, or one of another prefix, is ignored with a
warning; it is written atomically (mode 0600), at most every SAVE_INTERVAL seconds while the
watch changes it and when the agent stops, and never fsynced (losing it costs one listing).
"""

from __future__ import annotations

import errno
import logging
import math
import time
from collections.abc import Iterable

import msgspec

from pyflannel_runtime.fsutil import os_error_text, read_small_file, write_atomic
from pyflannel_runtime.subnet.etcd.client import MAX_REPLY_BYTES, KeyValue, WatchResponse

log = logging.getLogger(__name__)

STATE_FILE_NAME = "pyflanneld.etcd-watch"
FORMAT = 1
SAVE_INTERVAL = 60.0
_MODE = 0o600


class WatchState(msgspec.Struct, frozen=True, kw_only=True):
    """Every key under ``prefix`` at ``revision`` of cluster ``cluster_id``."""

    format: int = FORMAT
    prefix: bytes
    cluster_id: int
    revision: int
    kvs: list[KeyValue]


_STATE = msgspec.json.Decoder(WatchState)


def encode(state: WatchState) -> bytes:
    return msgspec.json.encode(state)


def decode(data: bytes) -> WatchState | str:
    """The state, or why the bytes are not one."""
    try:
        state = _STATE.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        return str(err)
    except RecursionError:
        return "nested too deep"
    if state.format != FORMAT:
        return f"format {state.format}, not {FORMAT}"
    if state.revision <= 0:
        return f"revision {state.revision}"
    return state


def read_state(path: str, prefix: bytes) -> WatchState | None:
    """The state kept at ``path`` for ``prefix``; None when there is none, or with a warning
    when it cannot be used."""
    try:
        data = read_small_file(path, MAX_REPLY_BYTES)
    except OSError as err:
        if err.errno != errno.ENOENT:
            log.warning("Ignoring the lease watch's state: %s", err)
        return None
    found = decode(data)
    if isinstance(found, str):
        log.warning("Ignoring the lease watch's state in %s: %s", path, found)
        return None
    if found.prefix != prefix:
        log.warning(
            "Ignoring the lease watch's state in %s: it is of %s, not %s",
            path,
            found.prefix.decode(errors="replace"),
            prefix.decode(errors="replace"),
        )
        return None
    return found


class WatchRecord:
    """The keys under the prefix as the lease watch has them, at one revision, saved to
    ``path`` at most every SAVE_INTERVAL seconds while they change and on ``save(force)``."""

    def __init__(self, path: str, prefix: bytes) -> None:
        self.path = path
        self.prefix = prefix
        self._kvs: dict[bytes, KeyValue] = {}
        self._revision = 0
        self._cluster_id = 0
        self._dirty = False
        self._saved_at = -math.inf

    def reset(self, kvs: Iterable[KeyValue], revision: int, cluster_id: int) -> None:
        """Every key as of ``revision`` (a listing, or a state read back)."""
        self._kvs = {kv.key: kv for kv in kvs}
        self._revision, self._cluster_id = revision, cluster_id
        self._dirty = True
        self.save()

    def apply(self, response: WatchResponse) -> None:
        """One message of the watch: its events, or (empty) the revision it vouches for."""
        for event in response.events:
            if event.deleted:
                self._kvs.pop(event.kv.key, None)
            else:
                self._kvs[event.kv.key] = event.kv
        # A message's header may be ahead of its events (etcd sends a catch-up in parts): only
        # an empty one, a progress notification, says every event up to it has been sent.
        revision = response.events[-1].kv.mod_revision if response.events else response.revision
        if revision > self._revision:
            self._revision = revision
            self._dirty = True
        self.save()

    def save(self, *, force: bool = False) -> None:
        """Write the state when it changed, no sooner than SAVE_INTERVAL after the last write
        unless ``force``. A failed write is a warning: the next start lists the leases."""
        now = time.monotonic()
        if (
            not self._dirty
            or not self._revision
            or (now - self._saved_at < SAVE_INTERVAL and not force)
        ):
            return
        state = WatchState(
            prefix=self.prefix,
            cluster_id=self._cluster_id,
            revision=self._revision,
            kvs=list(self._kvs.values()),
        )
        try:
            write_atomic(self.path, encode(state), _MODE, durable=False)
        except OSError as err:
            log.warning("Failed to keep the lease watch's state: %s", os_error_text(err))
        self._dirty = False
        self._saved_at = now
