"""Small files in and out: bounded reads of files from outside, atomic writes.

Readers see the old file or the new one, never a partial one; a file read from outside
(subnet.env, net-conf.json, a CNI state file, a cluster model) is read up to the size of the
largest document the gojson core decodes, so ``/dev/zero`` or a runaway file cannot exhaust
memory. Errors read as Go's ``*PathError`` (``open /run/x: no such file or directory``).

The CNI plugin reads and writes its state through this on every pod start, so it imports no
more than ``posix`` and ``errno`` (both built in): ``os`` alone would add about 1.3 ms to each
plugin run, with ``os.path`` and ``collections.abc`` behind it.
"""

from __future__ import annotations

import errno
import posix
from _stat import S_ISDIR

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.gojson.core import MAX_DOCUMENT_BYTES

_READ_CHUNK = 1 << 16

TYPE_CHECKING = False
if TYPE_CHECKING:
    from os import PathLike


class PathError(PyflannelError, OSError):
    """An OSError whose ``str()`` is Go's *PathError text: ``<op> <path>: <reason>``."""

    def __init__(self, op: str, path: str, err: OSError) -> None:
        super().__init__(err.errno, err.strerror or str(err))
        self.op = op
        self.path = path

    def __str__(self) -> str:
        return f"{self.op} {self.path}: {(self.strerror or '').lower()}"


class FileTooLarge(PathError):
    def __init__(self, path: str, limit: int) -> None:
        super().__init__("read", path, OSError(errno.EFBIG, f"file too large: over {limit} bytes"))


def read_small_file(path: str, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The whole of a file that must be small; PathError (FileTooLarge past ``limit`` bytes)."""
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError as err:
        raise PathError("open", path, err) from None
    except ValueError:  # an embedded NUL byte, which the kernel would refuse as EINVAL
        raise PathError("open", path, OSError(errno.EINVAL, "invalid argument")) from None
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            try:
                chunk = posix.read(fd, min(_READ_CHUNK, limit + 1 - size))
            except OSError as err:
                raise PathError("read", path, err) from None
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise FileTooLarge(path, limit)
    finally:
        posix.close(fd)


def write_atomic(
    path: str | PathLike[str], data: bytes, mode: int, *, durable: bool = True
) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory, then rename.

    The mode is set with fchmod so the umask cannot change it, and both the file and the
    directory are fsynced so a crash leaves either the old or the new content. With
    ``durable=False`` the fsyncs are left to a later ``make_durable(path)``: readers see the
    whole file at once all the same.
    """
    target = posix.fspath(path)
    temp = write_temp(target, data, mode, durable=durable)
    try:
        posix.rename(temp, target)
    except BaseException:
        unlink_quietly(temp)
        raise
    if durable:
        fsync_directory(split_path(target)[0] or ".")


def make_durable(path: str) -> None:
    """fsync a file written with ``write_atomic(durable=False)``, then its directory."""
    fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    try:
        posix.fsync(fd)
    finally:
        posix.close(fd)
    fsync_directory(split_path(path)[0] or ".")


def write_temp(
    target: str, data: bytes, mode: int, uid: int = -1, gid: int = -1, *, durable: bool = True
) -> str:
    """A new file beside ``target`` holding ``data`` with exactly ``mode`` (and owner, when
    ``uid``/``gid`` are not -1), fsynced unless ``durable=False``; returns its path. Nothing is
    left behind on error."""
    directory, name = split_path(target)
    temp = join_path(directory, f".{name}.{posix.urandom(6).hex()}.tmp")
    fd = posix.open(
        temp,
        posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_NOFOLLOW | posix.O_CLOEXEC,
        mode,
    )
    try:
        try:
            if uid != -1 or gid != -1:
                posix.fchown(fd, uid, gid)
            # After fchown, which clears the set-id bits.
            posix.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[posix.write(fd, view) :]
            if durable:
                posix.fsync(fd)
        finally:
            posix.close(fd)
    except BaseException:
        unlink_quietly(temp)
        raise
    return temp


def fsync_directory(directory: str) -> None:
    """Make the renames and unlinks in ``directory`` durable."""
    dir_fd = posix.open(directory, posix.O_RDONLY | posix.O_DIRECTORY)
    try:
        posix.fsync(dir_fd)
    finally:
        posix.close(dir_fd)


def split_path(path: str) -> tuple[str, str]:
    """``os.path.split`` without importing ``os``: the directory (trailing slashes dropped unless
    it is the root) and the last component."""
    cut = path.rfind("/") + 1
    directory, name = path[:cut], path[cut:]
    if directory.strip("/"):
        directory = directory.rstrip("/")
    return directory, name


def join_path(directory: str, name: str) -> str:
    """``os.path.join`` without importing ``os``, for a ``name`` that holds no "/"."""
    if not directory or directory.endswith("/"):
        return directory + name
    return f"{directory}/{name}"


def make_directories(path: str, mode: int) -> None:
    """``os.makedirs(path, mode, exist_ok=True)`` without ``os``: missing parents get the
    default mode, as there; FileExistsError when something other than a directory is at
    ``path``."""
    try:
        posix.mkdir(path, mode)
        return
    except FileExistsError:
        if S_ISDIR(posix.stat(path).st_mode):
            return
        raise
    except FileNotFoundError:
        parent = split_path(path)[0]
        if parent in ("", path):
            raise
    make_directories(parent, 0o777)
    try:
        posix.mkdir(path, mode)
    except FileExistsError:  # made by a concurrent caller meanwhile
        if not S_ISDIR(posix.stat(path).st_mode):
            raise


def unlink_quietly(path: str) -> None:
    try:  # noqa: SIM105 - contextlib is an import the CNI plugin's start-up can do without
        posix.unlink(path)
    except OSError:
        pass


def os_error_text(err: OSError, op: str = "") -> str:
    """An OSError as Go words it: ``open /x: no such file or directory`` (``op`` and the
    file name when known), never Python's ``[Errno 2] ...`` prefix."""
    # strerror of the number: wrappers such as asyncio's bind error put more than the reason
    # in strerror.
    reason = (posix.strerror(err.errno) if err.errno and err.errno > 0 else str(err)).lower()
    if not op:
        return reason
    return f"{op} {err.filename}: {reason}" if err.filename is not None else f"{op}: {reason}"
