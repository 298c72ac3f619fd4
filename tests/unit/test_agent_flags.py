"""pyflanneld's command line behaves like flanneld's (flannel-io/flannel main.go: init, main)."""

from __future__ import annotations

import socket
import subprocess
import sys
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.agent.errors import StartupError
from pyflannel_runtime.agent.flags import (
    FLAGS,
    Flag,
    FlagError,
    Options,
    env_name,
    parse_flags,
    usage,
    validate,
)
from pyflannel_runtime.agent.main import main, write_subnet_file
from pyflannel_runtime.cli.main import main as pyflannel
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import check_network_config, parse_config


def test_defaults_match_flanneld() -> None:
    opts = parse_flags([], environ={})
    assert opts.etcd_endpoints == "http://127.0.0.1:4001,http://127.0.0.1:2379"
    assert opts.etcd_endpoint_list == ["http://127.0.0.1:4001", "http://127.0.0.1:2379"]
    assert opts.etcd_prefix == "/coreos.com/network"
    assert opts.subnet_file == "/run/flannel/subnet.env"
    assert opts.net_config_path == "/etc/kube-flannel/net-conf.json"
    assert opts.kube_annotation_prefix == "flannel.alpha.coreos.com"
    assert (opts.subnet_lease_renew_margin, opts.iptables_resync, opts.healthz_port) == (60, 5, 0)
    assert opts.iptables_forward_rules and opts.set_node_network_unavailable
    assert not opts.ip_masq and not opts.kube_subnet_mgr
    assert opts.healthz_ip == "0.0.0.0"


def test_metrics_are_served_unless_turned_off_by_flag_or_variable() -> None:
    assert parse_flags([], environ={}).metrics
    assert not parse_flags(["--metrics=false"], environ={}).metrics
    assert not parse_flags([], environ={"FLANNELD_METRICS": "false"}).metrics
    assert parse_flags(["-metrics"], environ={"FLANNELD_METRICS": "false"}).metrics


def test_the_manifest_arguments() -> None:
    opts = parse_flags(["--ip-masq", "--kube-subnet-mgr", "--healthz-port=8081"], environ={})
    assert opts.ip_masq and opts.kube_subnet_mgr and opts.healthz_port == 8081


@pytest.mark.parametrize(
    "argv",
    [
        ["-iface", "eth0", "-public-ip", "192.0.2.1"],
        ["--iface", "eth0", "--public-ip", "192.0.2.1"],
        ["-iface=eth0", "-public-ip=192.0.2.1"],
        ["--iface=eth0", "--public-ip=192.0.2.1"],
    ],
)
def test_go_flag_spellings(argv: list[str]) -> None:
    opts = parse_flags(argv, environ={})
    assert opts.iface == ("eth0",) and opts.public_ip == "192.0.2.1"


def test_repeated_flags_keep_order() -> None:
    opts = parse_flags(["--iface=eth1", "-iface", "192.0.2.5", "--iface-regex", "^en"], environ={})
    assert opts.iface == ("eth1", "192.0.2.5") and opts.iface_regex == ("^en",)


def test_bool_flags_take_only_inline_values() -> None:
    opts = parse_flags(["--iptables-forward-rules=false", "-ip-masq=1"], environ={})
    assert not opts.iptables_forward_rules and opts.ip_masq


def test_environment_fills_only_unset_flags() -> None:
    env = {
        "FLANNELD_IFACE": "eth9",
        "FLANNELD_ETCD_PREFIX": "/from/env",
        "FLANNELD_IP_MASQ": "true",
        "FLANNELD_HEALTHZ_PORT": "9000",
    }
    opts = parse_flags(["--etcd-prefix=/from/flag"], environ=env)
    assert opts.etcd_prefix == "/from/flag"
    assert opts.iface == ("eth9",) and opts.ip_masq and opts.healthz_port == 9000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--no-such-flag"], "flag provided but not defined: -no-such-flag"),
        (["--healthz-port=abc"], 'invalid value "abc" for flag -healthz-port: parse error'),
        (["--ip-masq=maybe"], 'invalid boolean value "maybe" for -ip-masq: parse error'),
        (["--etcd-prefix"], "flag needs an argument: -etcd-prefix"),
    ],
)
def test_bad_flags(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as err:
        parse_flags(argv, environ={})
    assert str(err.value) == message


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(FlagError, match="FLANNELD_IPTABLES_RESYNC"):
        parse_flags([], environ={"FLANNELD_IPTABLES_RESYNC": "soon"})


@pytest.mark.parametrize("margin", [0, 1440, -5])
def test_renew_margin_range(margin: int) -> None:
    with pytest.raises(
        FlagError, match=r"^Invalid subnet-lease-renew-margin option, out of acceptable range$"
    ):
        validate(Options(subnet_lease_renew_margin=margin))
    validate(Options(subnet_lease_renew_margin=1439))


def test_usage_lists_every_flag_with_its_variable() -> None:
    text = usage("pyflanneld")
    for name in ("-etcd-endpoints", "-kube-subnet-mgr", "-iface-can-reach", "-subnet-lease-ttl"):
        assert f"  {name}" in text
    for flag in FLAGS:
        variable = "FLANNELD_" + flag.name.upper().replace("-", "_")
        assert f" [${variable}]\n" in text
        # ...and the variable named is the one parse_flags reads.
        value = str(not flag.default).lower() if isinstance(flag.default, bool) else "7"
        parsed = parse_flags([], {variable: value})
        assert getattr(parsed, flag.name.replace("-", "_")) != flag.default
    assert "NODE_NAME" in text and "POD_NAMESPACE" in text


def test_main_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--bogus"]) == 2
    assert "flag provided but not defined: -bogus" in capsys.readouterr().err
    assert main(["--version"]) == 0
    assert capsys.readouterr().err.strip()
    assert main(["--help"]) == 0
    assert main(["--subnet-lease-renew-margin=0"]) == 1


# --- every value checked before anything is contacted (issue 9 item 5, part of item 8) ----------

BAD_VALUES = [
    (
        ["--healthz-port=99999"],
        'invalid value "99999" for flag -healthz-port: out of range (0 to 65535)',
    ),
    (["--healthz-port=-1"], 'invalid value "-1" for flag -healthz-port: out of range (0 to 65535)'),
    (["--healthz-ip=banana"], 'invalid value "banana" for flag -healthz-ip: not an IP address'),
    (["--iptables-resync=0"], 'invalid value "0" for flag -iptables-resync: must be 1 or more'),
    (
        ["--reconcile-interval=-5"],
        'invalid value "-5" for flag -reconcile-interval: must be 0 or more',
    ),
    (
        ["--subnet-lease-ttl=0"],
        'invalid value "0" for flag -subnet-lease-ttl: out of range (1 to 9000000000)',
    ),
    (["--subnet-file="], 'invalid value "" for flag -subnet-file: not a file name'),
    (
        ["--subnet-file=/run/flannel/"],
        'invalid value "/run/flannel/" for flag -subnet-file: not a file name',
    ),
    (["--public-ip=banana"], 'invalid value "banana" for flag -public-ip: not an IPv4 address'),
    (
        ["--vxlan-tx-checksum-offload=yes"],
        'invalid value "yes" for flag -vxlan-tx-checksum-offload: must be one of on, off, auto',
    ),
    (
        ["--public-ip=2001:db8::1"],
        'invalid value "2001:db8::1" for flag -public-ip: not an IPv4 address',
    ),
    (
        ["--public-ipv6=192.0.2.1"],
        'invalid value "192.0.2.1" for flag -public-ipv6: not an IPv6 address',
    ),
    (
        ["--public-ipv6=fe80::1%eth0"],
        'invalid value "fe80::1%eth0" for flag -public-ipv6: not an IPv6 address',
    ),
    (
        ["--iface-can-reach=banana"],
        'invalid value "banana" for flag -iface-can-reach: not an IP address',
    ),
    (
        ["--iface=eth0", "--iface=a/b"],
        'invalid value "a/b" for flag -iface: neither an IP address nor an interface name',
    ),
    (
        ["--iface=sixteen-chars-xx"],
        'invalid value "sixteen-chars-xx" for flag -iface: neither an IP address nor an interface name',
    ),
    (
        ["--iface-regex=("],
        'invalid value "(" for flag -iface-regex: not a valid regular expression: missing ), unterminated subpattern at position 0',
    ),
    (
        ["--etcd-endpoints=garbage"],
        "invalid value \"garbage\" for flag -etcd-endpoints: 'garbage' is not an http:// or https:// URL",
    ),
    (
        ["--etcd-endpoints=http://192.0.2.1:2379,192.0.2.2:2379"],
        "invalid value \"http://192.0.2.1:2379,192.0.2.2:2379\" for flag -etcd-endpoints: '192.0.2.2:2379' is not an http:// or https:// URL",
    ),
    (
        ["--etcd-endpoints=http://192.0.2.1:99999"],
        "invalid value \"http://192.0.2.1:99999\" for flag -etcd-endpoints: 'http://192.0.2.1:99999' has an invalid port (1 to 65535)",
    ),
    (
        ["--etcd-endpoints=https://:2379"],
        "invalid value \"https://:2379\" for flag -etcd-endpoints: 'https://:2379' names no host",
    ),
    (["--etcd-endpoints=,"], 'invalid value "," for flag -etcd-endpoints: no etcd endpoint given'),
    (
        ["--etcd-cafile=/etc/etcd/ca.pem"],
        "-etcd-certfile and -etcd-keyfile must both be given for TLS to etcd (certfile '', keyfile '')",
    ),
    (
        ["--etcd-certfile=/etc/etcd/c.pem"],
        "-etcd-certfile and -etcd-keyfile must both be given for TLS to etcd (certfile '/etc/etcd/c.pem', keyfile '')",
    ),
    (
        ["--kube-subnet-mgr", "--kube-api-url=garbage"],
        "invalid value \"garbage\" for flag -kube-api-url: 'garbage' is not an http:// or https:// URL",
    ),
    (
        ["--kube-subnet-mgr", "--kube-annotation-prefix=a/b/c"],
        "subnet/kube: prefix can contain at most single slash",
    ),
]


@pytest.mark.parametrize(("argv", "message"), BAD_VALUES, ids=[" ".join(a) for a, _ in BAD_VALUES])
def test_bad_values_are_rejected_before_anything_starts(argv: list[str], message: str) -> None:
    opts = parse_flags(argv, environ={})
    with pytest.raises(FlagError) as err:
        validate(opts)
    assert str(err.value) == message


@pytest.mark.parametrize(
    "argv",
    [
        [],
        [
            "--healthz-port=65535",
            "--healthz-ip=::",
            "--iptables-resync=1",
            "--reconcile-interval=0",
        ],
        [
            "--public-ip=::ffff:192.0.2.1",
            "--public-ipv6=2001:db8::1",
            "--iface-can-reach=2001:db8::9",
        ],
        ["--iface=eth0.100", "--iface=192.0.2.1", "--iface-regex=^en", "--subnet-lease-ttl=60"],
        ["--etcd-endpoints=https://[2001:db8::1]:2379,http://etcd-0", "--healthz-ip="],
        ["--etcd-certfile=/c.pem", "--etcd-keyfile=/k.pem", "--etcd-cafile=/ca.pem"],
        # the other store's flags are not used, so not checked (as flanneld ignores them)
        ["--kube-subnet-mgr", "--etcd-endpoints=garbage", "--etcd-cafile=/ca.pem"],
        ["--kube-annotation-prefix=a/b/c", "--kube-api-url=garbage"],
    ],
)
def test_good_values_pass(argv: list[str]) -> None:
    validate(parse_flags(argv, environ={}))


def test_values_from_the_environment_are_checked_too() -> None:
    with pytest.raises(FlagError, match="-healthz-port: out of range"):
        validate(parse_flags([], environ={"FLANNELD_HEALTHZ_PORT": "70000"}))


def test_ints_beyond_go_int64_are_a_parse_error() -> None:
    with pytest.raises(FlagError) as err:
        parse_flags(["--subnet-lease-ttl=99999999999999999999999"], environ={})
    assert str(err.value) == (
        'invalid value "99999999999999999999999" for flag -subnet-lease-ttl: value out of range'
    )


# klog's own flags, free text or read where used (files, the etcd prefix, credentials).
UNCHECKED = {
    "v", "vmodule", "log_backtrace_at", "etcd-prefix", "etcd-keyfile", "etcd-certfile",
    "etcd-cafile", "etcd-username", "etcd-password", "kubeconfig-file", "net-config-path",
}  # fmt: skip


def test_every_valued_flag_has_a_check() -> None:
    """A new flag gets a check (or is listed above with the reason)."""
    valued = {f.name for f in FLAGS if not isinstance(f.default, bool)}
    checked = {f.name for f in FLAGS if f.check is not None}
    assert valued - UNCHECKED == checked


def run_agent(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyflannel_runtime.agent.main", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )


def last_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    return stderr.rstrip("\n").rsplit("\n", 1)[-1].split("] ", 1)[1]


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--healthz-port=99999", 'invalid value "99999" for flag -healthz-port: out of range'),
        ("--healthz-ip=banana", 'invalid value "banana" for flag -healthz-ip: not an IP address'),
        ("--etcd-endpoints=garbage", 'invalid value "garbage" for flag -etcd-endpoints: '),
    ],
)
def test_pyflanneld_reports_a_bad_value_in_one_line(flag: str, message: str) -> None:
    result = run_agent(flag)
    assert result.returncode == 1
    assert last_line(result.stderr).startswith(message)


@pytest.fixture
def quiet_agent_args(tmp_path: Path) -> list[str]:
    """Flags that get the agent as far as its health server without touching the host."""
    return [f"--subnet-file={tmp_path}/run/subnet.env", "--etcd-endpoints=http://127.0.0.1:9"]


def test_pyflanneld_healthz_port_in_use(quiet_agent_args: list[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_agent(*quiet_agent_args, "--healthz-ip=127.0.0.1", f"--healthz-port={port}")
    assert result.returncode == 1
    assert last_line(result.stderr) == (
        f"Start healthz server error. listen tcp 127.0.0.1:{port}: bind: address already in use"
    )


@pytest.mark.parametrize(
    ("subnet_file", "message"),
    [
        (
            "/proc/x/subnet.env",
            "Failed to write subnet file: mkdir /proc/x: no such file or directory",
        ),
        ("{tmp}", "Failed to write subnet file: open {tmp}: is a directory"),
        ("{tmp}/file/subnet.env", "Failed to write subnet file: mkdir {tmp}/file: file exists"),
        ("/dev/null", "Failed to write subnet file: /dev/null is not a regular file"),
    ],
)
def test_pyflanneld_unusable_subnet_file(tmp_path: Path, subnet_file: str, message: str) -> None:
    (tmp_path / "file").write_text("")
    before = sorted(p.name for p in tmp_path.iterdir())
    path = subnet_file.format(tmp=tmp_path)
    result = run_agent(f"--subnet-file={path}", "--etcd-endpoints=http://127.0.0.1:9")
    assert result.returncode == 1
    assert last_line(result.stderr) == message.format(tmp=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_status_rejects_a_bad_endpoint_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert pyflannel(["status", "--etcd-endpoints=garbage", "--leases-only"]) == 2
    assert capsys.readouterr().err == (
        'pyflannel status: invalid value "garbage" for flag -etcd-endpoints: '
        "'garbage' is not an http:// or https:// URL\n"
    )


def test_a_late_subnet_file_failure_is_one_line(tmp_path: Path) -> None:
    """Once the lease is taken the file is written for real; a failure there still ends in
    flanneld's message, not a traceback."""
    config = check_network_config(parse_config(b'{"Network": "10.244.0.0/16"}'))
    lease = Lease(IPv4Network("10.244.7.0/24"), None, LeaseAttrs(IPv4Address("192.0.2.7")))
    (tmp_path / "file").write_text("")
    path = tmp_path / "file" / "subnet.env"
    with pytest.raises(StartupError) as err:
        write_subnet_file(str(path), config, lease, 1450, ipmasq=False)
    assert str(err.value) == f"Failed to write subnet file: {path}: file exists"


ANY_VALUE = st.one_of(
    st.sampled_from(["", "\n", "a\nb", '"', "\\", "\x00", "\udcff", "1\n2", "http://a\nb"]),
    st.text(max_size=40),
    st.integers().map(str),
    st.from_regex(r"-?[0-9]{1,40}", fullmatch=True),
    st.from_regex(r"(https?|unix)://[a-z0-9.:\[\]%/@-]{0,30}", fullmatch=True),
)


@given(flag=st.sampled_from(FLAGS), value=ANY_VALUE, from_environment=st.booleans())
def test_any_value_of_any_flag_is_taken_or_refused_with_a_flag_error(
    flag: Flag, value: str, from_environment: bool
) -> None:
    """The decoder of the agent's command line and environment: no other exception escapes, so
    no value makes pyflanneld print a traceback."""
    if "\x00" in value and from_environment:
        value = value.replace("\x00", "")  # no environment can carry it
    argv, environ = (
        ([], {env_name(flag.name): value}) if from_environment else ([f"--{flag.name}={value}"], {})
    )
    try:
        validate(parse_flags(argv, environ))
    except FlagError as err:
        assert str(err) and "\n" not in str(err)
