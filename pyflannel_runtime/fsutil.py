"""Atomic file writes: readers see the old file or the new one, never a partial one.

Only ``os`` is imported: the CNI plugin writes its state through this on every pod start.
"""

from __future__ import annotations

import os


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory, then rename.

    The mode is set with fchmod so the umask cannot change it, and both the file and the
    directory are fsynced so a crash leaves either the old or the new content.
    """
    target = os.fspath(path)
    directory = os.path.dirname(target) or "."
    temp = os.path.join(directory, f".{os.path.basename(target)}.{os.urandom(6).hex()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, target)
    except BaseException:
        _unlink_quietly(temp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _unlink_quietly(path: str) -> None:
    try:  # noqa: SIM105 - contextlib is an import the CNI plugin's start-up can do without
        os.unlink(path)
    except OSError:
        pass
