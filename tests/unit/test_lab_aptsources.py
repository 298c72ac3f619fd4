"""The lab finds the Debian mirror in the machine's apt sources, in both formats apt reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyflannel_lab.aptsources import (
    MIRROR_ENV,
    debian_mirror,
    parse_deb822,
    parse_one_line,
    pick_mirror,
)
from pyflannel_lab.errors import LabError

DEB822 = """\
Types: deb
# a comment inside the stanza
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_deb822_stanzas() -> None:
    first, second = parse_deb822(DEB822)
    assert first.uris == ("http://mirror.example/debian",)
    assert first.suites == ("bookworm", "bookworm-updates")
    assert second.suites == ("bookworm-security",)
    assert pick_mirror([first, second], "bookworm") == "http://mirror.example/debian"


def test_deb822_continuation_lines_and_disabled_stanzas() -> None:
    text = (
        "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\n"
        "Components: main\n\n"
        "Types: deb deb-src\nURIs:\n http://a.example/debian\n http://b.example/debian\n"
        "Suites: bookworm\nComponents: contrib\n main\n"
    )
    (source,) = parse_deb822(text)
    assert source.uris == ("http://a.example/debian", "http://b.example/debian")
    assert source.components == ("contrib", "main")
    assert pick_mirror([source], "bookworm") == "http://a.example/debian"


def test_one_line_format_with_options_and_comments() -> None:
    text = (
        "# deb http://commented.example/debian bookworm main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] https://m.example/debian bookworm main contrib # tail\n"
    )
    sources = list(parse_one_line(text))
    assert [s.types for s in sources] == [("deb-src",), ("deb",)]
    assert pick_mirror(sources, "bookworm") == "https://m.example/debian"


def test_other_suites_components_and_schemes_are_not_the_mirror() -> None:
    text = (
        "deb https://vendor.example/apt cloud-sdk-bookworm main\n"
        "deb http://m.example/debian bookworm contrib\n"
        "deb cdrom:[Debian]/ bookworm main\n"
    )
    assert pick_mirror(parse_one_line(text), "bookworm") is None


def test_reads_files_as_apt_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "a-vendor.list.disabled").write_text("deb http://ignored.example/d bookworm main\n")
    (parts / "debian.sources").write_text(DEB822)
    assert debian_mirror("bookworm", tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text("deb http://first.example/debian bookworm main\n")
    assert debian_mirror("bookworm", tmp_path) == "http://first.example/debian"


def test_no_mirror_names_the_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    with pytest.raises(LabError, match=MIRROR_ENV):
        debian_mirror("bookworm", tmp_path)
    monkeypatch.setenv(MIRROR_ENV, "http://override.example/debian")
    assert debian_mirror("bookworm", tmp_path) == "http://override.example/debian"


def test_a_release_without_an_entry_comes_from_the_machines_own_mirror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    (tmp_path / "sources.list").write_text(
        "deb https://vendor.example/apt nodistro main\n"
        "deb http://security.example/debian-security bookworm-security main\n"
        "deb http://mirror.example/debian bookworm main\n"
    )
    os_release = tmp_path / "os-release"
    os_release.write_text(
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_CODENAME=bookworm\n'
    )
    assert debian_mirror("trixie", tmp_path, os_release) == "http://mirror.example/debian"
    with pytest.raises(LabError, match="'trixie'"):
        debian_mirror("trixie", tmp_path, tmp_path / "no-os-release")
    (tmp_path / "sources.list").write_text(
        "deb http://mirror.example/debian bookworm main\ndeb http://new.example/debian trixie main\n"
    )
    assert debian_mirror("trixie", tmp_path, os_release) == "http://new.example/debian"
    with pytest.raises(LabError, match="'trixie'"):
        debian_mirror("trixie", tmp_path / "empty", os_release)
