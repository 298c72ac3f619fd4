"""fsutil's path helpers, which stand in for os.path and os.makedirs on the CNI plugin's path."""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.fsutil import make_directories, split_path, write_atomic

paths = st.lists(st.sampled_from(["", "/", "//", "a", "b.c", ".", "..", "x y"]), max_size=8).map(
    "".join
)


@given(paths)
def test_split_path_is_os_path_split(path: str) -> None:
    assert split_path(path) == posixpath.split(path)


def test_make_directories_makes_parents_with_the_default_mode(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c"
    old = os.umask(0o022)
    try:
        make_directories(str(target), 0o700)
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o755
    make_directories(str(target), 0o700)  # already there: nothing to do
    make_directories(f"{target}/", 0o700)


def test_make_directories_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(FileExistsError):
        make_directories(str(tmp_path / "file"), 0o700)
    with pytest.raises(NotADirectoryError):
        make_directories(str(tmp_path / "file" / "below"), 0o700)


def test_write_atomic_with_a_relative_path_leaves_only_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write_atomic("plain", b"one", 0o640)
    (tmp_path / "sub").mkdir()
    write_atomic("sub/nested", b"two", 0o600)
    write_atomic(str(tmp_path / "sub") + "//absolute", b"three", 0o644)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["absolute", "nested", "plain", "sub"]
    assert stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o640
    assert (tmp_path / "sub" / "absolute").read_bytes() == b"three"
