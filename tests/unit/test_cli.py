"""The pyflannel operator CLI."""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyflannel_runtime.cli import build_parser, main

GOLDEN = Path(__file__).parent.parent / "golden"


@pytest.fixture
def strict_umask() -> Iterator[None]:
    """A umask that would spoil any mode not set explicitly."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def tree(root: Path) -> dict[str, tuple[int, bytes, int]] | None:
    """Every entry below root with its mode, content and mtime; None if root is absent."""
    if not root.exists():
        return None
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content = path.read_bytes() if path.is_file() else b""
        found[str(path.relative_to(root))] = (info.st_mode, content, info.st_mtime_ns)
    return found


# --- config check ----------------------------------------------------------------------------------


def test_config_check_prints_the_normalized_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "net-conf.json"
    conf.write_text('{"network": "10.3.0.0/16", "backend": {"type": "VXLAN", "vni": 4}}')
    assert main(["config", "check", str(conf)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.endswith("}\n")
    normalized = json.loads(out)
    # flannel's own test vector (flannel-io/flannel pkg/subnet/config_test.go) plus the backend
    # as written.
    assert normalized["Network"] == "10.3.0.0/16"
    assert (normalized["SubnetLen"], normalized["SubnetMin"], normalized["SubnetMax"]) == (
        24,
        "10.3.1.0",
        "10.3.255.0",
    )
    assert normalized["Backend"] == {"type": "VXLAN", "vni": 4}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{}", "please define a correct Network parameter in the flannel config"),
        (
            '{"Network": "10.3.0.0/29"}',
            "network is too small. Minimum useful network prefix is /28",
        ),
        ('{"Network": "10.3.0.0/16", "SubnetLen": 31}', "SubnetLen must be less than /31"),
        ('{"Network": "fd00::/48"}', "invalid IPv4 CIDR format"),
        ('{"EnableIPv4": false}', "none defined stack"),
        (
            '{"EnableIPv6": true, "EnableIPv4": false}',
            "please define a correct IPv6Network parameter in the flannel config",
        ),
    ],
)
def test_config_check_fails_with_flannels_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    conf = tmp_path / "net-conf.json"
    conf.write_text(content)
    assert main(["config", "check", str(conf)]) == 1
    assert capsys.readouterr() == ("", message + "\n")


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ('"Port": 70000', "Port must be between 0 and 65535, got 70000"),
        ('"VNI": 99999999999999999999999', "json: cannot unmarshal number "
         "99999999999999999999999 into Go struct field .VNI of type int"),
        ('"VNI": -5', "VNI must be between 0 and 16777215, got -5"),
        ('"Port": "abc"', "json: cannot unmarshal string into Go struct field .Port of type int"),
        ('"VNI": "1"', "json: cannot unmarshal string into Go struct field .VNI of type int"),
    ],
)  # fmt: skip
def test_config_check_refuses_the_backend_options_the_agent_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str, message: str
) -> None:
    conf = tmp_path / "net-conf.json"
    conf.write_text(f'{{"Network": "10.244.0.0/16", "Backend": {{"Type": "vxlan", {backend}}}}}')
    assert main(["config", "check", str(conf)]) == 1
    assert capsys.readouterr() == ("", f"error decoding VXLAN backend config: {message}\n")


def test_config_check_stays_light(tmp_path: Path) -> None:
    conf = tmp_path / "net-conf.json"
    conf.write_text('{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "VNI": 7}}')
    probe = (
        "import sys\n"
        "from pyflannel_runtime.cli import main\n"
        "code = main(['config', 'check', sys.argv[1]])\n"
        "print(code, ' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(conf)], capture_output=True, text=True, check=True
    )
    code, modules = done.stderr.split(" ", 1)
    assert code == "0"
    loaded = {name.split(".")[0] for name in modules.split()}
    assert not {"pyroute2", "pydantic", "kubernetes", "numpy"} & loaded


def test_config_check_of_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "absent.json"
    assert main(["config", "check", str(missing)]) == 1
    assert capsys.readouterr().err == (
        f"failed to read net conf: open {missing}: no such file or directory\n"
    )


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


# --- cni install -------------------------------------------------------------------------------------


def test_cni_install_calls_the_installer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = []

    def install_plugin(bin_dir: str) -> str:
        calls.append(bin_dir)
        if bin_dir == "/nonexistent":
            raise FileNotFoundError(2, "No such file or directory", bin_dir)
        return f"{bin_dir}/flannel"

    fake = types.ModuleType("pyflannel_runtime.cni.install")
    fake.install_plugin = install_plugin  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyflannel_runtime.cni.install", fake)
    assert main(["cni", "install", "--bin-dir", "/opt/cni/bin"]) == 0
    assert capsys.readouterr().out == "/opt/cni/bin/flannel\n"
    assert main(["cni", "install", "--bin-dir", "/nonexistent"]) == 1
    assert "cannot install the flannel CNI plugin" in capsys.readouterr().err
    assert calls == ["/opt/cni/bin", "/nonexistent"]


# --- help and usage ----------------------------------------------------------------------------------


def command_paths(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> list[tuple[str, ...]]:
    paths = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += command_paths(sub, (*prefix, name))
    return paths


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    paths = command_paths(build_parser())
    assert {("config", "check"), ("render",), ("cni", "install")} <= set(paths)
    for path in paths:
        assert main([*path, "--help"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: {' '.join(('pyflannel', *path))} ")
        assert "\n\n" in out  # a description follows the usage line


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["render", "--model", "x.yaml"]) == 2
    assert "the following arguments are required" in capsys.readouterr().err


def test_the_installed_console_script(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("pyflannel")
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text('{"Network": "10.3.0.0/16", "Backend": {"Type": "vxlan"}}')
    bad.write_text('{"Network": "10.3.0.0/16", "SubnetLen": 17}')
    ok = subprocess.run(
        [str(script), "config", "check", str(good)], capture_output=True, text=True, timeout=60
    )
    assert (ok.returncode, ok.stderr) == (0, "")
    assert json.loads(ok.stdout)["SubnetMax"] == "10.3.255.0"
    failed = subprocess.run(
        [str(script), "config", "check", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert (failed.returncode, failed.stdout, failed.stderr) == (
        1,
        "",
        "network must be able to accommodate at least four subnets\n",
    )


# --- small things an operator types without thinking ------------------------------------------


def test_pyflannel_and_pyflanneld_print_the_same_version_the_same_way() -> None:
    bin_dir = Path(sys.executable).parent
    answers = [
        subprocess.run([str(bin_dir / program), "--version"], capture_output=True, text=True,
                       timeout=60)
        for program in ("pyflannel", "pyflanneld")
    ]  # fmt: skip
    from pyflannel_runtime import __version__

    assert [(a.returncode, a.stdout, a.stderr) for a in answers] == [
        (0, "", f"{__version__}\n")
    ] * 2


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


def test_status_help_shows_defaults_and_the_agents_variables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["status", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for shown in (
        "default http://127.0.0.1:4001,http://127.0.0.1:2379; $FLANNELD_ETCD_ENDPOINTS",
        "default /run/flannel/subnet.env; $FLANNELD_SUBNET_FILE",
        "default 0; $FLANNELD_HEALTHZ_PORT",
        "default 0.0.0.0; $FLANNELD_HEALTHZ_IP",
        "-o {table,json}, --output {table,json} output format (default table)",
        "(default 10)",
        "default /etc/pyflannel/pyflanneld.env when it exists",
    ):
        assert shown in text


def test_status_and_ipam_take_dash_o() -> None:
    parser = build_parser()
    assert parser.parse_args(["status", "-o", "json"]).output == "json"
    assert parser.parse_args(["ipam", "-o", "json"]).output == "json"


def test_config_publish_takes_the_agents_etcd_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "publish", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("endpoints", "prefix", "keyfile", "certfile", "cafile", "username", "password"):
        assert f"$FLANNELD_ETCD_{flag.upper()}" in text
    assert "--dry-run" in text and "--agent-env FILE" in text
