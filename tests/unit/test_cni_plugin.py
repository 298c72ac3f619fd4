"""The flannel plugin end to end with a recording fake delegate: ADD, DEL, CHECK, VERSION, errors."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pyflannel_runtime.cni.install import install_plugin, isolated_prelude
from pyflannel_runtime.cni.plugin import run

VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
SUBNET_ENV = "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n"
RESULT = b'{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.1.17.2/24"}],"dns":{}}\n'

# records its stdin and CNI_* environment per command; FAKE_FAIL makes it return a CNI error
FAKE_PLUGIN = """#!/bin/sh
cat > "$FAKE_LOG/$CNI_COMMAND.stdin"
env | grep '^CNI_' | sort > "$FAKE_LOG/$CNI_COMMAND.env"
cp "$FAKE_LOG/../data/$CNI_CONTAINERID" "$FAKE_LOG/$CNI_COMMAND.saved" 2>/dev/null || true
echo "delegate stderr" >&2
if [ -n "$FAKE_FAIL" ]; then
  echo '{"code": 11, "msg": "try again", "details": "busy"}'
  exit 1
fi
printf '%s' "$FAKE_RESULT"
"""


class Lab:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.log = root / "log"
        self.data = root / "data"
        self.subnet_env = root / "subnet.env"
        for directory in (self.bin, self.log):
            directory.mkdir()
        for name in ("bridge", "ipvlan"):
            plugin = self.bin / name
            plugin.write_text(FAKE_PLUGIN)
            plugin.chmod(0o755)
        self.subnet_env.write_text(SUBNET_ENV)

    def conf(self, **extra: object) -> bytes:
        conf: dict[str, object] = {
            "name": "cni-flannel",
            "type": "flannel",
            "subnetFile": str(self.subnet_env),
            "dataDir": str(self.data),
        }
        conf.update(extra)
        return json.dumps(conf).encode()

    def env(self, command: str, **extra: str) -> dict[str, str]:
        env = {
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": "ctr1",
            "CNI_NETNS": "/var/run/netns/nonexistent",
            "CNI_IFNAME": "eth0",
            "CNI_PATH": str(self.bin),
            "PATH": "/usr/bin:/bin",
            "FAKE_LOG": str(self.log),
            "FAKE_RESULT": RESULT.decode(),
        }
        env.update(extra)
        return env

    def call(self, env: dict[str, str], stdin: bytes) -> tuple[int, bytes, bytes]:
        stdout, stderr = io.BytesIO(), io.BytesIO()
        status = run(env, io.BytesIO(stdin), stdout, stderr)
        return status, stdout.getvalue(), stderr.getvalue()

    def delegate_calls(self) -> list[str]:
        return sorted(p.name.split(".")[0] for p in self.log.glob("*.stdin"))


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return Lab(tmp_path)


def error_of(status: int, stdout: bytes) -> dict[str, object]:
    assert status == 1
    error = json.loads(stdout)
    assert isinstance(error, dict)
    return error


def test_add_saves_delegate_before_delegating_and_passes_result_through(lab: Lab) -> None:
    status, stdout, stderr = lab.call(lab.env("ADD"), lab.conf(cniVersion="0.3.1"))
    assert status == 0
    assert stdout == RESULT
    saved = (lab.data / "ctr1").read_bytes()
    assert saved == (
        b'{"cniVersion":"0.3.1","ipMasq":false,"ipam":{"ranges":[[{"subnet":"10.1.17.0/24"}]],'
        b'"routes":[{"dst":"10.1.0.0/16"}],"type":"host-local"},"isGateway":true,"mtu":1472,'
        b'"name":"cni-flannel","type":"bridge"}'
    )
    assert (lab.log / "ADD.stdin").read_bytes() == saved
    # already in place, whole, while the delegate ran: a DEL after a killed ADD finds it
    assert (lab.log / "ADD.saved").read_bytes() == saved
    assert stat.S_IMODE(os.stat(lab.data / "ctr1").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(lab.data).st_mode) == 0o700
    assert stderr.startswith(b"delegateAdd: netconf sent to delegate plugin:\n" + saved)
    assert b"delegate stderr" in stderr
    env_lines = (lab.log / "ADD.env").read_text().splitlines()
    assert env_lines == [
        "CNI_COMMAND=ADD",
        "CNI_CONTAINERID=ctr1",
        "CNI_IFNAME=eth0",
        "CNI_NETNS=/var/run/netns/nonexistent",
        f"CNI_PATH={lab.bin}",
    ]


def test_a_failed_fsync_of_the_saved_file_fails_add_after_the_delegate_ran(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fsyncs run while the delegate works; when they fail, ADD fails once the delegate is
    done, and the file stays for the runtime's DEL."""

    def fail(path: str) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("pyflannel_runtime.cni.state.make_durable", fail)
    status, stdout, _ = lab.call(lab.env("ADD"), lab.conf())
    assert error_of(status, stdout) == {
        "code": 999,
        "msg": f"fsync {lab.data / 'ctr1'}: input/output error",
    }
    assert lab.delegate_calls() == ["ADD"]
    assert (lab.data / "ctr1").exists()


def test_failed_delegate_add_keeps_the_saved_file_and_reports_its_error(lab: Lab) -> None:
    status, stdout, _ = lab.call(lab.env("ADD", FAKE_FAIL="1"), lab.conf())
    assert error_of(status, stdout) == {"code": 11, "msg": "try again", "details": "busy"}
    assert (lab.data / "ctr1").exists()


def test_error_result_layout_matches_go(lab: Lab) -> None:
    status, stdout, _ = lab.call(lab.env("ADD", CNI_PATH=str(lab.root / "none")), lab.conf())
    assert status == 1
    assert stdout == (
        b'{\n    "code": 999,\n    "msg": "failed to delegate add: failed to find plugin '
        b'\\"bridge\\" in path [' + str(lab.root / "none").encode() + b']"\n}'
    )


def test_del_replays_saved_config_then_is_idempotent(lab: Lab) -> None:
    assert lab.call(lab.env("ADD"), lab.conf())[0] == 0
    saved = (lab.data / "ctr1").read_bytes()
    # DEL's own runtimeConfig is ignored: the saved bytes go to the delegate
    status, stdout, _ = lab.call(lab.env("DEL"), lab.conf(runtimeConfig={"x": 1}))
    assert (status, stdout) == (0, b"")
    assert (lab.log / "DEL.stdin").read_bytes() == saved
    assert "CNI_COMMAND=DEL" in (lab.log / "DEL.env").read_text()
    assert not (lab.data / "ctr1").exists()
    (lab.log / "DEL.stdin").unlink()
    assert lab.call(lab.env("DEL"), lab.conf()) == (0, b"", b"")
    assert lab.delegate_calls() == ["ADD"]


def test_del_without_saved_config_or_data_dir_succeeds(lab: Lab) -> None:
    assert lab.call(lab.env("DEL", CNI_NETNS=""), lab.conf()) == (0, b"", b"")
    assert lab.delegate_calls() == []


def test_del_removes_the_file_even_when_the_delegate_fails(lab: Lab) -> None:
    assert lab.call(lab.env("ADD"), lab.conf())[0] == 0
    status, stdout, _ = lab.call(lab.env("DEL", FAKE_FAIL="1"), lab.conf())
    assert error_of(status, stdout)["code"] == 11
    assert not (lab.data / "ctr1").exists()


def test_del_with_unparsable_saved_config_succeeds_and_removes_it(lab: Lab) -> None:
    lab.data.mkdir()
    (lab.data / "ctr1").write_bytes(b'{"type": ')
    status, stdout, stderr = lab.call(lab.env("DEL"), lab.conf())
    assert (status, stdout) == (0, b"")
    assert stderr == b"failed to parse netconf: unexpected end of JSON input"
    # flannel leaves the file behind; a second DEL then has nothing to parse
    assert not (lab.data / "ctr1").exists()
    assert lab.delegate_calls() == []
    assert lab.call(lab.env("DEL"), lab.conf()) == (0, b"", b"")


def test_del_uses_the_saved_delegate_type(lab: Lab) -> None:
    assert lab.call(lab.env("ADD"), lab.conf(delegate={"type": "ipvlan"}))[0] == 0
    (lab.bin / "bridge").unlink()
    assert lab.call(lab.env("DEL"), lab.conf())[0] == 0
    assert lab.delegate_calls() == ["ADD", "DEL"]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_supported_version_adds_and_deletes(lab: Lab, version: str) -> None:
    status, stdout, _ = lab.call(lab.env("ADD"), lab.conf(cniVersion=version))
    assert (status, stdout) == (0, RESULT)
    assert json.loads((lab.data / "ctr1").read_bytes())["cniVersion"] == version
    assert lab.call(lab.env("DEL"), lab.conf(cniVersion=version))[0] == 0


def test_missing_cni_version_means_0_1_0_and_is_not_forwarded(lab: Lab) -> None:
    assert lab.call(lab.env("ADD"), lab.conf())[0] == 0
    assert "cniVersion" not in json.loads((lab.data / "ctr1").read_bytes())


def test_version_command(lab: Lab) -> None:
    status, stdout, _ = lab.call({"CNI_COMMAND": "VERSION"}, b"ignored")
    assert status == 0
    assert stdout == (
        b'{"cniVersion":"1.1.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1",'
        b'"0.4.0","1.0.0","1.1.0"]}\n'
    )


def test_no_command_prints_about_to_stderr(lab: Lab) -> None:
    status, stdout, stderr = lab.call({}, b"")
    assert (status, stdout) == (0, b"")
    lines = stderr.decode().splitlines()
    assert lines[0].startswith("CNI Plugin flannel version ")
    assert lines[1] == "CNI protocol versions supported: " + ", ".join(VERSIONS)


@pytest.mark.parametrize(
    ("version", "status", "message"),
    [
        ("1.0.0", 0, None),
        ("0.4.0", 0, None),
        ("0.3.1", 1, "config version does not allow CHECK"),
        ("2.0.0", 1, "plugin version does not allow CHECK"),
        ("0.4.1", 1, "incompatible CNI versions"),
    ],
)
def test_check(lab: Lab, version: str, status: int, message: str | None) -> None:
    result = lab.call(lab.env("CHECK"), lab.conf(cniVersion=version))
    assert result[0] == status
    if message is None:
        assert result[1] == b""
    else:
        error = error_of(result[0], result[1])
        assert (error["code"], error["msg"]) == (1, message)
    assert lab.delegate_calls() == []


def test_incompatible_version_on_add(lab: Lab) -> None:
    status, stdout, _ = lab.call(lab.env("ADD"), lab.conf(cniVersion="9.9.9"))
    assert error_of(status, stdout) == {
        "code": 1,
        "msg": "incompatible CNI versions",
        "details": 'config is "9.9.9", plugin supports ["0.1.0" "0.2.0" "0.3.0" "0.3.1" '
        '"0.4.0" "1.0.0" "1.1.0"]',
    }
    assert not lab.data.exists()


def subnet_env_error(detail: str) -> dict[str, object]:
    return {
        "code": 999,
        "msg": f"failed to load flannel 'subnet.env' file: {detail}. "
        "Check the flannel pod log for this node.",
    }


def test_missing_subnet_env(lab: Lab) -> None:
    lab.subnet_env.unlink()
    status, stdout, _ = lab.call(lab.env("ADD"), lab.conf())
    assert error_of(status, stdout) == subnet_env_error(
        f"open {lab.subnet_env}: no such file or directory"
    )
    assert lab.delegate_calls() == []


def test_incomplete_subnet_env(lab: Lab) -> None:
    lab.subnet_env.write_text("FLANNEL_MTU=1450\n")
    status, stdout, _ = lab.call(lab.env("ADD"), lab.conf())
    assert error_of(status, stdout) == subnet_env_error(
        f"{lab.subnet_env} is missing FLANNEL_NETWORK, FLANNEL_IPV6_NETWORK, "
        "FLANNEL_SUBNET, FLANNEL_IPV6_SUBNET, FLANNEL_IPMASQ"
    )


@pytest.mark.parametrize(
    ("delegate", "message"),
    [
        ({"type": 1}, "'delegate' dictionary, if present, must have (string) 'type' field"),
        (
            {"name": "x"},
            "'delegate' dictionary must not have 'name' field, it'll be set by flannel",
        ),
        ({"ipam": {}}, "'delegate' dictionary must not have 'ipam' field, it'll be set by flannel"),
    ],
)
def test_bad_delegate_is_refused_before_anything_is_saved(
    lab: Lab, delegate: dict[str, object], message: str
) -> None:
    status, stdout, _ = lab.call(lab.env("ADD"), lab.conf(delegate=delegate))
    assert error_of(status, stdout) == {"code": 999, "msg": message}
    assert not lab.data.exists()


@pytest.mark.parametrize(
    ("env_change", "stdin", "expected"),
    [
        (
            {"CNI_CONTAINERID": "", "CNI_NETNS": "", "CNI_IFNAME": "", "CNI_PATH": ""},
            None,
            {
                "code": 4,
                "msg": "required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH] missing",
            },
        ),
        (
            {"CNI_CONTAINERID": "../x"},
            None,
            {"code": 4, "msg": "invalid characters in containerID", "details": "../x"},
        ),
        (
            {"CNI_IFNAME": "a-very-long-ifname"},
            None,
            {
                "code": 4,
                "msg": "interface name is too long",
                "details": "interface name should be less than 16 characters",
            },
        ),
        ({"CNI_COMMAND": "FOO"}, None, {"code": 4, "msg": "unknown CNI_COMMAND: FOO"}),
        ({}, b'{"type":"flannel"}', {"code": 7, "msg": "missing network name"}),
        (
            {},
            b'{"name":"a b"}',
            {"code": 7, "msg": "invalid characters found in network name", "details": "a b"},
        ),
        (
            {},
            b"{",
            {"code": 6, "msg": "error unmarshall network config: unexpected end of JSON input"},
        ),
        (
            {},
            b'{"name":"n","delegate":[]}',
            {
                "code": 999,
                "msg": "failed to load flannel netconf file: failed to load netconf: json: "
                "cannot unmarshal array into Go struct field NetConf.delegate of type "
                "map[string]interface {}",
            },
        ),
    ],
)
def test_error_results(
    lab: Lab, env_change: dict[str, str], stdin: bytes | None, expected: dict[str, object]
) -> None:
    status, stdout, _ = lab.call(lab.env("ADD", **env_change), stdin or lab.conf())
    assert error_of(status, stdout) == expected
    assert lab.delegate_calls() == []


def test_gc_and_status_are_accepted_from_1_1_0(lab: Lab) -> None:
    for command in ("GC", "STATUS"):
        assert lab.call(lab.env(command), lab.conf(cniVersion="1.1.0"))[:2] == (0, b"")
        status, stdout, _ = lab.call(lab.env(command), lab.conf(cniVersion="1.0.0"))
        assert error_of(status, stdout)["msg"] == f"config version does not allow {command}"


def test_own_netns_is_refused_after_add(lab: Lab) -> None:
    # skel checks the namespace after cmdAdd returned, so the result is already printed
    status, stdout, _ = lab.call(lab.env("ADD", CNI_NETNS="/proc/self/ns/net"), lab.conf())
    assert status == 1
    assert stdout.startswith(RESULT)
    assert json.loads(stdout[len(RESULT) :]) == {
        "code": 8,
        "msg": "plugin's netns and netns from CNI_NETNS should not be the same",
    }


# --- the installed executable -------------------------------------------------------------------


def test_installed_plugin_runs_and_stays_import_light(lab: Lab, tmp_path: Path) -> None:
    bin_dir = tmp_path / "cni-bin"
    path = install_plugin(str(bin_dir))
    assert path == str(bin_dir / "flannel")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o755
    assert Path(path).read_text().startswith(f"#!{sys.executable} -IS\n")
    version = subprocess.run([path], env={"CNI_COMMAND": "VERSION"}, capture_output=True)
    assert version.returncode == 0
    assert json.loads(version.stdout)["supportedVersions"] == VERSIONS

    # the same code path as the launcher, reporting the modules it loaded
    probe = isolated_prelude() + (
        "import io\n"
        "from pyflannel_runtime.cni.plugin import run\n"
        "env = dict(line.split('=', 1) for line in sys.argv[1:])\n"
        "out, err = io.BytesIO(), io.BytesIO()\n"
        "status = run(env, sys.stdin.buffer, out, err)\n"
        "print(status, ' '.join(sorted(sys.modules)))\n"
    )
    for command in ("ADD", "DEL", "STATUS"):
        env = lab.env(command)
        probe_run = subprocess.run(
            [sys.executable, "-IS", "-c", probe, *(f"{k}={v}" for k, v in env.items())],
            input=lab.conf(cniVersion="1.1.0") if command == "STATUS" else lab.conf(),
            capture_output=True,
            check=True,
        )
        status, modules = probe_run.stdout.decode().split(" ", 1)
        loaded = set(modules.split())
        assert status == "0"
        heavy = {"pydantic", "kubernetes", "pyroute2", "subprocess", "json", "tempfile", "asyncio"}
        assert not heavy & loaded, heavy & loaded
        if command in ("ADD", "DEL"):  # every pod's start and end: not even os (1.3 ms)
            assert not {"os", "posixpath", "_collections_abc"} & loaded
        if command == "DEL":
            assert not {"ipaddress", "dataclasses", "typing", "re"} & loaded
