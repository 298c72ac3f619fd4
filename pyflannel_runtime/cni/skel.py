"""The CNI calling convention as libcni's skel package (v1.3.0) implements it for flannel.

Environment checks, network-config checks, version negotiation and the JSON error result.
"""

from __future__ import annotations

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.gojson.core import GoJSONError, decode, go_kind, lookup
from pyflannel_runtime.gojson.encode import marshal
from pyflannel_runtime.gojson.strconv import go_quote

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

SUPPORTED_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
SPEC_VERSION = "1.1.0"

# Well-known error codes from the CNI specification
ERR_INCOMPATIBLE_CNI_VERSION = 1
ERR_UNKNOWN_CONTAINER = 3
ERR_INVALID_ENVIRONMENT_VARIABLES = 4
ERR_IO_FAILURE = 5
ERR_DECODING_FAILURE = 6
ERR_INVALID_NETWORK_CONFIG = 7
ERR_INVALID_NETNS = 8
ERR_INTERNAL = 999  # what skel reports for a plain (non-CNI) error from the plugin

COMMANDS = ("ADD", "CHECK", "DEL", "GC", "STATUS", "VERSION")
_ENV_REQUIRED = {
    "CNI_COMMAND": ("ADD", "CHECK", "DEL", "GC", "STATUS"),
    "CNI_CONTAINERID": ("ADD", "CHECK", "DEL"),
    "CNI_NETNS": ("ADD", "CHECK"),
    "CNI_IFNAME": ("ADD", "CHECK", "DEL"),
    "CNI_ARGS": (),
    "CNI_PATH": ("ADD", "CHECK", "DEL", "GC", "STATUS"),
    "CNI_NETNS_OVERRIDE": (),
}
_NAME_FIRST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_NAME_REST = _NAME_FIRST | frozenset("_.-")
_MAX_IFNAME = 15


class CniError(PyflannelError):
    """A CNI error result: printed as JSON on stdout, with a non-zero exit."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details

    def to_json(self) -> bytes:
        """types.Error printed with json.MarshalIndent(obj, "", "    "), no trailing newline."""
        fields = [("code", self.code), ("msg", self.msg)]
        if self.details:
            fields.append(("details", self.details))
        body = ",\n".join(f"    {marshal(k).decode()}: {marshal(v).decode()}" for k, v in fields)
        return f"{{\n{body}\n}}".encode()


def _valid_name(name: str) -> bool:
    return bool(name) and name[0] in _NAME_FIRST and all(c in _NAME_REST for c in name[1:])


def _check_container_id(value: str) -> None:
    if not _valid_name(value):
        raise CniError(
            ERR_INVALID_ENVIRONMENT_VARIABLES, "invalid characters in containerID", value
        )


def _check_ifname(value: str) -> None:
    if len(value.encode("utf-8", errors="surrogateescape")) > _MAX_IFNAME:
        raise CniError(
            ERR_INVALID_ENVIRONMENT_VARIABLES,
            "interface name is too long",
            f"interface name should be less than {_MAX_IFNAME + 1} characters",
        )
    if value in (".", ".."):
        raise CniError(ERR_INVALID_ENVIRONMENT_VARIABLES, "interface name is . or ..", "")
    if any(c in "/:" or c.isspace() for c in value):
        raise CniError(
            ERR_INVALID_ENVIRONMENT_VARIABLES,
            "interface name contains / or : or whitespace characters",
        )


def check_environment(environ: Mapping[str, str]) -> str:
    """The CNI_COMMAND, after skel's checks of the CNI_* variables it needs."""
    command = environ.get("CNI_COMMAND", "")
    missing = []
    for name, required_for in _ENV_REQUIRED.items():
        value = environ.get(name, "")
        if not value:
            if command in required_for or name == "CNI_COMMAND":
                missing.append(name)
        elif command in required_for and name == "CNI_CONTAINERID":
            _check_container_id(value)
        elif command in required_for and name == "CNI_IFNAME":
            _check_ifname(value)
    if missing:
        raise CniError(
            ERR_INVALID_ENVIRONMENT_VARIABLES,
            f"required env variables [{','.join(missing)}] missing",
        )
    return command


def check_stdin_config(stdin: bytes) -> None:
    """skel's validateConfig: the config decodes and carries a valid network name."""
    try:
        conf = decode(stdin)
    except GoJSONError as err:
        raise CniError(ERR_DECODING_FAILURE, f"error unmarshall network config: {err}") from None
    if conf is not None and not isinstance(conf, dict):
        raise CniError(
            ERR_DECODING_FAILURE,
            f"error unmarshall network config: json: cannot unmarshal {go_kind(conf)}"
            ' into Go value of type struct { Name string "json:\\"name\\"" }',
        )
    name = lookup(conf or {}, "name")
    if name is not None and not isinstance(name, str):
        raise CniError(
            ERR_DECODING_FAILURE,
            f"error unmarshall network config: json: cannot unmarshal {go_kind(name)}"
            " into Go struct field .name of type string",
        )
    if not name:
        raise CniError(ERR_INVALID_NETWORK_CONFIG, "missing network name")
    if not _valid_name(name):
        raise CniError(ERR_INVALID_NETWORK_CONFIG, "invalid characters found in network name", name)


def config_version(stdin: bytes) -> str:
    """version.ConfigDecoder: the config's cniVersion, "0.1.0" when empty."""
    try:
        conf = decode(stdin)
    except GoJSONError as err:
        raise CniError(
            ERR_DECODING_FAILURE, f"decoding version from network config: {err}"
        ) from None
    value = lookup(conf, "cniVersion") if isinstance(conf, dict) else None
    if value is not None and not isinstance(value, str):
        raise CniError(
            ERR_DECODING_FAILURE,
            f"decoding version from network config: json: cannot unmarshal {go_kind(value)}"
            " into Go struct field .cniVersion of type string",
        )
    return value or "0.1.0"


def check_version_supported(version: str) -> None:
    if version not in SUPPORTED_VERSIONS:
        supported = " ".join(go_quote(v) for v in SUPPORTED_VERSIONS)
        raise CniError(
            ERR_INCOMPATIBLE_CNI_VERSION,
            "incompatible CNI versions",
            f"config is {go_quote(version)}, plugin supports [{supported}]",
        )


def _parse_version(version: str) -> tuple[int, int, int]:
    parts = version.split(".")
    if len(parts) >= 4:
        raise CniError(ERR_DECODING_FAILURE, f"invalid version {go_quote(version)}: too many parts")
    numbers = [0, 0, 0]
    for index, (label, part) in enumerate(zip(("major", "minor", "micro"), parts, strict=False)):
        numbers[index] = _atoi(part, label)
    return numbers[0], numbers[1], numbers[2]


def _atoi(part: str, label: str) -> int:
    """strconv.Atoi, whose errors skel reports verbatim."""
    digits = part[1:] if part[:1] in ("+", "-") else part
    if not digits or not digits.isascii() or not digits.isdigit():
        raise CniError(
            ERR_DECODING_FAILURE,
            f"failed to convert {label} version part {go_quote(part)}:"
            f" strconv.Atoi: parsing {go_quote(part)}: invalid syntax",
        )
    value = int(part)
    if not -(2**63) <= value < 2**63:
        raise CniError(
            ERR_DECODING_FAILURE,
            f"failed to convert {label} version part {go_quote(part)}:"
            f" strconv.Atoi: parsing {go_quote(part)}: value out of range",
        )
    return value


def check_version_at_least(config: str, minimum: str, command: str) -> None:
    """CHECK, GC and STATUS need a config version >= ``minimum`` and a plugin version >= config."""
    if _parse_version(config) < _parse_version(minimum):
        raise CniError(ERR_INCOMPATIBLE_CNI_VERSION, f"config version does not allow {command}")
    if not any(_parse_version(v) >= _parse_version(config) for v in SUPPORTED_VERSIONS):
        raise CniError(ERR_INCOMPATIBLE_CNI_VERSION, f"plugin version does not allow {command}")


def version_json() -> bytes:
    """What ``VERSION`` prints (json.Encoder adds the newline)."""
    info = {"cniVersion": SPEC_VERSION, "supportedVersions": list(SUPPORTED_VERSIONS)}
    return marshal(info) + b"\n"
