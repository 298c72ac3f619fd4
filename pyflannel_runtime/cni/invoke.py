"""Running a delegate plugin the way libcni's invoke package does.

The plugin is looked up in CNI_PATH (a regular file, symlinks followed, no executable check),
run with the caller's environment plus ``CNI_COMMAND``, the configuration on stdin, and its
stdout and stderr captured. ``subprocess`` costs more to import than the whole rest of the
plugin, so this uses ``posix_spawn`` with memory files for stdin, stdout and stderr: nothing
can block on a full pipe. It takes all of that from ``posix``, not ``os`` (see ``fsutil``).
"""

from __future__ import annotations

import errno
import posix
import time
from _stat import S_ISREG
from io import SEEK_SET

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.cni.skel import CniError
from pyflannel_runtime.gojson.core import GoJSONError, decode
from pyflannel_runtime.gojson.strconv import go_quote

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

_TEXT_BUSY_RETRIES = 5


class InvokeError(PyflannelError):
    """A failure before the plugin ran (libcni returns these as plain errors)."""


def find_in_path(plugin: str, cni_path: str) -> str:
    if not plugin:
        raise InvokeError("no plugin name provided")
    if "/" in plugin:
        raise InvokeError(f"invalid plugin name: {plugin}")
    paths = cni_path.split(":") if cni_path else []
    if not paths:
        raise InvokeError("no paths provided")
    for directory in paths:
        candidate = clean_join(directory, plugin)
        try:
            if S_ISREG(posix.stat(candidate).st_mode):
                return candidate
        except (OSError, ValueError):  # ValueError: an embedded NUL byte
            continue
    raise InvokeError(f"failed to find plugin {go_quote(plugin)} in path [{' '.join(paths)}]")


def clean_join(directory: str, name: str) -> str:
    """Go's filepath.Join: the two joined, then cleaned lexically (repeated and trailing
    slashes, ``.`` and ``..`` resolved; ``.`` for nothing)."""
    joined = f"{directory}/{name}" if directory else name
    rooted = joined.startswith("/")
    parts: list[str] = []
    for part in joined.split("/"):
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not rooted:
                parts.append(part)
        elif part not in ("", "."):
            parts.append(part)
    cleaned = "/".join(parts)
    return "/" + cleaned if rooted else cleaned or "."


def _memfile(name: str, data: bytes = b"") -> int:
    fd = posix.memfd_create(name, 0)
    if data:
        posix.write(fd, data)
        posix.lseek(fd, 0, SEEK_SET)
    return fd


def _read_all(fd: int) -> bytes:
    posix.lseek(fd, 0, SEEK_SET)
    chunks = []
    while chunk := posix.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _spawn(path: str, env: Mapping[str, str], stdin: int, stdout: int, stderr: int) -> int:
    actions = [
        (posix.POSIX_SPAWN_DUP2, stdin, 0),
        (posix.POSIX_SPAWN_DUP2, stdout, 1),
        (posix.POSIX_SPAWN_DUP2, stderr, 2),
    ]
    for attempt in range(_TEXT_BUSY_RETRIES + 1):
        try:
            return posix.posix_spawn(path, [path], dict(env), file_actions=actions)
        except OSError as err:
            # the plugin binary is being replaced right now; libcni waits and retries too
            if err.errno != errno.ETXTBSY or attempt == _TEXT_BUSY_RETRIES:
                raise
            time.sleep(1)
    raise AssertionError("unreachable")


def _exit_text(status: int) -> str:
    """Go's *exec.ExitError text."""
    if posix.WIFSIGNALED(status):
        return f"signal: {_signal_name(posix.WTERMSIG(status))}"
    return f"exit status {posix.waitstatus_to_exitcode(status)}"


def _signal_name(number: int) -> str:
    names = {9: "killed", 15: "terminated", 6: "aborted", 11: "segmentation fault", 2: "interrupt"}
    return names.get(number, f"signal {number}")


def _plugin_error(status_text: str, stdout: bytes, stderr: bytes) -> CniError:
    """libcni's pluginErr: the plugin's JSON error, or a message built from its output."""
    if not stdout:
        if not stderr:
            return CniError(0, f"netplugin failed with no error message: {status_text}")
        text = stderr.decode("utf-8", errors="replace")
        return CniError(0, f"netplugin failed: {go_quote(text)}")
    try:
        reported = decode(stdout)
    except GoJSONError as err:
        text = stdout.decode("utf-8", errors="replace")
        return CniError(
            0, f"netplugin failed but error parsing its diagnostic message {go_quote(text)}: {err}"
        )
    if not isinstance(reported, dict):
        return CniError(0, "")
    code, msg, details = reported.get("code"), reported.get("msg"), reported.get("details")
    return CniError(
        int(code) if isinstance(code, int | float) and not isinstance(code, bool) else 0,
        msg if isinstance(msg, str) else "",
        details if isinstance(details, str) else "",
    )


def exec_plugin(
    command: str,
    path: str,
    config: bytes,
    environ: Mapping[str, str],
    meanwhile: Callable[[], None] | None = None,
) -> tuple[bytes, bytes]:
    """Run ``path`` for ``command``; returns (stdout, stderr) or raises CniError on failure.
    ``meanwhile`` runs while the plugin does (what it raises is raised once the plugin ended)."""
    env = dict(environ)
    env["CNI_COMMAND"] = command
    stdin_fd = _memfile("cni-stdin", config)
    stdout_fd = _memfile("cni-stdout")
    stderr_fd = _memfile("cni-stderr")
    try:
        try:
            pid = _spawn(path, env, stdin_fd, stdout_fd, stderr_fd)
        except OSError as err:
            raise CniError(
                0, f"netplugin failed with no error message: fork/exec {path}: {err.strerror}"
            ) from None
        try:
            if meanwhile is not None:
                meanwhile()
        finally:
            _, status = posix.waitpid(pid, 0)
        stdout, stderr = _read_all(stdout_fd), _read_all(stderr_fd)
    finally:
        for fd in (stdin_fd, stdout_fd, stderr_fd):
            posix.close(fd)
    if status != 0:
        raise _plugin_error(_exit_text(status), stdout, stderr)
    return stdout, stderr
