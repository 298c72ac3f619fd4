"""The host image is keyed by its recipe: the same recipe gives the same tag, a change a new one."""

from __future__ import annotations

import pytest

from pyflannel_runtime.lab import rootfs


def test_the_key_follows_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    key = rootfs.recipe_key()
    assert rootfs.recipe_key() == key
    assert rootfs.image_tag() == f"{rootfs.IMAGE_NAME}:{key[:16]}"
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
