"""The host image is keyed by its recipe: the same recipe gives the same tag, a change a new one."""

from __future__ import annotations

import pytest

from pyflannel_lab import rootfs
from pyflannel_lab.errors import LabError
from pyflannel_lab.hosts import host_releases


def test_the_key_follows_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    key = rootfs.recipe_key()
    assert rootfs.recipe_key() == key
    assert rootfs.image_tag() == f"{rootfs.IMAGE_NAME}:bookworm-{key[:16]}"
    monkeypatch.setattr(rootfs, "PACKAGES", (*rootfs.PACKAGES, "tcpdump"))
    with_tcpdump = rootfs.recipe_key()
    assert with_tcpdump != key
    monkeypatch.setattr(rootfs, "FILES", {**rootfs.FILES, "/etc/motd": (0o644, "hi\n")})
    assert rootfs.recipe_key() not in (key, with_tcpdump)


def test_the_order_of_packages_does_not_matter(monkeypatch: pytest.MonkeyPatch) -> None:
    key = rootfs.recipe_key()
    monkeypatch.setattr(rootfs, "PACKAGES", tuple(reversed(rootfs.PACKAGES)))
    assert rootfs.recipe_key() == key


def test_the_roles_packages_are_baked_in() -> None:
    for package in ("etcd-server", "etcd-client", "containernetworking-plugins", "python3-apt"):
        assert package in rootfs.PACKAGES


def test_each_release_has_its_own_recipe_and_tag() -> None:
    bookworm, trixie = rootfs.recipe_key("bookworm"), rootfs.recipe_key("trixie")
    assert bookworm != trixie
    assert rootfs.image_tag("trixie") == f"{rootfs.IMAGE_NAME}:trixie-{trixie[:16]}"
    assert rootfs.recipe_key() == bookworm


def test_an_unknown_release_is_named() -> None:
    with pytest.raises(LabError, match=r"'sid'.*bookworm, trixie"):
        rootfs.ensure_image(release="sid")


def test_host_releases_one_for_all_or_one_per_host() -> None:
    assert host_releases([], 2) == ["bookworm", "bookworm"]
    assert host_releases(["trixie"], 3) == ["trixie"] * 3
    assert host_releases(["bookworm", "trixie"], 2) == ["bookworm", "trixie"]
    with pytest.raises(LabError, match="2 releases for 3 hosts"):
        host_releases(["bookworm", "trixie"], 3)
