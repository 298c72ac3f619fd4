"""Why the node has no lease, or lost or changed it: a note the agent leaves beside its subnet
file for `pyflannel status`, which shows it (flanneld says so only in its log, which a restart
under systemd scrolls away).

The agent writes it when it cannot get a lease (``out of subnets``), when it shuts down because
another node took its subnet after its lease ran out, and when it starts with another subnet
than the one subnet.env names (its pods are addressed from the old one); it removes it when it
starts with the subnet it had. A problem keeps the time it was first seen across the restarts
that meet it again. The file is one small JSON object, written atomically, mode 0644.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from pyflannel_runtime.fsutil import FileTooLarge, read_small_file, unlink_quietly, write_atomic

NOTE_FILE_NAME = "pyflanneld.lease-note"
_NOTE_LIMIT = 16 << 10


@dataclass(frozen=True)
class LeaseNote:
    message: str
    since: float  # when it was first seen (seconds since the epoch)
    problem: bool = True  # False: for the operator's information (a renumbered node)


def note_file_for(subnet_file: str) -> str:
    """Where the agent using `subnet_file` leaves its lease note."""
    return os.path.join(os.path.dirname(subnet_file) or ".", NOTE_FILE_NAME)


def encode(note: LeaseNote) -> bytes:
    data = {"message": note.message, "since": note.since, "problem": note.problem}
    return json.dumps(data, sort_keys=True).encode() + b"\n"


def decode(data: bytes) -> LeaseNote | None:
    """The note; None when the bytes are not one (a note is advice: never an error)."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    message, since, problem = value.get("message"), value.get("since"), value.get("problem")
    if not isinstance(message, str) or not isinstance(problem, bool):
        return None
    if isinstance(since, bool) or not isinstance(since, int | float):
        return None
    return LeaseNote(message, float(since), problem)


def read_note(path: str) -> LeaseNote | None:
    """The note at `path`; None when there is none or it cannot be read."""
    try:
        return decode(read_small_file(path, _NOTE_LIMIT))
    except (FileTooLarge, OSError):
        return None


def leave_note(path: str, message: str, *, problem: bool = True, now: float | None = None) -> None:
    """Write the note, keeping the time of an earlier note with the same message. OSError when
    it cannot be written."""
    earlier = read_note(path)
    if earlier is not None and earlier.message == message and earlier.problem == problem:
        since = earlier.since
    else:
        since = time.time() if now is None else now
    write_atomic(path, encode(LeaseNote(message, since, problem)), 0o644)


def clear_note(path: str) -> None:
    unlink_quietly(path)
