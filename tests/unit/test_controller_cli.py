"""``python -m pyflannel_controller render``: one node's files from the cluster model, written
all or none, with exact modes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyflannel_controller.cli import build_parser, main

from .test_cli import GOLDEN, command_paths, tree


@pytest.fixture
def strict_umask() -> Iterator[None]:
    """A umask that would spoil any mode not set explicitly."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


# --- render ------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("strict_umask")
def test_render_writes_the_nodes_files_with_exact_modes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "root"
    code = main(
        [
            "render",
            "--model",
            str(GOLDEN / "cluster-dual-stack.yaml"),
            "--node",
            "server-0",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    modes = {
        str(p.relative_to(out)): stat.S_IMODE(p.stat().st_mode)
        for p in out.rglob("*")
        if p.is_file()
    }
    assert modes == {
        "etc/cni/net.d/10-flannel.conflist": 0o644,
        "etc/kube-flannel/net-conf.json": 0o644,
        "etc/pyflannel/pyflanneld.env": 0o600,
        "etc/systemd/system/pyflanneld.service": 0o644,
        "run/flannel/subnet.env": 0o644,
    }
    assert (out / "run/flannel/subnet.env").read_bytes() == (
        GOLDEN / "dual-stack-subnet.env"
    ).read_bytes()
    assert (out / "etc/cni/net.d/10-flannel.conflist").read_bytes() == (
        GOLDEN / "manifest-10-flannel.conflist"
    ).read_bytes()
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"{out / name}: created" for name in sorted(modes)]


def test_render_of_the_manifest_defaults_from_json(tmp_path: Path) -> None:
    model = tmp_path / "cluster.json"
    model.write_text(json.dumps({"nodes": {"node-1": None}}))
    out = tmp_path / "root"
    assert main(["render", "--model", str(model), "--node", "node-1", "--out", str(out)]) == 0
    for written, name in (
        ("etc/cni/net.d/10-flannel.conflist", "manifest-10-flannel.conflist"),
        ("etc/kube-flannel/net-conf.json", "manifest-net-conf.json"),
    ):
        assert (out / written).read_bytes() == (GOLDEN / name).read_bytes()
    assert not (out / "run").exists()  # the subnet is the controller's to assign


def test_render_replaces_existing_files_without_leftovers(tmp_path: Path) -> None:
    out = tmp_path / "root"
    conflist = out / "etc/cni/net.d/10-flannel.conflist"
    conflist.parent.mkdir(parents=True)
    conflist.write_text("old")
    conflist.chmod(0o600)
    args = ["render", "--model", str(GOLDEN / "cluster-dual-stack.yaml"), "--node", "agent-0"]
    assert main([*args, "--out", str(out)]) == 0
    assert conflist.read_bytes() == (GOLDEN / "manifest-10-flannel.conflist").read_bytes()
    assert stat.S_IMODE(conflist.stat().st_mode) == 0o644
    assert sorted(p.name for p in conflist.parent.iterdir()) == ["10-flannel.conflist"]


def test_a_second_render_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["render", "--model", str(GOLDEN / "cluster-dual-stack.yaml"), "--node", "server-0"]
    out = tmp_path / "root"
    assert main([*args, "--out", str(out)]) == 0
    first = capsys.readouterr().out.splitlines()
    written = tree(out)
    assert main([*args, "--out", str(out)]) == 0
    assert tree(out) == written
    assert capsys.readouterr().out.splitlines() == [
        line.replace(": created", ": unchanged") for line in first
    ]
    (out / "etc/pyflannel/pyflanneld.env").chmod(0o644)
    assert main([*args, "--out", str(out)]) == 0
    assert f"{out}/etc/pyflannel/pyflanneld.env: mode" in capsys.readouterr().out.splitlines()


def test_a_render_that_cannot_finish_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 9 item 7: out/etc/pyflannel is a file, so the env file cannot be written; the
    conflist and net-conf.json (sorted before it) were written all the same."""
    out = tmp_path / "root"
    conflist = out / "etc/cni/net.d/10-flannel.conflist"
    conflist.parent.mkdir(parents=True)
    conflist.write_text("old")
    (out / "etc/pyflannel").write_text("in the way")
    before = tree(out)
    args = ["render", "--model", str(GOLDEN / "cluster-dual-stack.yaml"), "--node", "server-0"]
    assert main([*args, "--out", str(out)]) == 1
    assert tree(out) == before
    out_text, err_text = capsys.readouterr()
    assert out_text == ""
    assert err_text == (
        f"cannot write the files: {out}/etc/pyflannel/pyflanneld.env: "
        f"{out}/etc/pyflannel is not a directory\n"
    )


BAD_MODELS = {
    "typo": (
        "flannel_network: 10.42.0.0/16\nnodes:\n  n1:\n    interfce: eth1\n",
        "nodes.n1.interfce: unknown setting (did you mean interface?)",
    ),
    "overlap": (
        "nodes:\n  n1: {subnet: 10.244.1.0/24}\n  n2: {subnet: 10.244.1.0/24}\n",
        "nodes.n2.subnet: 10.244.1.0/24 overlaps nodes.n1.subnet 10.244.1.0/24",
    ),
    "rule": (
        "flannel_backend_type: host-gw\nflannel_vxlan_vni: 3\nnodes: {n1: {}}\n",
        "flannel_vxlan_vni: only used with vxlan (backend is host-gw)",
    ),
    "unknown node": ("nodes: {n2: {}}\n", "nodes.n1: not in the cluster model (nodes: n2)"),
    "not yaml": ("nodes: [n1\n", "not valid YAML"),
    "not a mapping": ("- n1\n", "the cluster model must be a mapping of settings"),
}


@pytest.mark.parametrize("existing", [True, False], ids=["out-exists", "out-absent"])
@pytest.mark.parametrize("case", sorted(BAD_MODELS))
def test_bad_input_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, existing: bool
) -> None:
    content, message = BAD_MODELS[case]
    model = tmp_path / "cluster.yaml"
    model.write_text(content)
    out = tmp_path / "root"
    if existing:
        (out / "etc/cni/net.d").mkdir(parents=True)
        (out / "etc/cni/net.d/10-flannel.conflist").write_text("kept")
    before = tree(out)
    assert main(["render", "--model", str(model), "--node", "n1", "--out", str(out)]) == 1
    assert tree(out) == before
    out_text, err_text = capsys.readouterr()
    assert out_text == ""
    assert message in err_text
    assert err_text.startswith(str(model))


def test_render_of_a_missing_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "root"
    missing = tmp_path / "absent.yaml"
    assert main(["render", "--model", str(missing), "--node", "n1", "--out", str(out)]) == 1
    assert not out.exists()
    assert capsys.readouterr().err.startswith(f"{missing}: cannot read the cluster model: ")


def test_render_quiet_writes_the_files_and_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "root"
    args = ["render", "--model", str(GOLDEN / "cluster-dual-stack.yaml"), "--node", "server-0"]
    assert main([*args, "--out", str(out), "-q"]) == 0
    assert capsys.readouterr() == ("", "")
    assert (out / "etc/cni/net.d/10-flannel.conflist").exists()
    assert main([*args, "--out", str(out), "--quiet"]) == 0
    assert capsys.readouterr() == ("", "")


def test_every_controller_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    paths = command_paths(build_parser())
    assert ("render",) in paths
    for path in paths:
        assert main([*path, "--help"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: {' '.join(('python -m pyflannel_controller', *path))} ")


def test_the_module_runs_as_the_controller_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pyflannel_controller", "render", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m pyflannel_controller render ")
