"""``python -m pyflannel_lab``: errors are one line on stderr and exit status 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyflannel_lab.__main__ import main
from pyflannel_lab.paths import CACHE_ENV, INVENTORY_ENV, STATE_ENV


@pytest.fixture(autouse=True)
def scratch_lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(STATE_ENV, str(tmp_path / "state"))
    monkeypatch.setenv(INVENTORY_ENV, str(tmp_path / "hosts.yml"))
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path


def test_status_without_a_lab(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hosts", "status"]) == 1
    assert capsys.readouterr().out == "no lab is up\n"


def test_a_bad_host_count_is_refused_before_anything_happens(
    scratch_lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["hosts", "up", "--hosts", "0"]) == 1
    assert capsys.readouterr().err == "lab: --hosts must be 1 to 50, not 0\n"
    assert list(scratch_lab.iterdir()) == []


def test_more_etcd_members_than_hosts_are_refused_before_anything_happens(
    scratch_lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["hosts", "up", "--hosts", "2", "--etcd-members", "3"]) == 1
    assert capsys.readouterr().err == "lab: --etcd-members must be 1 to 2 (the hosts), not 3\n"
    assert list(scratch_lab.iterdir()) == []


def test_podman_env_points_at_the_cache(
    scratch_lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["podman-env"]) == 0
    podman = scratch_lab / "cache" / "podman"
    assert capsys.readouterr().out == (
        f"export CONTAINERS_CONF={podman}/containers.conf\n"
        f"export CONTAINERS_STORAGE_CONF={podman}/storage.conf\n"
    )
    assert 'runtime = "runc"' in (podman / "containers.conf").read_text()


@pytest.mark.parametrize(
    "argv", [["hosts", "add"], *(["hosts", a, "node2"] for a in ("stop", "start", "remove"))]
)
def test_changing_hosts_needs_a_lab(
    argv: list[str], scratch_lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    assert capsys.readouterr().err == "lab: no lab is up\n"
    assert not (scratch_lab / "hosts.yml").exists()


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--release", "sid"], "no lab image for Debian 'sid'; the lab has bookworm, trixie"),
        (["--release", "bookworm,trixie", "--hosts", "3"], "2 releases for 3 hosts"),
        (["--release", "bookworm,,trixie"], "no lab image for Debian ''"),
    ],
)
def test_releases_the_lab_has_no_image_for_or_too_few_are_refused_before_anything_happens(
    argv: list[str], error: str, scratch_lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["hosts", "up", *argv]) == 1
    assert capsys.readouterr().err.startswith(f"lab: {error}")
    assert list(scratch_lab.iterdir()) == []
