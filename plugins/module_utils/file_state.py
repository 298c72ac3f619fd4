"""A file's state on a node as pyflannel.network.node_facts reports it (type, mode, owner, group
and a digest of the content), and the digest itself, which the controller computes too for the
content it wants there (plugins/plugin_utils/host_files.py): equal digests mean equal content
without the content crossing the wire.

The digest is an HMAC-SHA256 under a key the controller makes for each run and never shows
(node_facts takes it as a no_log option): a digest of a file that holds a password then says
nothing about the password, to anyone reading a verbose log. Without a key it is a plain SHA-256.

Also how pki_files and runtime_install write a file: atomically, its mode (and owner) set before
its content lands.

Runs on the node with any Python (the stdlib only).
"""

from __future__ import annotations

import grp
import hashlib
import hmac
import os
import pwd
import stat
import tempfile
from contextlib import suppress

# The options of the modules whose action plugin compares their files with known states
# (plugins/plugin_utils/host_files.py) before it runs them; the modules themselves ignore them.
KNOWN_STATES_ARGUMENT_SPEC = {
    "known_states": {"type": "dict"},
    "digest_key": {"type": "str", "no_log": True},
}

# Larger files get no digest (they are none of pyflannel's): the controller then sees them as
# differing, which costs a module run, never a wrong skip.
DIGEST_LIMIT = 1024 * 1024

_TYPES = {stat.S_IFREG: "file", stat.S_IFDIR: "directory", stat.S_IFLNK: "link"}


def file_digest(data: bytes, key: str | None) -> str:
    if key:
        return hmac.new(key.encode(), data, hashlib.sha256).hexdigest()
    return hashlib.sha256(data).hexdigest()


def _name(lookup, number: int) -> str:
    try:
        return str(lookup(number)[0])
    except KeyError:
        return str(number)


def file_state(path: str, key: str | None) -> dict | None:
    """What is at ``path`` (not following a symbolic link); None when nothing is."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        return {"type": "unreadable", "reason": err.strerror or str(err)}
    state = {
        "type": _TYPES.get(stat.S_IFMT(found.st_mode), "other"),
        "mode": f"{stat.S_IMODE(found.st_mode):04o}",
        "uid": found.st_uid,
        "gid": found.st_gid,
        "owner": _name(pwd.getpwuid, found.st_uid),
        "group": _name(grp.getgrgid, found.st_gid),
        "digest": None,
    }
    if state["type"] == "file" and found.st_size <= DIGEST_LIMIT:
        try:
            with open(path, "rb") as handle:
                data = handle.read(DIGEST_LIMIT + 1)
        except OSError as err:
            return {**state, "type": "unreadable", "reason": err.strerror or str(err)}
        if len(data) <= DIGEST_LIMIT:
            state["digest"] = file_digest(data, key)
    return state


def write_atomically(dest, data, mode, owner=None):
    """`data` (bytes) at `dest`: a temporary file beside it (mode, and `owner` as (uid, gid),
    first, then the content, flushed to disk), renamed over `dest`."""
    fd, temporary = tempfile.mkstemp(
        dir=os.path.dirname(dest), prefix=f".{os.path.basename(dest)}."
    )
    try:
        with os.fdopen(fd, "wb") as out:
            if owner is not None:
                os.fchown(out.fileno(), *owner)
            os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, dest)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
