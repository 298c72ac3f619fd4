"""The pyflannel operator CLI."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from pyflannel_runtime.cli.main import build_parser, main

GOLDEN = Path(__file__).parent.parent / "golden"


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
        "from pyflannel_runtime.cli.main import main\n"
        "code = main(['config', 'check', sys.argv[1]])\n"
        "print(code, ' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(conf)], capture_output=True, text=True, check=True
    )
    code, modules = done.stderr.split(" ", 1)
    assert code == "0"
    loaded = {name.split(".")[0] for name in modules.split()}
    assert not {"pydantic", "kubernetes", "numpy"} & loaded
    # The agent's package defers pyroute2's own imports (netlink/lean_pyroute2.py): its package
    # object may be there, none of its code.
    assert not [name for name in modules.split() if name.startswith("pyroute2.")]


def test_config_check_of_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "absent.json"
    assert main(["config", "check", str(missing)]) == 1
    assert capsys.readouterr().err == (
        f"failed to read net conf: open {missing}: no such file or directory\n"
    )


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
    assert {("config", "check"), ("cni", "install")} <= set(paths)
    assert ("render",) not in paths  # the controller's: pyflannel_controller.cli
    for path in paths:
        assert main([*path, "--help"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: {' '.join(('pyflannel', *path))} ")
        assert "\n\n" in out  # a description follows the usage line


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["cni", "install"]) == 2
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
