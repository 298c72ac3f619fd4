"""flanneld's command line: the same flags, defaults and FLANNELD_* environment (spec §0, §8.1).

Go's flag package accepts `-flag`, `--flag`, `-flag=value` and `-flag value`, and bool flags
only as `-flag` or `-flag=<bool>`. Any flag not given on the command line is read from
FLANNELD_<NAME>. flanneld exits 0 after printing usage on a bad flag (its usage function
calls os.Exit(0)); pyflanneld exits 2 instead, so a typo in a unit file is not a silent success.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any


class FlagError(ValueError):
    pass


@dataclass(frozen=True)
class Options:
    etcd_endpoints: str = "http://127.0.0.1:4001,http://127.0.0.1:2379"
    etcd_prefix: str = "/coreos.com/network"
    etcd_keyfile: str = ""
    etcd_certfile: str = ""
    etcd_cafile: str = ""
    etcd_username: str = ""
    etcd_password: str = ""
    iface: tuple[str, ...] = ()
    iface_regex: tuple[str, ...] = ()
    iface_can_reach: str = ""
    subnet_file: str = "/run/flannel/subnet.env"
    public_ip: str = ""
    public_ipv6: str = ""
    subnet_lease_renew_margin: int = 60
    ip_masq: bool = False
    ip_masq_fully_random_disable: bool = False
    kube_subnet_mgr: bool = False
    kube_api_url: str = ""
    kube_annotation_prefix: str = "flannel.alpha.coreos.com"
    kubeconfig_file: str = ""
    version: bool = False
    healthz_ip: str = "0.0.0.0"
    healthz_port: int = 0
    iptables_resync: int = 5
    iptables_forward_rules: bool = True
    net_config_path: str = "/etc/kube-flannel/net-conf.json"
    set_node_network_unavailable: bool = True
    ip_blackhole_route: bool = False
    v: int = 0
    vmodule: str = ""
    log_backtrace_at: str = ""
    subnet_lease_ttl: int = 86400
    reconcile_interval: int = 10
    help: bool = field(default=False, compare=False)

    @property
    def etcd_endpoint_list(self) -> list[str]:
        return [e for e in self.etcd_endpoints.split(",") if e]


_DEFAULTS = {f.name: f.default for f in fields(Options)}


@dataclass(frozen=True)
class Flag:
    name: str
    usage: str
    repeated: bool = False

    @property
    def default(self) -> Any:
        return _DEFAULTS[_attr(self.name)]


# Order follows flanneld's `--help`; names are flanneld's, so unit files and manifests carry over.
FLAGS: tuple[Flag, ...] = (
    Flag("etcd-endpoints", "a comma-delimited list of etcd endpoints"),
    Flag("etcd-prefix", "etcd prefix"),
    Flag("etcd-keyfile", "SSL key file used to secure etcd communication"),
    Flag("etcd-certfile", "SSL certification file used to secure etcd communication"),
    Flag("etcd-cafile", "SSL Certificate Authority file used to secure etcd communication"),
    Flag("etcd-username", "username for BasicAuth to etcd"),
    Flag("etcd-password", "password for BasicAuth to etcd"),
    Flag(
        "iface",
        "interface to use (IP or name) for inter-host communication. Can be specified multiple times to check each option in order. Returns the first match found.",
        repeated=True,
    ),
    Flag(
        "iface-regex",
        "regex expression to match the first interface to use (IP or name) for inter-host communication. Can be specified multiple times to check each regex in order. Returns the first match found. Regexes are checked after specific interfaces specified by the iface option have already been checked.",
        repeated=True,
    ),
    Flag(
        "iface-can-reach",
        "detect interface to use (IP or name) for inter-host communication based on which will be used for provided IP. This is exactly the interface to use of command 'ip route get <ip-address>'",
    ),
    Flag("subnet-file", "filename where env variables (subnet, MTU, ... ) will be written to"),
    Flag("public-ip", "IP accessible by other nodes for inter-host communication"),
    Flag("public-ipv6", "IPv6 accessible by other nodes for inter-host communication"),
    Flag(
        "subnet-lease-renew-margin",
        "subnet lease renewal margin, in minutes, ranging from 1 to 1439",
    ),
    Flag("ip-masq", "setup IP masquerade rule for traffic destined outside of overlay network"),
    Flag(
        "ip-masq-fully-random-disable",
        "disable fully random source port allocation for the IP masquerade rules",
    ),
    Flag("kube-subnet-mgr", "contact the Kubernetes API for subnet assignment instead of etcd."),
    Flag(
        "kube-api-url",
        "Kubernetes API server URL. Does not need to be specified if flannel is running in a pod.",
    ),
    Flag(
        "kube-annotation-prefix",
        'Kubernetes annotation prefix. Can contain single slash "/", otherwise it will be appended at the end.',
    ),
    Flag(
        "kubeconfig-file",
        "kubeconfig file location. Does not need to be specified if flannel is running in a pod.",
    ),
    Flag("version", "print version and exit"),
    Flag("healthz-ip", "the IP address for healthz server to listen"),
    Flag("healthz-port", "the port for healthz server to listen(0 to disable)"),
    Flag("iptables-resync", "resync period for iptables rules, in seconds"),
    Flag("iptables-forward-rules", "add default accept rules to FORWARD chain in iptables"),
    Flag("net-config-path", "path to the network configuration file"),
    Flag("set-node-network-unavailable", "set NodeNetworkUnavailable after ready"),
    Flag("ip-blackhole-route", "add blackhole route for the subnet on this node"),
    # klog's flags that flanneld copies onto its own flag set.
    Flag("v", "number for the log level verbosity"),
    Flag("vmodule", "comma-separated list of pattern=N settings for file-filtered logging"),
    Flag("log_backtrace_at", "when logging hits line file:N, emit a stack trace"),
    # pyflannel additions.
    Flag(
        "subnet-lease-ttl",
        "pyflannel: TTL in seconds of the etcd lease attached to the subnet key (flanneld: fixed 24h)",
    ),
    Flag(
        "reconcile-interval",
        "pyflannel: seconds between datapath reconciles against the kernel (0 to disable)",
    ),
)
_BY_NAME = {flag.name: flag for flag in FLAGS}


def _attr(name: str) -> str:
    return name.replace("-", "_")


def _convert(flag: Flag, text: str) -> Any:
    default = flag.default
    if isinstance(default, bool):
        if text in ("1", "t", "T", "TRUE", "true", "True"):
            return True
        if text in ("0", "f", "F", "FALSE", "false", "False"):
            return False
        raise FlagError(f'invalid boolean value "{text}" for -{flag.name}: parse error')
    if isinstance(default, int):
        try:
            return int(text, 0)
        except ValueError:
            raise FlagError(f'invalid value "{text}" for flag -{flag.name}: parse error') from None
    return text


def parse_flags(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Options:
    """Parse flanneld-style arguments, then fill unset flags from FLANNELD_<NAME>."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    repeated: dict[str, list[str]] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--" or not arg.startswith("-") or arg in ("-", "--"):
            # Go stops at the first non-flag argument; flanneld takes no positionals.
            break
        body = arg[2:] if arg.startswith("--") else arg[1:]
        name, has_value, inline = body.partition("=")
        if name in ("h", "help"):
            values["help"] = True
            continue
        flag = _BY_NAME.get(name)
        if flag is None:
            raise FlagError(f"flag provided but not defined: -{name}")
        if isinstance(flag.default, bool) and not has_value:
            values[_attr(name)] = True
            continue
        if not has_value:
            if i >= len(args):
                raise FlagError(f"flag needs an argument: -{name}")
            inline = args[i]
            i += 1
        if flag.repeated:
            repeated.setdefault(name, []).append(inline)
        else:
            values[_attr(name)] = _convert(flag, inline)
    for name, items in repeated.items():
        values[_attr(name)] = tuple(items)

    for flag in FLAGS:
        attr = _attr(flag.name)
        if attr in values:
            continue
        env_name = "FLANNELD_" + flag.name.upper().replace("-", "_")
        if env_name in env:
            raw = env[env_name]
            try:
                values[attr] = (
                    tuple(v for v in raw.split(",") if v) if flag.repeated else _convert(flag, raw)
                )
            except FlagError as err:
                raise FlagError(f'invalid value "{raw}" for {env_name}: {err}') from None
    known = {f.name for f in fields(Options)}
    return Options(**{k: v for k, v in values.items() if k in known})


def usage(program: str) -> str:
    lines = [f"Usage: {program} [OPTION]..."]
    for flag in sorted(FLAGS, key=lambda f: f.name):
        kind = (
            ""
            if isinstance(flag.default, bool)
            else (
                " value"
                if flag.repeated
                else (" int" if isinstance(flag.default, int) else " string")
            )
        )
        lines.append(f"  -{flag.name}{kind}")
        default = "" if flag.default in ("", (), False, 0) else f" (default {flag.default!r})"
        lines.append(f"    \t{flag.usage}{default}")
    return "\n".join(lines) + "\n"


def validate(opts: Options) -> None:
    """The checks flanneld makes before it touches anything (§0 step 3)."""
    if not 0 < opts.subnet_lease_renew_margin < 1440:
        raise FlagError("Invalid subnet-lease-renew-margin option, out of acceptable range")
    if opts.subnet_lease_ttl <= 0:
        raise FlagError("subnet-lease-ttl must be positive")
