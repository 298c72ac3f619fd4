"""Atomic file writes: readers see the old file or the new one, never a partial one."""

from __future__ import annotations

import contextlib
import os
import tempfile


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory, then rename.

    The mode is set with fchmod so the umask cannot change it, and both the file and the
    directory are fsynced so a crash leaves either the old or the new content.
    """
    target = os.fspath(path)
    directory = os.path.dirname(target) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.rename(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
