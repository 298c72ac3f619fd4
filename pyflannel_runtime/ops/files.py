"""Put a node's rendered files on disk: compare, then write only what differs, all or nothing.

`python -m pyflannel_controller render` and the collection's files module both call this. ``plan_files`` reads what
is on disk and says, per file, what would change; ``apply_files`` makes those changes so that
either every file of the set is new or none is changed; ``sync_files`` is the two in one, with
check mode. Each file's content, exact mode (the umask plays no part) and optionally owner and
group are compared; a file is rewritten when any of them differs.

What happens when something fails:

* ``plan_files`` only reads. A path that can never be written (a directory or another
  non-regular file in its place, a non-directory among its parents, an unknown owner) raises
  FilesError, in check mode too.
* ``apply_files`` first stages every change: missing parent directories are created (0755),
  the new content goes to a temp file beside its target with its final mode and owner, and
  each existing target gets a hard link beside it that keeps the original. A failure while
  staging (disk full, read-only file system, ...) removes what was staged and the directories
  created: nothing has changed, and FilesError says so.
* Then the temp files are renamed over their targets, one by one. If a rename fails, the
  targets already replaced are restored from their kept originals (the same inodes: content,
  mode, owner and timestamps as before) and new ones removed; FilesError says the set was
  rolled back. Should a restore fail too, FilesError names each file left new and the path of
  its kept original, which is then not removed.
* After the last rename the directories are fsynced and the kept originals removed.

Temp files and kept originals are hidden names ending in ``.tmp`` and ``.orig``, which neither
the CNI runtime (``*.conf``, ``*.conflist``, ``*.json``) nor systemd (``*.service``) picks up,
should the process die between the steps.
"""

from __future__ import annotations

import contextlib
import enum
import grp
import os
import posixpath
import pwd
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.fsutil import fsync_directory, os_error_text, unlink_quietly, write_temp

_DIRECTORY_MODE = 0o755
_OBSTACLES = {stat.S_IFDIR: "a directory", stat.S_IFLNK: "a symbolic link"}


class FilesError(PyflannelError):
    """The files could not be (or were not) put in place; ``str()`` says which and why."""


@dataclass(frozen=True)
class WantedFile:
    """What one file should hold. ``sensitive`` hides its content from diffs (it may hold a
    password); ``owner`` and ``group`` are names or ids, None to leave them as they are."""

    content: bytes | str
    mode: int
    owner: str | int | None = None
    group: str | int | None = None
    sensitive: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.mode <= 0o7777:
            raise ValueError(f"mode {self.mode:#o} is not a file mode (0 to 07777)")

    @property
    def data(self) -> bytes:
        return self.content.encode() if isinstance(self.content, str) else self.content


class Reason(enum.StrEnum):
    """Why a file is (re)written; a created file has only CREATED."""

    CREATED = "created"
    CONTENT = "content"
    MODE = "mode"
    OWNER = "owner"


@dataclass(frozen=True)
class FileChange:
    """One file of a plan: what is there (``before``) and what will be (``after``)."""

    path: str  # the path as the caller named it
    target: str  # where it is on disk (under the plan's root)
    reasons: tuple[Reason, ...]  # empty when the file is already as wanted
    after: bytes
    mode: int
    uid: int | None  # the owner to set; None keeps the file's own (a new file: the writer's)
    gid: int | None
    before: bytes | None = None  # None: the file does not exist
    before_mode: int | None = None
    before_uid: int | None = None
    before_gid: int | None = None
    sensitive: bool = field(default=False, repr=False)

    @property
    def changed(self) -> bool:
        return bool(self.reasons)

    @property
    def owner_after(self) -> tuple[int | None, int | None]:
        """uid and gid the file will have (None: the writer's, for a new file)."""
        return (
            self.before_uid if self.uid is None else self.uid,
            self.before_gid if self.gid is None else self.gid,
        )

    def diff(self) -> list[dict[str, Any]]:
        """Ansible's diff entries (before/after with headers); empty when unchanged."""
        diffs: list[dict[str, Any]] = []
        headers = {"before_header": self.target, "after_header": self.target}
        if Reason.CREATED in self.reasons or Reason.CONTENT in self.reasons:
            diffs.append(
                {
                    "before": self._shown(self.before),
                    "after": self._shown(self.after),
                    **headers,
                }
            )
        if Reason.MODE in self.reasons or Reason.OWNER in self.reasons:
            diffs.append(
                {
                    "before": _attributes(self.before_mode, self.before_uid, self.before_gid),
                    "after": _attributes(self.mode, *self.owner_after),
                    **headers,
                }
            )
        return diffs

    def _shown(self, data: bytes | None) -> str:
        if data is None:
            return ""
        if self.sensitive:
            return f"(sensitive content, {len(data)} bytes)\n"
        return data.decode("utf-8", errors="replace")


def _attributes(mode: int | None, uid: int | None, gid: int | None) -> dict[str, Any]:
    return {"mode": None if mode is None else f"{mode:04o}", "owner": uid, "group": gid}


@dataclass(frozen=True)
class FilePlan:
    root: str
    files: tuple[FileChange, ...]

    @property
    def changed(self) -> bool:
        return any(f.changed for f in self.files)

    @property
    def changes(self) -> tuple[FileChange, ...]:
        return tuple(f for f in self.files if f.changed)

    def diff(self) -> list[dict[str, Any]]:
        return [entry for f in self.files for entry in f.diff()]


# --- plan: read and compare -------------------------------------------------------------------


def plan_files(files: Mapping[str, WantedFile], root: str = "/") -> FilePlan:
    """Compare ``files`` (paths taken below ``root``, leading slash or not) with the disk.

    Raises FilesError when a file could not be written at all, ValueError for a path that
    leaves the root or names the same file twice.
    """
    root = os.path.abspath(root)
    targets: dict[str, tuple[str, WantedFile]] = {}
    for path, wanted in files.items():
        target = _target(root, path)
        if target in targets:
            raise ValueError(f"{path!r} and {targets[target][0]!r} are the same file")
        targets[target] = (path, wanted)
    compared = (
        _compare(path, target, wanted) for target, (path, wanted) in sorted(targets.items())
    )
    return FilePlan(root=root, files=tuple(compared))


def _target(root: str, path: str) -> str:
    relative = posixpath.normpath(path.lstrip("/")) if path.strip("/") else ""
    if not relative or relative == "." or relative.split("/")[0] == "..":
        raise ValueError(f"{path!r} does not name a file below the root")
    return os.path.join(root, relative)


def _compare(path: str, target: str, wanted: WantedFile) -> FileChange:
    _check_parents(target)
    uid = None if wanted.owner is None else _account_id(wanted.owner, target, group=False)
    gid = None if wanted.group is None else _account_id(wanted.group, target, group=True)
    change = FileChange(
        path=path,
        target=target,
        reasons=(Reason.CREATED,),
        after=wanted.data,
        mode=wanted.mode,
        uid=uid,
        gid=gid,
        sensitive=wanted.sensitive,
    )
    try:
        kind = stat.S_IFMT(os.lstat(target).st_mode)
    except FileNotFoundError:
        return change
    except OSError as err:
        raise FilesError(f"{target}: cannot read it: {os_error_text(err)}") from None
    if kind != stat.S_IFREG:
        raise FilesError(f"{target}: {_OBSTACLES.get(kind, 'a special file')} is in the way")
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            before = _read_all(fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise FilesError(f"{target}: cannot read it: {os_error_text(err)}") from None
    mode = stat.S_IMODE(info.st_mode)
    differs = {
        Reason.CONTENT: before != wanted.data,
        Reason.MODE: mode != wanted.mode,
        Reason.OWNER: uid not in (None, info.st_uid) or gid not in (None, info.st_gid),
    }
    return replace(
        change,
        reasons=tuple(reason for reason, differ in differs.items() if differ),
        before=before,
        before_mode=mode,
        before_uid=info.st_uid,
        before_gid=info.st_gid,
    )


def _check_parents(target: str) -> None:
    """The nearest existing ancestor must be a directory (symlinks to one are fine)."""
    parent = os.path.dirname(target)
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise FilesError(f"{target}: {parent} is not a directory")


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _account_id(name: str | int, target: str, *, group: bool) -> int:
    """A uid (or gid) as given, or looked up by name."""
    if isinstance(name, int):
        return name
    try:
        return grp.getgrnam(name).gr_gid if group else pwd.getpwnam(name).pw_uid
    except KeyError:
        raise FilesError(f"{target}: no such {'group' if group else 'user'}: {name}") from None


# --- apply: stage, then rename ------------------------------------------------------------------


@dataclass
class _Staged:
    change: FileChange
    temp: str | None = None
    original: str | None = None  # a hard link keeping the file the rename replaces


def apply_files(plan: FilePlan) -> None:
    """Make the plan's changes: every changed file written, or none (see the module's doc)."""
    staged: list[_Staged] = []
    created: list[str] = []
    target = ""
    try:
        for change in plan.changes:
            target = change.target
            _make_parents(os.path.dirname(target), created)
            entry = _Staged(change)
            staged.append(entry)
            if change.before is not None:
                entry.original = _keep_original(target)
            uid, gid = change.owner_after  # a rewrite keeps the owner unless told otherwise
            entry.temp = write_temp(target, change.after, change.mode, _or_keep(uid), _or_keep(gid))
    except BaseException as err:
        _discard(staged, created)
        if isinstance(err, OSError):
            raise FilesError(f"{target}: {os_error_text(err)}; nothing was changed") from None
        raise
    replaced: list[_Staged] = []
    for entry in staged:
        assert entry.temp is not None
        try:
            os.rename(entry.temp, entry.change.target)
        except BaseException as err:
            left = _roll_back(replaced)
            _discard([e for e in staged if e not in replaced], created)
            if isinstance(err, OSError):
                raise FilesError(_rename_failure(entry.change.target, err, left)) from None
            raise
        replaced.append(entry)
    _finish(staged, created)


def sync_files(files: Mapping[str, WantedFile], root: str = "/", check: bool = False) -> FilePlan:
    """Plan, then (unless ``check``) apply; the plan says what changed or would change."""
    plan = plan_files(files, root)
    if not check:
        apply_files(plan)
    return plan


def _or_keep(owner: int | None) -> int:
    return -1 if owner is None else owner  # os.fchown's "leave it"


def _make_parents(directory: str, created: list[str]) -> None:
    missing = []
    while not os.path.lexists(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    for path in reversed(missing):
        os.mkdir(path, _DIRECTORY_MODE)
        created.append(path)
        os.chmod(path, _DIRECTORY_MODE)  # exact, whatever the umask


def _keep_original(target: str) -> str:
    directory, name = os.path.split(target)
    original = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.orig")
    os.link(target, original, follow_symlinks=False)
    return original


def _discard(staged: Iterable[_Staged], created: list[str]) -> None:
    """Remove the temp files, the kept originals and the directories created."""
    for entry in staged:
        for path in (entry.temp, entry.original):
            if path is not None:
                unlink_quietly(path)
    for directory in reversed(created):
        # Not empty when a new file could not be removed, or something else came meanwhile.
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def _roll_back(replaced: list[_Staged]) -> list[str]:
    """Undo the renames done, last first; describes each file that stays new."""
    left = []
    for entry in reversed(replaced):
        target, original = entry.change.target, entry.original
        try:
            if original is None:
                os.unlink(target)
            else:
                os.rename(original, target)
        except OSError as err:
            kept = f" (the original is kept as {original})" if original else ""
            left.append(f"{target}: {os_error_text(err)}{kept}")
    return left


def _rename_failure(target: str, err: OSError, left: list[str]) -> str:
    message = f"{target}: {os_error_text(err)}"
    if not left:
        return f"{message}; the files already written were put back, nothing was changed"
    return f"{message}; putting back the files already written failed: {'; '.join(left)}"


def _finish(staged: list[_Staged], created: list[str]) -> None:
    """Make the renames durable and drop the kept originals."""
    directories = {os.path.dirname(e.change.target) for e in staged}
    directories.update(os.path.dirname(d) for d in created)
    try:
        for directory in sorted(directories):
            fsync_directory(directory)
    except OSError as err:
        raise FilesError(
            f"{directory}: every file was written, but syncing it failed: {os_error_text(err)}"
        ) from None
    finally:
        for entry in staged:
            if entry.original is not None:
                unlink_quietly(entry.original)
