"""The delegate config flannel saves per container (``<dataDir>/<containerID>``) for DEL.

flannel writes the file in place; here it goes through a temp file and a rename so that a
crash or a concurrent reader never sees a partial config.
"""

from __future__ import annotations

import errno

from pyflannel_runtime.fsutil import (
    PathError,
    join_path,
    make_directories,
    make_durable,
    read_small_file,
    unlink_quietly,
    write_atomic,
)

STATE_DIR_MODE = 0o700
STATE_FILE_MODE = 0o600


def state_path(data_dir: str, container_id: str) -> str:
    return join_path(data_dir, container_id)  # skel has checked that the ID holds no "/"


def save_config(data_dir: str, container_id: str, config: bytes) -> str:
    """Write ``config`` with mode 0600 (the directory 0700), atomically replaced; returns its
    path, for ``make_durable`` while the delegate runs (the fsyncs cost as much as the rest
    of the plugin's own work). Raises PathError."""
    try:
        make_directories(data_dir, STATE_DIR_MODE)
    except FileExistsError:  # a file where the directory should be: Go's MkdirAll says ENOTDIR
        raise PathError("mkdir", data_dir, OSError(errno.ENOTDIR, "not a directory")) from None
    except OSError as err:
        raise PathError("mkdir", data_dir, err) from None
    target = state_path(data_dir, container_id)
    try:
        write_atomic(target, config, STATE_FILE_MODE, durable=False)
    except OSError as err:
        raise PathError("open", target, err) from None
    return target


def make_config_durable(path: str) -> None:
    """Raises PathError."""
    try:
        make_durable(path)
    except OSError as err:
        raise PathError("fsync", path, err) from None


def read_config(data_dir: str, container_id: str) -> bytes | None:
    """The saved config, or None when there is none (DEL then has nothing to undo).
    Raises PathError, FileTooLarge for a file no config of ours can be."""
    try:
        return read_small_file(state_path(data_dir, container_id))
    except PathError as err:
        if err.errno == errno.ENOENT:
            return None
        raise


def remove_config(data_dir: str, container_id: str) -> None:
    """DEL ignores removal errors, as the CNI spec allows."""
    unlink_quietly(state_path(data_dir, container_id))
