"""flanneld's command line: the same flags, defaults and FLANNELD_* environment.

flannel-io/flannel main.go: init (the flags, parsed), usage, main (flagutil.SetFlagsFromEnv).

Go's flag package accepts `-flag`, `--flag`, `-flag=value` and `-flag value`, and bool flags
only as `-flag` or `-flag=<bool>`. Any flag not given on the command line is read from
FLANNELD_<NAME>. flanneld exits 0 after printing usage on a bad flag (its usage function
calls os.Exit(0)); pyflanneld exits 2 instead, so a typo in a unit file is not a silent success.

flanneld checks one value itself (the renewal margin, main.go main) and leaves the rest to
the code that uses them, so a bad port or address shows up late, as a panic or as endless
retries. `validate` checks every value up front, before anything is contacted or changed.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from pyflannel_runtime import DEFAULT_SUBNET_FILE, PyflannelError
from pyflannel_runtime.backend_spec import tx_offload
from pyflannel_runtime.gojson.strconv import go_quote
from pyflannel_runtime.subnet.endpoint_url import split_http_url
from pyflannel_runtime.subnet.kube.annotations import normalize_prefix


class FlagError(PyflannelError, ValueError):
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
    subnet_file: str = DEFAULT_SUBNET_FILE
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
    vxlan_tx_checksum_offload: str = tx_offload.DEFAULT_MODE
    metrics: bool = True
    help: bool = field(default=False, compare=False)

    @property
    def etcd_endpoint_list(self) -> list[str]:
        return [e for e in self.etcd_endpoints.split(",") if e]


_DEFAULTS = {f.name: f.default for f in fields(Options)}


# A check raises ValueError with the reason a value is unusable, or FlagError with the whole
# message where flanneld has one of its own.
Check = Callable[[Any], None]


@dataclass(frozen=True)
class Flag:
    name: str
    usage: str
    repeated: bool = False
    check: Check | None = None

    @property
    def default(self) -> Any:
        return _DEFAULTS[_attr(self.name)]


# Go's flag package parses int flags as int64.
_INT64 = (-(2**63), 2**63 - 1)
# etcd refuses longer leases (its MaxLeaseTTL).
_MAX_LEASE_TTL = 9_000_000_000


def _in_range(low: int, high: int) -> Check:
    def check(value: int) -> None:
        if not low <= value <= high:
            raise ValueError(f"out of range ({low} to {high})")

    return check


def _at_least(low: int) -> Check:
    def check(value: int) -> None:
        if value < low:
            raise ValueError(f"must be {low} or more")

    return check


def _renew_margin(value: int) -> None:
    if not 0 < value < 24 * 60:
        raise FlagError("Invalid subnet-lease-renew-margin option, out of acceptable range")


def _ip(version: int | None) -> Check:
    """An address literal as Go's net.ParseIP reads it (no zone; v4-mapped IPv6 is IPv4)."""
    kind = f"IPv{version}" if version else "IP"

    def check(text: str) -> None:
        try:
            address = ipaddress.ip_address(text) if "%" not in text else None
        except ValueError:
            address = None
        mapped = getattr(address, "ipv4_mapped", None)
        if address is None or version not in (None, (mapped or address).version):
            raise ValueError(f"not an {kind} address")

    return check


def _optional(check: Check) -> Check:
    def optional(text: str) -> None:
        if text:
            check(text)

    return optional


def _interface(text: str) -> None:
    """An address, or a name the kernel could have given a link (IFNAMSIZ, no '/' or space)."""
    try:
        _ip(None)(text)
    except ValueError:
        if not 0 < len(text.encode()) < 16 or text in (".", "..") or re.search(r"[/\s:]", text):
            raise ValueError("neither an IP address nor an interface name") from None


def _regex(text: str) -> None:
    try:
        re.compile(text)
    except re.error as err:
        raise ValueError(f"not a valid regular expression: {err}") from None


def _etcd_endpoints(text: str) -> None:
    endpoints = [e for e in text.split(",") if e]
    if not endpoints:
        raise ValueError("no etcd endpoint given")
    for endpoint in endpoints:
        split_http_url(endpoint, 0)


def _url(text: str) -> None:
    split_http_url(text, 0)


def _path(text: str) -> None:
    if not text or text.endswith("/"):
        raise ValueError("not a file name")


def _annotation_prefix(text: str) -> None:
    try:
        normalize_prefix(text)
    except ValueError as err:
        raise FlagError(str(err)) from None


# Order follows flanneld's `--help`; names are flanneld's, so unit files and manifests carry over.
FLAGS: tuple[Flag, ...] = (
    Flag("etcd-endpoints", "a comma-delimited list of etcd endpoints", check=_etcd_endpoints),
    Flag("etcd-prefix", "etcd prefix"),
    Flag("etcd-keyfile", "SSL key file used to secure etcd communication"),
    Flag("etcd-certfile", "SSL certification file used to secure etcd communication"),
    Flag("etcd-cafile", "SSL Certificate Authority file used to secure etcd communication"),
    Flag("etcd-username", "username for BasicAuth to etcd"),
    Flag("etcd-password", "password for BasicAuth to etcd"),
    Flag(
        "iface",
        "interface to use (IP or name) for inter-host communication. Can be specified multiple"
        " times to check each option in order. Returns the first match found.",
        repeated=True,
        check=_interface,
    ),
    Flag(
        "iface-regex",
        "regex expression to match the first interface to use (IP or name) for inter-host"
        " communication. Can be specified multiple times to check each regex in order. Returns"
        " the first match found. Regexes are checked after specific interfaces specified by the"
        " iface option have already been checked.",
        repeated=True,
        check=_regex,
    ),
    Flag(
        "iface-can-reach",
        "detect interface to use (IP or name) for inter-host communication based on which will"
        " be used for provided IP. This is exactly the interface to use of command 'ip route get"
        " <ip-address>'",
        check=_optional(_ip(None)),
    ),
    Flag(
        "subnet-file",
        "filename where env variables (subnet, MTU, ... ) will be written to",
        check=_path,
    ),
    Flag(
        "public-ip",
        "IP accessible by other nodes for inter-host communication",
        check=_optional(_ip(4)),
    ),
    Flag(
        "public-ipv6",
        "IPv6 accessible by other nodes for inter-host communication",
        check=_optional(_ip(6)),
    ),
    Flag(
        "subnet-lease-renew-margin",
        "subnet lease renewal margin, in minutes, ranging from 1 to 1439",
        check=_renew_margin,
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
        check=_optional(_url),
    ),
    Flag(
        "kube-annotation-prefix",
        'Kubernetes annotation prefix. Can contain single slash "/", otherwise it will be appended at the end.',
        check=_annotation_prefix,
    ),
    Flag(
        "kubeconfig-file",
        "kubeconfig file location. Does not need to be specified if flannel is running in a pod.",
    ),
    Flag("version", "print version and exit"),
    Flag("healthz-ip", "the IP address for healthz server to listen", check=_optional(_ip(None))),
    Flag(
        "healthz-port",
        "the port for healthz server to listen(0 to disable)",
        check=_in_range(0, 65535),
    ),
    Flag(
        "iptables-resync",
        "resync period for iptables rules, in seconds",
        check=_at_least(1),
    ),
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
        check=_in_range(1, _MAX_LEASE_TTL),
    ),
    Flag(
        "reconcile-interval",
        "pyflannel: seconds between datapath reconciles against the kernel (0 to disable)",
        check=_at_least(0),
    ),
    Flag(
        "vxlan-tx-checksum-offload",
        "pyflannel: tx checksum offload on the vxlan devices: on (the kernel's default), off, or "
        "auto (off once the connectivity suite saw UDP checksums fail through them)",
        check=tx_offload.check_mode,
    ),
    Flag(
        "metrics",
        "pyflannel: serve Prometheus metrics on /metrics of the healthz server (false: 404 there)",
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
        raise FlagError(f"invalid boolean value {go_quote(text)} for -{flag.name}: parse error")
    if isinstance(default, int):
        try:
            value = int(text, 0)
        except ValueError:
            raise FlagError(
                f"invalid value {go_quote(text)} for flag -{flag.name}: parse error"
            ) from None
        if not _INT64[0] <= value <= _INT64[1]:
            raise FlagError(
                f"invalid value {go_quote(text)} for flag -{flag.name}: value out of range"
            )
        return value
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
        variable = env_name(flag.name)
        if variable in env:
            raw = env[variable]
            try:
                values[attr] = (
                    tuple(v for v in raw.split(",") if v) if flag.repeated else _convert(flag, raw)
                )
            except FlagError as err:
                raise FlagError(f"invalid value {go_quote(raw)} for {variable}: {err}") from None
    known = {f.name for f in fields(Options)}
    return Options(**{k: v for k, v in values.items() if k in known})


def env_name(flag: str) -> str:
    """The variable a flag is read from when it is not given: FLANNELD_ETCD_ENDPOINTS."""
    return "FLANNELD_" + flag.upper().replace("-", "_")


_USAGE_ENVIRONMENT = """
A flag not given on the command line is read from the FLANNELD_* variable in brackets (bool
flags take true or false; -iface and -iface-regex a comma-separated list). Also read:
NODE_NAME, else POD_NAME and POD_NAMESPACE (with -kube-subnet-mgr: this node's name) and
NOTIFY_SOCKET (systemd's READY=1); EVENT_QUEUE_DEPTH and CONT_WHEN_CACHE_NOT_READY are
accepted and change nothing.
"""


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
        lines.append(f"    \t{flag.usage}{default} [${env_name(flag.name)}]")
    return "\n".join(lines) + "\n" + _USAGE_ENVIRONMENT


def validate(opts: Options) -> None:
    """Every value checked before anything is contacted or changed; raises FlagError.

    The etcd-* flags count only without --kube-subnet-mgr and the kube-* flags only with it,
    as flanneld ignores the other store's flags.
    """
    unused = "etcd-" if opts.kube_subnet_mgr else "kube-"
    for flag in FLAGS:
        if flag.check is None or flag.name.startswith(unused):
            continue
        value = getattr(opts, _attr(flag.name))
        for item in value if flag.repeated else (value,):
            try:
                flag.check(item)
            except FlagError:
                raise
            except ValueError as err:
                raise FlagError(
                    f"invalid value {go_quote(str(item))} for flag -{flag.name}: {err}"
                ) from None
    tls_files = (opts.etcd_certfile, opts.etcd_keyfile, opts.etcd_cafile)
    if not opts.kube_subnet_mgr and any(tls_files) and not all(tls_files[:2]):
        # flanneld silently falls back to plain http here.
        raise FlagError(
            "-etcd-certfile and -etcd-keyfile must both be given for TLS to etcd "
            f"(certfile {opts.etcd_certfile!r}, keyfile {opts.etcd_keyfile!r})"
        )
