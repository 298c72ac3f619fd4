"""The delegate config flannel saves per container (``<dataDir>/<containerID>``) for DEL.

flannel writes the file in place; here it goes through a temp file and a rename so that a
crash or a concurrent reader never sees a partial config. ``fsutil.write_atomic`` does the
same but imports ``tempfile``, which costs more start-up time than the whole plugin.
"""

from __future__ import annotations

import os

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
    temp = os.path.join(data_dir, f".{container_id}.{os.getpid()}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, STATE_FILE_MODE)
    except OSError as err:
        raise _go_path_error("open", target, err) from None
    try:
        try:
            os.fchmod(fd, STATE_FILE_MODE)
            view = memoryview(config)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, target)
    except OSError as err:
        _remove_quietly(temp)
        raise _go_path_error("write", target, err) from None
    except BaseException:
        _remove_quietly(temp)
        raise
    dir_fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _remove_quietly(path: str) -> None:
    # not contextlib.suppress: importing contextlib costs start-up time
    try:  # noqa: SIM105
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
