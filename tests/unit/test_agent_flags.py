"""pyflanneld's command line behaves like flanneld's (§0, §8.1)."""

from __future__ import annotations

import pytest

from pyflannel_runtime.agent.flags import FlagError, Options, parse_flags, usage, validate
from pyflannel_runtime.agent.main import main


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


def test_usage_lists_every_flag() -> None:
    text = usage("pyflanneld")
    for name in ("-etcd-endpoints", "-kube-subnet-mgr", "-iface-can-reach", "-subnet-lease-ttl"):
        assert f"  {name}" in text


def test_main_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--bogus"]) == 2
    assert "flag provided but not defined: -bogus" in capsys.readouterr().err
    assert main(["--version"]) == 0
    assert capsys.readouterr().err.strip()
    assert main(["--help"]) == 0
    assert main(["--subnet-lease-renew-margin=0"]) == 1
