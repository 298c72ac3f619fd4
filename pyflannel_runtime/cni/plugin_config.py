"""The flannel plugin's input network configuration, decoded as Go's json.Unmarshal does.

Keys match struct fields case-insensitively (an exact match first), ``null`` leaves a field at
its default, and a value of the wrong JSON kind is an error with Go's wording.
"""

from __future__ import annotations

from pyflannel_runtime import DEFAULT_SUBNET_FILE, PyflannelError
from pyflannel_runtime.gojson.core import GoJSONError, decode, fold_fields, go_kind

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_DATA_DIR = "/var/lib/cni/flannel"

# JSON name -> Go type, for the fields of flannel's NetConf (types.NetConf embedded)
_STRING = "string"
_OBJECT = "map[string]interface {}"
_FIELDS = {
    "cniVersion": _STRING,
    "name": _STRING,
    "type": _STRING,
    "capabilities": "map[string]bool",
    "ipam": _OBJECT,
    "dns": "types.DNS",
    "prevResult": _OBJECT,
    "cni.dev/valid-attachments": "[]types.GCAttachment",
    "subnetFile": _STRING,
    "dataDir": _STRING,
    "delegate": _OBJECT,
    "runtimeConfig": _OBJECT,
}
_DNS_FIELDS = {
    "nameservers": "[]string",
    "domain": _STRING,
    "search": "[]string",
    "options": "[]string",
}


class NetConfError(PyflannelError, ValueError):
    pass


class FlannelNetConf:
    """The fields of flannel's NetConf the plugin uses (a plain class: dataclasses is slow to import)."""

    __slots__ = (
        "cni_version",
        "data_dir",
        "delegate",
        "ipam",
        "name",
        "runtime_config",
        "subnet_file",
    )

    def __init__(
        self,
        *,
        name: str,
        cni_version: str,
        subnet_file: str,
        data_dir: str,
        delegate: dict[str, Any] | None,
        ipam: dict[str, Any] | None,
        runtime_config: dict[str, Any] | None,
    ) -> None:
        self.name = name
        self.cni_version = cni_version
        self.subnet_file = subnet_file
        self.data_dir = data_dir
        self.delegate = delegate
        self.ipam = ipam
        self.runtime_config = runtime_config


def _type_error(value: Any, where: str, go_type: str) -> NetConfError:
    return NetConfError(f"json: cannot unmarshal {go_kind(value)} into {where} of type {go_type}")


def _check_kind(value: Any, go_type: str, where: str) -> None:
    """Raise Go's UnmarshalTypeError when ``value`` cannot be stored in ``go_type``."""
    if value is None:
        return
    if go_type == _STRING:
        ok = isinstance(value, str)
    elif go_type == "bool":
        ok = isinstance(value, bool)
    elif go_type.startswith("map["):
        if not isinstance(value, dict):
            raise _type_error(value, where, go_type)
        if go_type == "map[string]bool":
            for item in value.values():
                _check_kind(item, "bool", where)
        return
    elif go_type.startswith("[]"):
        if not isinstance(value, list):
            raise _type_error(value, where, go_type)
        element = "string" if go_type == "[]string" else "types.GCAttachment"
        for item in value:
            _check_kind(item, element, where)
        return
    else:
        ok = isinstance(value, dict)
        if ok and go_type == "types.DNS":
            for field, item in fold_fields(value.items(), _DNS_FIELDS).items():
                _check_kind(item, _DNS_FIELDS[field], f"Go struct field DNS.{field}")
    if not ok:
        raise _type_error(value, where, go_type)


def parse_netconf(data: bytes) -> FlannelNetConf:
    """flannel's loadFlannelNetConf; errors read ``failed to load netconf: ...``."""
    try:
        obj = decode(data)
    except GoJSONError as err:
        raise NetConfError(f"failed to load netconf: {err}") from None
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise NetConfError(
            f"failed to load netconf: json: cannot unmarshal {go_kind(obj)}"
            " into Go value of type main.NetConf"
        )
    fields = fold_fields(obj.items(), _FIELDS)
    try:
        for field, value in fields.items():
            _check_kind(value, _FIELDS[field], f"Go struct field NetConf.{field}")
    except NetConfError as err:
        raise NetConfError(f"failed to load netconf: {err}") from None

    def text(field: str, default: str) -> str:
        value = fields.get(field)
        return value if isinstance(value, str) else default

    def mapping(field: str) -> dict[str, Any] | None:
        value = fields.get(field)
        return value if isinstance(value, dict) else None

    return FlannelNetConf(
        name=text("name", ""),
        cni_version=text("cniVersion", ""),
        subnet_file=text("subnetFile", DEFAULT_SUBNET_FILE),
        data_dir=text("dataDir", DEFAULT_DATA_DIR),
        delegate=mapping("delegate"),
        ipam=mapping("ipam"),
        runtime_config=mapping("runtimeConfig"),
    )


def saved_delegate_type(data: bytes) -> str:
    """The ``type`` of a saved delegate config, decoded as a CNI types.NetConf."""
    try:
        obj = decode(data)
    except GoJSONError as err:
        raise NetConfError(str(err)) from None
    if obj is None:
        return ""
    if not isinstance(obj, dict):
        raise NetConfError(
            f"json: cannot unmarshal {go_kind(obj)} into Go value of type types.NetConf"
        )
    fields = fold_fields(obj.items(), _FIELDS)
    for field, value in fields.items():
        if field in ("subnetFile", "dataDir", "delegate", "runtimeConfig"):
            continue  # not fields of types.NetConf
        if field == "ipam":
            _check_kind(value, "types.IPAM", "Go struct field NetConf.ipam")
            if isinstance(value, dict):
                ipam_type = fold_fields(value.items(), ("type",)).get("type")
                _check_kind(ipam_type, _STRING, "Go struct field IPAM.ipam.type")
        else:
            _check_kind(value, _FIELDS[field], f"Go struct field NetConf.{field}")
    plugin_type = fields.get("type")
    return plugin_type if isinstance(plugin_type, str) else ""
