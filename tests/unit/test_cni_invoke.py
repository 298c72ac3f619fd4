"""How a delegate plugin is found in CNI_PATH (libcni's invoke.FindInPath)."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.cni.invoke import InvokeError, clean_join, find_in_path

parts = st.lists(st.sampled_from(["", "/", "//", "a", "b", ".", "..", "..."]), max_size=8).map(
    "".join
)


@given(parts, parts.filter(lambda name: not name.startswith("/")))
def test_clean_join_is_go_filepath_join(directory: str, name: str) -> None:
    # posixpath keeps exactly two leading slashes, which Go's Clean folds into one
    expected = posixpath.normpath(posixpath.join(directory, name) if directory else name)
    if expected.startswith("//"):
        expected = expected[1:]
    assert clean_join(directory, name) == expected


def test_clean_join_keeps_an_absolute_name_under_the_directory() -> None:
    assert clean_join("/opt/cni/bin", "/bridge") == "/opt/cni/bin/bridge"
    assert clean_join("/opt/cni/bin/", "../../x") == "/opt/x"
    assert clean_join("", "") == "."


def test_find_in_path_takes_the_first_regular_file(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "bridge").mkdir()  # a directory of that name is no plugin
    (second / "bridge").write_text("")
    os.symlink(second / "bridge", first / "linked")
    cni_path = f"{first}:{second}//"
    assert find_in_path("bridge", cni_path) == f"{second}/bridge"
    assert find_in_path("linked", cni_path) == f"{first}/linked"
    with pytest.raises(InvokeError, match=r'failed to find plugin "nope" in path \['):
        find_in_path("nope", cni_path)
    with pytest.raises(InvokeError, match="invalid plugin name"):
        find_in_path("a/b", cni_path)
