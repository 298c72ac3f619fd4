"""Rendered files onto the node: compare, then write atomically with exact modes (and owner and
group where given) only what differs; check mode and diff come from the comparison."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections import namedtuple

WantedFile = namedtuple("WantedFile", "content mode owner group", defaults=(None, None))


def _ids(wanted):
    uid = -1 if wanted.owner is None else pwd.getpwnam(wanted.owner).pw_uid
    gid = -1 if wanted.group is None else grp.getgrnam(wanted.group).gr_gid
    return uid, gid


def _current(path):
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None, None
    if not stat.S_ISREG(info.st_mode):
        return b"", None
    with open(path, "rb") as handle:
        return handle.read(), info


def _text(data):
    return "" if data is None else data.decode("utf-8", errors="replace")


def _describe(path, info):
    if info is None:
        return f"{path} (absent)"
    return f"{path} (mode {stat.S_IMODE(info.st_mode):04o}, uid {info.st_uid}, gid {info.st_gid})"


def sync_files(module, wanted):
    """``wanted`` maps absolute paths to WantedFile. Returns ``(changed paths, diffs)``;
    writes nothing in check mode. Unknown owners and groups fail before anything is written."""
    from pyflannel_runtime.fsutil import write_atomic

    try:
        ids = {path: _ids(spec) for path, spec in wanted.items()}
    except KeyError as err:
        module.fail_json(msg=f"no such user or group on this host: {err}")
    changed = []
    diffs = []
    for path, spec in sorted(wanted.items()):
        before, info = _current(path)
        uid, gid = ids[path]
        same = (
            info is not None
            and before == spec.content
            and stat.S_IMODE(info.st_mode) == spec.mode
            and uid in (-1, info.st_uid)
            and gid in (-1, info.st_gid)
        )
        if same:
            continue
        changed.append(path)
        diffs.append(
            {
                "before_header": _describe(path, info),
                "after_header": f"{path} (mode {spec.mode:04o})",
                "before": _text(before),
                "after": _text(spec.content),
            }
        )
    if not module.check_mode:
        for path in changed:
            spec = wanted[path]
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            write_atomic(path, spec.content, spec.mode)
            if ids[path] != (-1, -1):
                os.chown(path, *ids[path])
    return changed, diffs
