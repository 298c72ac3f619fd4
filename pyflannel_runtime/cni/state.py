"""The delegate config flannel saves per container (``<dataDir>/<containerID>``) for DEL.

flannel writes the file in place; here it goes through a temp file and a rename so that a
crash or a concurrent reader never sees a partial config.
"""

from __future__ import annotations

import os

from pyflannel_runtime.fsutil import write_atomic

STATE_DIR_MODE = 0o700
STATE_FILE_MODE = 0o600


def state_path(data_dir: str, container_id: str) -> str:
    return os.path.join(data_dir, container_id)


def _go_path_error(op: str, path: str, err: OSError) -> OSError:
    """An OSError whose str() is Go's *PathError text, e.g. ``open /x: permission denied``."""
    reason = (err.strerror or str(err)).lower()
    return OSError(err.errno, f"{op} {path}: {reason}")


def save_config(data_dir: str, container_id: str, config: bytes) -> None:
    """Write ``config`` with mode 0600 (the directory 0700), fsynced, atomically replaced."""
    try:
        os.makedirs(data_dir, STATE_DIR_MODE, exist_ok=True)
    except OSError as err:
        raise _go_path_error("mkdir", data_dir, err) from None
    target = state_path(data_dir, container_id)
    try:
        write_atomic(target, config, STATE_FILE_MODE)
    except OSError as err:
        raise _go_path_error("open", target, err) from None


def _remove_quietly(path: str) -> None:
    try:  # noqa: SIM105 - contextlib is an import the plugin's start-up can do without
        os.unlink(path)
    except OSError:
        pass


def read_config(data_dir: str, container_id: str) -> bytes | None:
    """The saved config, or None when there is none (DEL then has nothing to undo)."""
    path = state_path(data_dir, container_id)
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError as err:
        raise _go_path_error("read", path, err) from None
    except OSError as err:
        raise _go_path_error("open", path, err) from None


def remove_config(data_dir: str, container_id: str) -> None:
    """DEL ignores removal errors, as the CNI spec allows."""
    _remove_quietly(state_path(data_dir, container_id))
