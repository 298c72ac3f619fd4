"""Exclusive ``flock`` locks: concurrent lab commands wait for each other instead of clashing.

Locking a directory leaves no lock file behind; a file lock is for places shared with others.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    flags = os.O_RDONLY | os.O_CLOEXEC
    if path.is_dir():
        fd = os.open(path, flags | os.O_DIRECTORY)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked_dir(path: Path) -> Iterator[None]:
    """Create ``path`` if needed and lock it, even against another process removing it.

    Whoever removes the directory does so holding the lock; a waiter that then gets the lock
    on the removed directory starts over with a new one.
    """
    while True:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = None
            if current == os.fstat(fd).st_ino:
                yield
                return
        finally:
            os.close(fd)
