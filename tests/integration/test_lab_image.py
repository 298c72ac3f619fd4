"""The host image cache: built once per recipe however many callers ask at once, kept per recipe.

The rootfs here is a busybox one (the Debian build itself runs in test_lab_hosts.py); what is
under test is the cache: the lock, the recipe key, the podman import and the pruning, against
real podman storage in a scratch directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from pyflannel_lab import rootfs
from pyflannel_lab.aptsources import MIRROR_ENV
from pyflannel_lab.podman import Podman

pytestmark = [pytest.mark.root, pytest.mark.podman]


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    if shutil.which("podman") is None or not Path("/bin/busybox").exists():
        pytest.skip("needs podman and busybox-static")
    monkeypatch.setenv(MIRROR_ENV, "http://mirror.invalid/debian")
    built: list[Path] = []

    def busybox_rootfs(target: Path, release: str, mirror: str, cache: Path) -> None:
        built.append(target)
        (target / "bin").mkdir(parents=True)
        shutil.copy("/bin/busybox", target / "bin/busybox")
        subprocess.run(
            ["chroot", str(target), "/bin/busybox", "--install", "-s", "/bin"], check=True
        )

    monkeypatch.setattr(rootfs, "build_rootfs", busybox_rootfs)
    return built


def lab_images(cache: Path) -> list[str]:
    listing = Podman(cache).run(
        "images", "--format", "json", "--filter", f"label={rootfs.RECIPE_LABEL}"
    )
    return sorted(name for image in json.loads(listing.stdout) for name in image["Names"])


def test_concurrent_callers_share_one_build(tmp_path: Path, builds: list[Path]) -> None:
    tags: list[str] = []
    callers = [
        threading.Thread(target=lambda: tags.append(rootfs.ensure_image(tmp_path)))
        for _ in range(3)
    ]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()

    assert tags == [rootfs.image_tag()] * 3
    assert len(builds) == 1
    assert not builds[0].exists()  # the rootfs tree goes once imported
    assert lab_images(tmp_path) == [rootfs.image_tag()]
    assert rootfs.ensure_image(tmp_path) == rootfs.image_tag()
    assert len(builds) == 1


def test_each_recipe_gets_its_own_image_and_the_newest_three_of_a_release_stay(
    tmp_path: Path, builds: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    trixie = rootfs.ensure_image(tmp_path, release="trixie")
    tags = []
    for extra in ("tcpdump", "curl", "less", "vim"):
        monkeypatch.setattr(rootfs, "PACKAGES", (*rootfs.PACKAGES, extra))
        tags.append(rootfs.ensure_image(tmp_path))
    assert len({trixie, *tags}) == 5
    assert len(builds) == 5
    # The other release's image is not one of the bookworm recipes pruned.
    assert lab_images(tmp_path) == sorted([*tags[1:], trixie])
