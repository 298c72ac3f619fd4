"""pyflannel.network.ipam: the node's report in check mode, leaks released in a normal
run (changed only then), and a refusal to guess when nobody knows the live containers. Runs
Debian's bridge and host-local (no namespaces needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip(
    "ansible_collections.pyflannel.network.plugins.module_utils.runtime",
    reason="needs the pyflannel.network collection layout (tests/unit/plugins/conftest.py)",
)

from ansible_collections.pyflannel.network.plugins.modules import ipam

from tests.unit.cni_site import PLUGINS, CniSite

from ..conftest import RunModule

pytestmark = pytest.mark.skipif(
    not (PLUGINS / "host-local").exists(), reason="containernetworking-plugins missing"
)

SMALL_SUBNET_ENV = "FLANNEL_NETWORK=10.5.0.0/16\nFLANNEL_SUBNET=10.5.3.1/29\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"


@pytest.fixture
def site(tmp_path: Path) -> CniSite:
    """A /29 (five addresses) holding live, gone (state file left) and lost (nothing left)."""
    site = CniSite(tmp_path, SMALL_SUBNET_ENV)
    for container_id in ("live", "gone"):
        site.attach(container_id)
    site.attach("lost", saved=False)
    return site


def args(site: CniSite, **extra: object) -> dict[str, object]:
    return {
        "conflist": str(site.write_conflist()),
        "cni_path": str(site.bin),
        "valid_containers": ["live"],
        **extra,
    }


def test_check_mode_reports_and_predicts(site: CniSite, run_module: RunModule) -> None:
    before = site.allocated()
    result = run_module(ipam.main, args(site), check=True)
    assert result["changed"] and not result["failed"]
    assert site.allocated() == before and site.saved() == ["gone", "live"]
    assert result["usage"] == [
        {
            "family": "ipv4",
            "subnet": "10.5.3.0/29",
            "capacity": 5,
            "used": 3,
            "free": 2,
            "leaked": 2,
        }
    ]
    assert result["gc"]["dry_run"] is True
    assert sorted(r["container_id"] for r in result["gc"]["released"]) == ["gone", "lost"]
    assert {a["container_id"]: a["reasons"] for a in result["allocations"]} == {
        "live": [],
        "gone": ["container unknown to the runtime"],
        "lost": ["no flannel state file", "container unknown to the runtime"],
    }


def test_normal_run_releases_then_reports_no_change(site: CniSite, run_module: RunModule) -> None:
    result = run_module(ipam.main, args(site))
    assert result["changed"] and not result["failed"]
    assert site.holders() == {"live"} and site.saved() == ["live"]
    assert [a["container_id"] for a in result["allocations"]] == ["live"]  # after the release
    assert result["usage"][0]["free"] == 4
    again = run_module(ipam.main, args(site))
    assert not again["changed"]
    assert again["gc"]["released"] == []


def test_nearly_exhausted_subnet_warns(site: CniSite, run_module: RunModule) -> None:
    site.attach("live2")
    site.attach("live3")
    valid = ["live", "live2", "live3", "gone", "lost"]
    result = run_module(ipam.main, args(site, valid_containers=valid), check=True)
    assert not result["changed"]
    warning = (
        "pod subnet 10.5.3.0/29 is nearly exhausted: 0 of 5 addresses free,"
        " and 1 of the 5 in use look leaked"  # lost: no state file, though its container lives
    )
    assert result["warnings"] == [warning]


def test_refuses_to_guess_the_live_containers(
    site: CniSite, run_module: RunModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(site.root / "no-runtimes-here"))
    before = site.allocated()
    reported = run_module(ipam.main, args(site, valid_containers=None), check=True)
    assert not reported["changed"] and not reported["failed"]
    assert "gc" not in reported
    assert reported["runtime"] == {"sources": [], "containers": None}
    failed = run_module(ipam.main, args(site, valid_containers=None))
    assert failed["failed"]
    assert "cannot tell which containers are gone" in failed["msg"]
    assert site.allocated() == before
