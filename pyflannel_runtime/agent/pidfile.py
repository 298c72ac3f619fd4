"""The agent's pid file, beside its subnet file: how `pyflannel status` finds an agent that runs
no health server (flanneld's default, ``--healthz-port=0``).

The agent writes it once it has checked that the subnet file can be written, and removes it when
it exits in any orderly way; a pid file whose process is gone means the agent was killed
(SIGKILL, the OOM killer, a power cut). It holds the decimal PID and a newline, as every pid file
does, so systemd's ``PIDFile=`` or ``kill $(cat ...)`` can read it too.
"""

from __future__ import annotations

import errno
import os

from pyflannel_runtime.fsutil import FileTooLarge, read_small_file, unlink_quietly, write_atomic

PID_FILE_NAME = "pyflanneld.pid"
# "4194304\n" is the longest a Linux PID gets; anything much longer is not a pid file.
_PID_FILE_LIMIT = 64


def pid_file_for(subnet_file: str) -> str:
    """Where the agent using `subnet_file` keeps its pid file."""
    return os.path.join(os.path.dirname(subnet_file) or ".", PID_FILE_NAME)


def write_pid_file(path: str, pid: int) -> None:
    """Atomically, mode 0644; OSError when it cannot be written."""
    write_atomic(path, f"{pid}\n".encode(), 0o644)


def remove_pid_file(path: str, pid: int) -> None:
    """Remove the pid file if it still names `pid` (another agent may have taken it over)."""
    if read_pid_file(path) == pid:
        unlink_quietly(path)


def read_pid_file(path: str) -> int | None:
    """The PID the file names; None when there is no such file or it names no PID. Other
    OSErrors (a file that cannot be read) are raised."""
    try:
        text = read_small_file(path, _PID_FILE_LIMIT)
    except FileTooLarge:
        return None
    except OSError as err:
        if err.errno == errno.ENOENT:
            return None
        raise
    stripped = text.strip()
    if not stripped.isdigit():
        return None
    pid = int(stripped)
    return pid if pid > 0 else None
