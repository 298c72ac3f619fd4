"""Issue 9's reproductions against the decoders of outside input, one test each.

Each of these failed before the decoders shared the gojson core's limits: RecursionError
escaping, the CNI plugin's SystemError for any syntax error, a state file that wedged DEL,
unbounded reads and renders. Whatever can eat the machine on old code (an unbounded read, a
backtracking regular expression) runs in a child process with a memory or time limit.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from pyflannel_controller.cli import main as controller_main
from pyflannel_controller.model.cluster import ClusterModelError, load_model
from pyflannel_runtime.cni.install import isolated_prelude
from pyflannel_runtime.subnet.kube.annotations import Annotations
from pyflannel_runtime.subnet.kube.nodes import NodeLeaseTracker
from pyflannel_runtime.wire.lease import LeaseAttrs, LeaseError
from pyflannel_runtime.wire.netconf import ConfigError, parse_config
from pyflannel_runtime.wire.subnet_env import SubnetEnvError, parse_cni_subnet_env

DEEP = "[" * 1200 + "]" * 1200
SUBNET_ENV = "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n"


def run_python(
    code: str,
    *args: str,
    stdin: bytes = b"",
    env: dict[str, str] | None = None,
    memory_mb: int = 0,
    timeout: float = 60,
) -> subprocess.CompletedProcess[bytes]:
    """``code`` in a fresh, isolated interpreter (as the installed CNI launcher runs), with
    ``sys`` imported and the address space limited to ``memory_mb`` when given."""

    def limit_memory() -> None:
        if memory_mb:
            resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))

    return subprocess.run(
        [sys.executable, "-IS", "-c", isolated_prelude() + code, *args],
        input=stdin,
        env=env,
        capture_output=True,
        timeout=timeout,
        preexec_fn=limit_memory,
        check=False,
    )


CLI = "from pyflannel_runtime.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"


def run_plugin(
    tmp_path: Path, command: str, stdin: bytes, memory_mb: int = 0
) -> subprocess.CompletedProcess[bytes]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": "ctr1",
        "CNI_NETNS": "/var/run/netns/nonexistent",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(bin_dir),
        "PATH": "/usr/bin:/bin",
    }
    code = "from pyflannel_runtime.cni.plugin import main\nsys.exit(main())\n"
    return run_python(code, stdin=stdin, env=env, memory_mb=memory_mb)


def flannel_conf(tmp_path: Path, **extra: object) -> bytes:
    conf: dict[str, object] = {
        "cniVersion": "0.3.1",
        "name": "cbr0",
        "type": "flannel",
        "subnetFile": str(tmp_path / "subnet.env"),
        "dataDir": str(tmp_path / "data"),
    }
    conf.update(extra)
    return json.dumps(conf).encode()


# --- 1: a deeply nested lease value ----------------------------------------------------------


def test_deep_lease_value_is_a_lease_error() -> None:
    with pytest.raises(LeaseError) as err:
        LeaseAttrs.from_json(f'{{"PublicIP":"192.0.2.16","X":{DEEP}}}'.encode())
    assert str(err.value) == "invalid character '[' exceeded max depth"


def test_deep_backend_data_annotation_keeps_the_nodes_last_good_lease() -> None:
    keys = Annotations.for_prefix()
    tracker = NodeLeaseTracker(keys, enable_ipv4=True, enable_ipv6=False)

    def node(backend_data: str) -> dict[str, object]:
        annotations = {
            keys.subnet_kube_managed: "true",
            keys.public_ip: "192.0.2.16",
            keys.backend_type: "vxlan",
            keys.backend_data: backend_data,
        }
        return {
            "metadata": {"name": "n1", "annotations": annotations},
            "spec": {"podCIDR": "10.244.15.0/24"},
        }

    [added] = tracker.update("n1", node('{"VNI":1,"VtepMAC":"0a:11:22:33:44:20"}'))
    assert tracker.update("n1", node(f'{{"VNI":1,"X":{DEEP}}}')) == []
    assert tracker.reset([node(DEEP)]) == (added.lease,)


# --- 4: CNI DEL wedged on a corrupt state file; syntax errors as internal errors ---------------


def test_del_with_a_truncated_state_file_succeeds_and_removes_it(tmp_path: Path) -> None:
    state = tmp_path / "data" / "ctr1"
    state.parent.mkdir()
    state.write_bytes(b'{"cniVersion":"0.3.1","type":"bridge","name":"cb')
    done = run_plugin(tmp_path, "DEL", flannel_conf(tmp_path))
    assert (done.returncode, done.stdout) == (0, b""), done.stdout
    assert done.stderr == b"failed to parse netconf: unexpected end of JSON input"
    assert not state.exists()


def test_stdin_syntax_error_is_the_cni_decoding_error(tmp_path: Path) -> None:
    done = run_plugin(tmp_path, "ADD", b"{not json")
    assert done.returncode == 1
    assert json.loads(done.stdout) == {
        "code": 6,
        "msg": "error unmarshall network config: invalid character 'n' looking for beginning "
        "of object key string",
    }


def test_deep_stdin_is_the_cni_decoding_error(tmp_path: Path) -> None:
    done = run_plugin(tmp_path, "ADD", DEEP.encode())
    assert json.loads(done.stdout) == {
        "code": 6,
        "msg": "error unmarshall network config: invalid character '[' exceeded max depth",
    }


# --- 6: config check of a deeply nested net-conf ---------------------------------------------


def test_config_check_of_deep_nesting_is_a_one_line_error(tmp_path: Path) -> None:
    conf = tmp_path / "net-conf.json"
    deep = "[" * 1000 + "]" * 1000
    conf.write_text(f'{{"Network":"10.244.0.0/16","Backend":{{"Type":"vxlan","X":{deep}}}}}')
    assert 2000 < conf.stat().st_size < 2100
    done = run_python(CLI, "config", "check", str(conf))
    assert (done.returncode, done.stdout) == (1, b"")
    assert done.stderr == b"invalid character '[' exceeded max depth\n"


def test_parse_config_of_deep_nesting_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        parse_config(f'{{"Network":"10.244.0.0/16","Backend":{DEEP}}}')


# --- 8: alias bombs, unbounded reads, Python's error text ------------------------------------


def alias_bomb(levels: int) -> str:
    """The classic: each level a list of nine aliases of the level below."""
    lines = ["flannel_cni_delegate_extra:", '  l0: &l0 ["lolololol",' + '"lolololol",' * 8 + "]"]
    for level in range(1, levels):
        lines.append(f"  l{level}: &l{level} [" + f"*l{level - 1}," * 9 + "]")
    return "\n".join([*lines, "nodes:", "  n1:", ""])


@pytest.mark.parametrize(
    ("levels", "problem"),
    [
        (6, "not valid YAML: its aliases expand to more than 524288 values (line 7)"),
        (
            5,
            "invalid cluster model:\n  flannel_cni_delegate_extra: larger than 65536 bytes as JSON",
        ),
    ],
)
def test_yaml_alias_bomb_renders_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], levels: int, problem: str
) -> None:
    model = tmp_path / "cluster.yaml"
    model.write_text(alias_bomb(levels))
    assert model.stat().st_size < 450
    out = tmp_path / "out"
    assert (
        controller_main(["render", "--model", str(model), "--node", "n1", "--out", str(out)]) == 1
    )
    assert capsys.readouterr().err == f"{model}: {problem}\n"
    assert not out.exists()


def test_delegate_extra_is_bounded_in_depth_and_size() -> None:
    deep: object = {}
    for _ in range(20):
        deep = {"x": deep}
    for extra, problem in (
        (deep, "nests deeper than 16 levels"),
        ({"x": "y" * 70_000}, "larger than 65536 bytes as JSON"),
        ({"x": float("inf")}, "inf is not a JSON number"),
    ):
        with pytest.raises(ClusterModelError) as err:
            load_model({"flannel_cni_delegate_extra": extra})
        assert err.value.problems == [f"flannel_cni_delegate_extra: {problem}"]


def test_subnet_file_dev_zero_is_a_bounded_read(tmp_path: Path) -> None:
    done = run_plugin(tmp_path, "ADD", flannel_conf(tmp_path, subnetFile="/dev/zero"), 400)
    assert json.loads(done.stdout) == {
        "code": 999,
        "msg": "failed to load flannel 'subnet.env' file: read /dev/zero: file too large: over "
        "1048576 bytes. Check the flannel pod log for this node.",
    }


def test_net_conf_dev_zero_is_a_bounded_read() -> None:
    done = run_python(CLI, "config", "check", "/dev/zero", memory_mb=400)
    assert done.returncode == 1
    assert done.stderr == (
        b"failed to read net conf: read /dev/zero: file too large: over 1048576 bytes\n"
    )


def test_cni_errors_read_as_gos_not_pythons(tmp_path: Path) -> None:
    (tmp_path / "subnet.env").write_text(SUBNET_ENV)
    blocker = tmp_path / "data"
    blocker.write_text("a file where the state directory should be")
    done = run_plugin(tmp_path, "ADD", flannel_conf(tmp_path))
    # Go's os.MkdirAll on an existing file: "mkdir <path>: not a directory"
    assert json.loads(done.stdout) == {"code": 999, "msg": f"mkdir {blocker}: not a directory"}


# --- found by the property test (test_decoders_fuzz.py) ---------------------------------------


def test_long_subnet_keys_cannot_stall_the_parser() -> None:
    code = (
        "from pyflannel_runtime.wire.lease import LeaseError, parse_subnet_key\n"
        "try:\n    parse_subnet_key('1.' + '1' * 20000 + '-24x')\n"
        "except LeaseError as err:\n    print(str(err)[:40])\n"
    )
    done = run_python(code, timeout=30)
    assert done.stdout == b"invalid subnet key: 1.111111111111111111\n"


def test_huge_mtu_in_subnet_env_is_out_of_range() -> None:
    with pytest.raises(SubnetEnvError, match="value out of range"):
        parse_cni_subnet_env(SUBNET_ENV.replace("1472", "1" * 5000), "/run/flannel/subnet.env")


def test_the_agents_previous_subnet_file_read_is_bounded() -> None:
    code = (
        "from pyflannel_runtime.agent.stores import previous_subnets\n"
        "print(previous_subnets('/dev/zero'))\n"
    )
    done = run_python(code, memory_mb=600)
    assert done.stdout.decode().splitlines() == [
        "PreviousSubnets(ipv6_network=None, ipv6_subnet=None, network=None, subnet=None)"
    ], done.stderr
