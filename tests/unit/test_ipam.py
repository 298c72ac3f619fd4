"""``pyflannel ipam``: usage math and leak classification (pure), the runtimes' answers, and the
commands end to end against Debian's bridge and host-local (no namespaces needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyflannel_runtime.cli.main import main
from pyflannel_runtime.cni.hostlocal_store import Allocation, address_pool
from pyflannel_runtime.ipam.node import (
    IpamError,
    PodAddresses,
    classify,
    ipam_usage,
    load_target,
    pod_addresses,
)
from pyflannel_runtime.ipam.runtimes import ask_runtimes
from tests.unit.cni_site import PLUGINS, CniSite

CI = settings(deadline=None, suppress_health_check=list(HealthCheck), max_examples=200)

pytestmark = pytest.mark.skipif(
    not (PLUGINS / "host-local").exists(), reason="containernetworking-plugins missing"
)

# --- pure ---------------------------------------------------------------------------------------


@CI
@given(
    lasts=st.sets(st.integers(0, 255), max_size=40),
    length=st.integers(24, 30),
    leaked_share=st.integers(0, 3),
)
def test_usage_counts_the_pool_only(lasts: set[int], length: int, leaked_share: int) -> None:
    allocations = [Allocation(f"10.7.1.{n}", 4, f"c{n}", "eth0") for n in sorted(lasts)]
    allocations.append(Allocation("fd07::5", 6, "v6", "eth0"))
    leaked = {a for i, a in enumerate(allocations) if leaked_share and i % leaked_share == 0}
    subnet = f"10.7.1.0/{length}"
    [usage] = ipam_usage([subnet], allocations, leaked)
    pool = address_pool(subnet)
    inside = [a for a in allocations if pool.contains(a.address)]
    assert (usage.version, usage.subnet, usage.capacity) == (4, subnet, pool.capacity)
    assert usage.used == len(inside) <= usage.capacity
    assert usage.free == usage.capacity - usage.used
    assert usage.leaked == len(set(inside) & leaked) <= usage.used


def test_classification() -> None:
    rows = classify(
        [
            Allocation("10.7.1.2", 4, "live", "eth0"),
            Allocation("10.7.1.3", 4, "gone", "eth0"),
            Allocation("10.7.1.4", 4, "bare", "eth0"),
            Allocation("10.7.1.5", 4, "lost", "eth0"),
        ],
        saved=["live", "gone"],
        known=frozenset({"live", "bare"}),
    )
    assert [(r.reasons, r.releasable) for r in rows] == [
        ((), False),
        (("container unknown to the runtime",), True),
        (("no flannel state file",), False),  # the runtime still knows it: never released
        (("no flannel state file", "container unknown to the runtime"), True),
    ]
    unknown = classify([Allocation("10.7.1.2", 4, "x", "eth0")], saved=[], known=None)
    assert [(r.known, r.reasons, r.releasable) for r in unknown] == [
        (None, ("no flannel state file",), False)
    ]


# --- the conflist -------------------------------------------------------------------------------


def test_load_target_reads_the_flannel_plugin_as_libcni_runs_it(tmp_path: Path) -> None:
    site = CniSite(tmp_path)
    target = load_target(str(site.write_conflist()))
    assert target.network == "gcnet"
    assert target.state_dir == str(site.state)
    assert target.hostlocal_dir == str(site.store)
    assert target.conf.cni_version == "0.3.1"
    assert target.conf.subnet_file == str(site.subnet_env)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{", "is not JSON"),
        ('{"name": "n", "plugins": [{"type": "bridge"}]}', "has no plugin of type flannel"),
        ('{"name": "n", "plugins": [{"type": "flannel", "delegate": 1}]}', "cannot unmarshal"),
    ],
)
def test_unusable_conflists(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "x.conflist"
    if content is not None:
        path.write_text(content)
    with pytest.raises(IpamError, match=message):
        load_target(str(path))


# --- asking the runtimes ------------------------------------------------------------------------


def fake_tool(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / name).chmod(0o755)


def test_runtimes_are_asked_and_united(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_tool(bin_dir, "podman", 'echo "$*" > "$0.args"; printf "aaa\\nbbb\\n"')
    fake_tool(bin_dir, "crictl", 'echo "$*" > "$0.args"; echo ccc')
    view = ask_runtimes({"PATH": str(bin_dir)})
    assert view.sources == ("podman", "crictl")
    assert view.containers == {"aaa", "bbb", "ccc"}
    assert (bin_dir / "podman.args").read_text() == "ps --all --no-trunc --format {{.ID}}\n"
    assert (bin_dir / "crictl.args").read_text() == "pods --quiet --no-trunc\n"


def test_one_runtime_failing_leaves_it_unknown(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_tool(bin_dir, "podman", "echo aaa")
    fake_tool(bin_dir, "crictl", "echo 'connect: connection refused' >&2; exit 1")
    view = ask_runtimes({"PATH": str(bin_dir)})
    assert view.containers is None
    assert "connection refused" in view.problems[0]
    empty = ask_runtimes({"PATH": str(tmp_path / "none")})
    assert (empty.sources, empty.containers) == ((), None)


# --- the commands -------------------------------------------------------------------------------


@pytest.fixture
def leaky(tmp_path: Path) -> tuple[CniSite, Path]:
    """live (with state), bare (live, no state), gone (state, runtime forgot), lost (neither)."""
    site = CniSite(tmp_path)
    site.attach("live")
    site.attach("bare", saved=False)
    site.attach("gone")
    site.attach("lost", saved=False)
    site.state.joinpath("failedadd").write_bytes(site.delegate())  # ADD that got no address
    return site, site.write_conflist()


def test_ipam_report(leaky: tuple[CniSite, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, conflist = leaky
    args = ["ipam", "--conflist", str(conflist), "--valid-containers", "live, bare"]
    assert main([*args, "-o", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["subnets"] == ["10.5.3.0/24", "fd05:0:3::/64"]
    assert report["usage"] == [
        {
            "family": "ipv4",
            "subnet": "10.5.3.0/24",
            "capacity": 253,
            "used": 4,
            "free": 249,
            "leaked": 3,
        },
        {
            "family": "ipv6",
            "subnet": "fd05:0:3::/64",
            "capacity": 2**64 - 2,
            "used": 4,
            "free": 2**64 - 6,
            "leaked": 3,
        },
    ]
    by_container = {a["container_id"]: a for a in report["allocations"] if a["family"] == "ipv4"}
    assert {
        c: (a["state_file"], a["container_known"], a["releasable"]) for c, a in by_container.items()
    } == {
        "live": (True, True, False),
        "bare": (False, True, False),
        "gone": (True, False, True),
        "lost": (False, False, True),
    }
    assert report["stale_state_files"] == ["failedadd"]
    assert report["runtime"] == {"sources": ["--valid-containers"], "containers": 2}

    assert main(args) == 1
    table = capsys.readouterr().out
    assert "IPv4 10.5.3.0/24: 4 of 253 addresses in use, 249 free, 3 of them look leaked" in table
    assert (
        "6 allocation(s) look leaked; `pyflannel ipam gc` releases the 4 whose container is gone"
        in table
    )


def test_ipam_gc_dry_run_then_release(
    leaky: tuple[CniSite, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    site, conflist = leaky
    before = site.allocated()
    args = ["ipam", "gc", "--conflist", str(conflist), "--valid-containers", "live,bare"]
    assert main([*args, "--dry-run", "--cni-path", str(site.bin)]) == 0
    planned = capsys.readouterr().out
    assert planned.count("would release") == 3  # gone, failedadd (replays), lost
    assert site.allocated() == before

    assert main([*args, "--cni-path", str(site.bin), "-o", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert sorted(r["container_id"] for r in result["gc"]["released"]) == [
        "failedadd",
        "gone",
        "lost",
    ]
    assert result["gc"]["errors"] == []
    assert site.holders() == {"live", "bare"}
    assert site.saved() == ["live"]

    assert main([*args, "--cni-path", str(site.bin)]) == 0
    assert capsys.readouterr().out == "nothing to release\n"


def test_ipam_gc_refuses_without_knowing_the_live_containers(
    leaky: tuple[CniSite, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    site, conflist = leaky
    monkeypatch.setenv("PATH", str(site.root / "nothing-here"))
    before = site.allocated()
    assert main(["ipam", "gc", "--conflist", str(conflist), "--cni-path", str(site.bin)]) == 2
    assert "cannot tell which containers are gone" in capsys.readouterr().err
    assert site.allocated() == before
    # the report still works, with what it can tell
    assert main(["ipam", "--conflist", str(conflist)]) == 1
    assert "nobody could say which containers are gone" in capsys.readouterr().out


def test_ipam_of_a_missing_conflist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ipam", "--conflist", str(tmp_path / "none.conflist")]) == 2
    assert capsys.readouterr().err.startswith("pyflannel ipam: cannot read ")


def test_pod_addresses_count_without_asking_runtimes(leaky: tuple[CniSite, Path]) -> None:
    """What `pyflannel status` shows: only allocations no state file backs look leaked (bare,
    lost), since no runtime is asked whether a container is gone."""
    _, conflist = leaky
    found = pod_addresses(str(conflist))
    assert found.unchecked is None
    assert [(u.version, u.subnet, u.used, u.leaked) for u in found.usage] == [
        (4, "10.5.3.0/24", 4, 2),
        (6, "fd05:0:3::/64", 4, 2),
    ]


def test_pod_addresses_say_why_they_were_not_counted(tmp_path: Path) -> None:
    missing = tmp_path / "10-flannel.conflist"
    found = pod_addresses(str(missing))
    assert found == PodAddresses((), f"cannot read {missing}: No such file or directory")
    site = CniSite(tmp_path)
    conflist = site.write_conflist()
    Path(site.subnet_env).unlink()
    unknown = pod_addresses(str(conflist))
    assert unknown.usage == () and unknown.unchecked is not None
    assert unknown.unchecked.startswith("the node's subnet is unknown: ")
