"""ops/files.py: only what differs is written, with exact modes, and a set is all or nothing."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyflannel_runtime.ops import files as ops_files
from pyflannel_runtime.ops.files import (
    FilesError,
    Reason,
    WantedFile,
    apply_files,
    plan_files,
    sync_files,
)

NODE = {
    "etc/cni/net.d/10-flannel.conflist": WantedFile('{"name": "cbr0"}\n', 0o644),
    "/etc/pyflannel/pyflanneld.env": WantedFile("FLANNELD_ETCD_PASSWORD=s3cret\n", 0o600),
    "etc/systemd/system/pyflanneld.service": WantedFile(b"[Unit]\n", 0o644),
    "run/flannel/subnet.env": WantedFile("FLANNEL_MTU=1450\n", 0o644),
}


def listing(root: Path) -> dict[str, tuple[Any, ...]]:
    """Everything below root, hidden files included: kind, mode, owner, and for files the
    inode, mtime and content (so a rewrite with equal content still shows)."""
    entries: dict[str, tuple[Any, ...]] = {}
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(directory, name)
            info = path.lstat()
            key = str(path.relative_to(root))
            meta = (stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid)
            if stat.S_ISREG(info.st_mode):
                entries[key] = (*meta, info.st_ino, info.st_mtime_ns, path.read_bytes())
            elif stat.S_ISLNK(info.st_mode):
                entries[key] = (*meta, os.readlink(path))
            else:
                entries[key] = meta
    return entries


def old_node(root: Path) -> None:
    """A node with older versions of two of the files and no subnet.env (no run/ at all)."""
    for relative, content, mode in (
        ("etc/cni/net.d/10-flannel.conflist", "old conflist\n", 0o644),
        ("etc/pyflannel/pyflanneld.env", "FLANNELD_IFACE=eth0\n", 0o640),
    ):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        path.chmod(mode)


@pytest.fixture(params=[0o077, 0o000], ids=["umask-077", "umask-000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


# --- what is written -------------------------------------------------------------------------


@pytest.mark.usefixtures("umask")
def test_files_and_new_directories_get_exact_modes(tmp_path: Path) -> None:
    plan = sync_files(NODE, root=str(tmp_path))
    assert plan.changed
    assert [(f.path, f.reasons) for f in plan.files] == [
        ("etc/cni/net.d/10-flannel.conflist", (Reason.CREATED,)),
        ("/etc/pyflannel/pyflanneld.env", (Reason.CREATED,)),
        ("etc/systemd/system/pyflanneld.service", (Reason.CREATED,)),
        ("run/flannel/subnet.env", (Reason.CREATED,)),
    ]
    got = {key: entry[1] for key, entry in listing(tmp_path).items()}
    assert got == {
        "etc": 0o755,
        "etc/cni": 0o755,
        "etc/cni/net.d": 0o755,
        "etc/cni/net.d/10-flannel.conflist": 0o644,
        "etc/pyflannel": 0o755,
        "etc/pyflannel/pyflanneld.env": 0o600,
        "etc/systemd": 0o755,
        "etc/systemd/system": 0o755,
        "etc/systemd/system/pyflanneld.service": 0o644,
        "run": 0o755,
        "run/flannel": 0o755,
        "run/flannel/subnet.env": 0o644,
    }
    assert (tmp_path / "etc/pyflannel/pyflanneld.env").read_text() == (
        "FLANNELD_ETCD_PASSWORD=s3cret\n"
    )


def test_a_second_sync_changes_nothing(tmp_path: Path) -> None:
    sync_files(NODE, root=str(tmp_path))
    before = listing(tmp_path)
    again = sync_files(NODE, root=str(tmp_path))
    assert not again.changed
    assert again.changes == ()
    assert again.diff() == []
    assert listing(tmp_path) == before


def test_only_what_differs_is_rewritten_and_the_reasons_say_why(tmp_path: Path) -> None:
    sync_files(NODE, root=str(tmp_path))
    service = tmp_path / "etc/systemd/system/pyflanneld.service"
    subnet_env = tmp_path / "run/flannel/subnet.env"
    conflist = tmp_path / "etc/cni/net.d/10-flannel.conflist"
    service.chmod(0o755)
    subnet_env.write_text("FLANNEL_MTU=1400\n")
    conflist.write_text("edited by hand\n")
    conflist.chmod(0o600)
    untouched = listing(tmp_path)["etc/pyflannel/pyflanneld.env"]

    plan = sync_files(NODE, root=str(tmp_path))
    assert {f.path: f.reasons for f in plan.changes} == {
        "etc/cni/net.d/10-flannel.conflist": (Reason.CONTENT, Reason.MODE),
        "etc/systemd/system/pyflanneld.service": (Reason.MODE,),
        "run/flannel/subnet.env": (Reason.CONTENT,),
    }
    after = listing(tmp_path)
    assert after["etc/pyflannel/pyflanneld.env"] == untouched
    assert stat.S_IMODE(service.stat().st_mode) == 0o644
    assert subnet_env.read_text() == "FLANNEL_MTU=1450\n"
    assert not sync_files(NODE, root=str(tmp_path)).changed


def test_check_mode_reports_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    plan = sync_files(NODE, root=str(root), check=True)
    assert len(plan.changes) == 4
    assert not root.exists()

    old_node(root)
    before = listing(root)
    plan = sync_files(NODE, root=str(root), check=True)
    assert {f.path: f.reasons for f in plan.changes} == {
        "etc/cni/net.d/10-flannel.conflist": (Reason.CONTENT,),
        "/etc/pyflannel/pyflanneld.env": (Reason.CONTENT, Reason.MODE),
        "etc/systemd/system/pyflanneld.service": (Reason.CREATED,),
        "run/flannel/subnet.env": (Reason.CREATED,),
    }
    assert listing(root) == before


def test_diff_for_ansible(tmp_path: Path) -> None:
    old_node(tmp_path)
    files = {
        **NODE,
        "/etc/pyflannel/pyflanneld.env": WantedFile("FLANNELD_ETCD_PASSWORD=s3cret\n", 0o600, sensitive=True),
    }  # fmt: skip
    plan = plan_files(files, root=str(tmp_path))
    conflist, env, service, _ = plan.files
    target = str(tmp_path / "etc/cni/net.d/10-flannel.conflist")
    assert conflist.diff() == [
        {
            "before": "old conflist\n",
            "after": '{"name": "cbr0"}\n',
            "before_header": target,
            "after_header": target,
        }
    ]
    text, attributes = env.diff()
    assert (text["before"], text["after"]) == (
        "(sensitive content, 20 bytes)\n",
        "(sensitive content, 30 bytes)\n",
    )
    uid, gid = os.getuid(), os.getgid()
    assert (attributes["before"], attributes["after"]) == (
        {"mode": "0640", "owner": uid, "group": gid},
        {"mode": "0600", "owner": uid, "group": gid},
    )
    assert service.diff()[0]["before"] == ""
    assert plan.diff() == [entry for f in plan.files for entry in f.diff()]
    assert "s3cret" not in repr(plan.diff())


@pytest.mark.root
def test_owner_and_group_by_name_or_id_and_a_rewrite_keeps_the_owner(tmp_path: Path) -> None:
    wanted = {
        "a": WantedFile("a\n", 0o640, owner="nobody", group="nogroup"),
        "b": WantedFile("b\n", 0o644),
    }
    sync_files(wanted, root=str(tmp_path))
    a, b = tmp_path / "a", tmp_path / "b"
    assert (a.stat().st_uid, a.stat().st_gid) == (65534, 65534)
    os.chown(b, 65534, 65534)
    a_before = listing(tmp_path)["a"]

    wanted["b"] = WantedFile("b2\n", 0o644)
    plan = sync_files(wanted, root=str(tmp_path))
    assert [f.path for f in plan.changes] == ["b"]
    assert (b.stat().st_uid, b.stat().st_gid, b.read_text()) == (65534, 65534, "b2\n")
    assert listing(tmp_path)["a"] == a_before

    plan = sync_files({**wanted, "a": WantedFile("a\n", 0o640, owner=0, group=0)}, str(tmp_path))
    assert [(f.path, f.reasons) for f in plan.changes] == [("a", (Reason.OWNER,))]
    assert (a.stat().st_uid, a.stat().st_gid) == (0, 0)


# --- what cannot be written ------------------------------------------------------------------


def test_a_file_where_a_directory_must_be(tmp_path: Path) -> None:
    """The issue's case: out/etc/pyflannel is a file; found before anything is written."""
    old_node(tmp_path / "x")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/pyflannel").write_text("in the way")
    before = listing(tmp_path)
    with pytest.raises(FilesError) as err:
        sync_files(NODE, root=str(tmp_path))
    assert str(err.value) == (
        f"{tmp_path}/etc/pyflannel/pyflanneld.env: {tmp_path}/etc/pyflannel is not a directory"
    )
    with pytest.raises(FilesError):
        sync_files(NODE, root=str(tmp_path), check=True)
    assert listing(tmp_path) == before


@pytest.mark.parametrize(
    ("obstacle", "message"),
    [
        (lambda p: p.mkdir(), "a directory is in the way"),
        (lambda p: p.symlink_to("/etc/hostname"), "a symbolic link is in the way"),
        (lambda p: os.mkfifo(p), "a special file is in the way"),
    ],
    ids=["directory", "symlink", "fifo"],
)
def test_something_else_in_the_place_of_a_file(tmp_path: Path, obstacle: Any, message: str) -> None:
    (tmp_path / "run/flannel").mkdir(parents=True)
    obstacle(tmp_path / "run/flannel/subnet.env")
    before = listing(tmp_path)
    with pytest.raises(FilesError) as err:
        sync_files(NODE, root=str(tmp_path))
    assert str(err.value) == f"{tmp_path}/run/flannel/subnet.env: {message}"
    assert listing(tmp_path) == before


def test_bad_requests(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not name a file below the root"):
        plan_files({"etc/../../escape": WantedFile("", 0o644)}, str(tmp_path))
    with pytest.raises(ValueError, match="does not name a file below the root"):
        plan_files({"/": WantedFile("", 0o644)}, str(tmp_path))
    with pytest.raises(ValueError, match="are the same file"):
        plan_files({"/a/b": WantedFile("", 0o644), "a//b": WantedFile("", 0o644)}, str(tmp_path))
    with pytest.raises(ValueError, match="is not a file mode"):
        WantedFile("", 0o10644)
    with pytest.raises(FilesError, match="no such user: no-such-user-here"):
        plan_files({"a": WantedFile("", 0o644, owner="no-such-user-here")}, str(tmp_path))
    assert list(tmp_path.iterdir()) == []


# --- failing part-way: the tree is left exactly as it was ------------------------------------


def fails_and_changes_nothing(root: Path, files: dict[str, WantedFile], problem: str) -> None:
    before = listing(root)
    with pytest.raises(FilesError) as err:
        sync_files(files, root=str(root))
    assert str(err.value) == f"{problem}; nothing was changed"
    assert listing(root) == before


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "pyflannel-test", str(mount_point)],
        check=True,
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


@pytest.mark.root
def test_a_full_disk_part_way_changes_nothing(tiny_tmpfs: Path) -> None:
    old_node(tiny_tmpfs)
    # Sorted last, so the other files are staged (and run/ created) before the disk is full.
    files = {**NODE, "var/lib/big": WantedFile(b"x" * 256 * 1024, 0o644)}
    fails_and_changes_nothing(
        tiny_tmpfs, files, f"{tiny_tmpfs}/var/lib/big: no space left on device"
    )


@pytest.fixture
def read_only_etc_systemd(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "etc/systemd/system"
    directory.mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(directory), str(directory)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(directory)], check=True)
        yield tmp_path
    finally:
        subprocess.run(["umount", str(directory)], check=True)


@pytest.mark.root
def test_a_read_only_directory_part_way_changes_nothing(read_only_etc_systemd: Path) -> None:
    root = read_only_etc_systemd
    old_node(root)
    fails_and_changes_nothing(
        root, NODE, f"{root}/etc/systemd/system/pyflanneld.service: read-only file system"
    )


def failing_renames(monkeypatch: pytest.MonkeyPatch, *failing: int) -> list[tuple[str, str]]:
    """os.rename fails (EIO) on the given calls, counted from 1; returns every call."""
    calls: list[tuple[str, str]] = []
    real_rename = os.rename

    def rename(source: str, target: str) -> None:
        calls.append((source, target))
        if len(calls) in failing:
            raise OSError(5, os.strerror(5), source, None, target)
        real_rename(source, target)

    monkeypatch.setattr(ops_files.os, "rename", rename)
    return calls


def test_a_failed_rename_puts_back_the_files_already_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_node(tmp_path)
    before = listing(tmp_path)
    calls = failing_renames(monkeypatch, 3)  # after the conflist and the env file
    with pytest.raises(FilesError) as err:
        sync_files(NODE, root=str(tmp_path))
    assert str(err.value) == (
        f"{tmp_path}/etc/systemd/system/pyflanneld.service: input/output error; "
        "the files already written were put back, nothing was changed"
    )
    # the same inodes are back (mtime and all), the new directories are gone
    assert listing(tmp_path) == before
    assert [target for _, target in calls[3:]] == [
        f"{tmp_path}/etc/pyflannel/pyflanneld.env",
        f"{tmp_path}/etc/cni/net.d/10-flannel.conflist",
    ]


def test_when_putting_back_fails_too_the_original_is_kept_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_node(tmp_path)
    before = listing(tmp_path)
    failing_renames(monkeypatch, 3, 4)  # the service's rename, then putting the env file back
    with pytest.raises(FilesError) as err:
        sync_files(NODE, root=str(tmp_path))
    message = str(err.value)
    env = f"{tmp_path}/etc/pyflannel/pyflanneld.env"
    assert message.startswith(
        f"{tmp_path}/etc/systemd/system/pyflanneld.service: input/output error; putting back "
        f"the files already written failed: {env}: input/output error (the original is kept as "
        f"{tmp_path}/etc/pyflannel/.pyflanneld.env."
    )
    kept = Path(message.rsplit(" as ", 1)[1].rstrip(")"))
    after = listing(tmp_path)
    # Nothing is lost: the original inode is under the kept name, the env file stays new ...
    assert after.pop(str(kept.relative_to(tmp_path))) == before.pop("etc/pyflannel/pyflanneld.env")
    assert after.pop("etc/pyflannel/pyflanneld.env")[-1] == b"FLANNELD_ETCD_PASSWORD=s3cret\n"
    # ... and everything else is as it was: the conflist put back, no temp files, no run/.
    assert after == before


def test_apply_of_an_unchanged_plan_touches_nothing(tmp_path: Path) -> None:
    sync_files(NODE, root=str(tmp_path))
    before = listing(tmp_path)
    apply_files(plan_files(NODE, root=str(tmp_path)))
    assert listing(tmp_path) == before
