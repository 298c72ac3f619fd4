"""The flannel plugin's ADD and DEL, as flannel's Go plugin (flannel-io/cni-plugin
flannel_linux.go: doCmdAdd, cmdDel); GC and STATUS replay DEL and read subnet.env through here.

Loaded at every pod operation: only cheap standard-library modules at the top, the rest inside
the command that needs it.
"""

from __future__ import annotations

from pyflannel_runtime.cni import skel
from pyflannel_runtime.cni.skel import CniError
from pyflannel_runtime.gojson.core import GoJSONError, decode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import BinaryIO

    from pyflannel_runtime.wire.subnet_env import CniSubnetEnv

_SUBNET_ENV_HINT = ". Check the flannel pod log for this node."
# The bridge plugin's default (plugins/main/bridge/bridge.go: defaultBrName).
_DEFAULT_BRIDGE = "cni0"


def _plain(msg: str) -> CniError:
    """A plain Go error returned from cmdAdd/cmdDel: skel reports it as an internal error."""
    return CniError(skel.ERR_INTERNAL, msg)


def load_subnet_env(path: str) -> CniSubnetEnv:
    from pyflannel_runtime.fsutil import read_small_file
    from pyflannel_runtime.wire.subnet_env import parse_cni_subnet_env

    try:
        text = read_small_file(path).decode("utf-8", errors="replace")
    except OSError as err:  # a PathError: Go's text
        raise ValueError(str(err)) from None
    return parse_cni_subnet_env(text, path)


def cmd_add(environ: Mapping[str, str], stdin: bytes, stdout: BinaryIO, stderr: BinaryIO) -> None:
    from pyflannel_runtime.cni.delegate import (
        DelegateError,
        build_delegate,
        check_delegate,
        encode_delegate,
    )
    from pyflannel_runtime.cni.invoke import InvokeError, exec_plugin, find_in_path
    from pyflannel_runtime.cni.plugin_config import NetConfError, parse_netconf
    from pyflannel_runtime.cni.state import make_config_durable, save_config

    try:
        conf = parse_netconf(stdin)
    except NetConfError as err:
        raise _plain(f"failed to load flannel netconf file: {err}") from None
    try:
        subnet_env = load_subnet_env(conf.subnet_file)
    except ValueError as err:  # SubnetEnvError is a ValueError
        raise _plain(f"failed to load flannel 'subnet.env' file: {err}{_SUBNET_ENV_HINT}") from None
    try:
        if conf.delegate is not None:
            check_delegate(conf.delegate)
        delegate = build_delegate(conf, subnet_env)
    except DelegateError as err:
        raise _plain(str(err)) from None

    config = encode_delegate(delegate)
    stderr.write(b"delegateAdd: netconf sent to delegate plugin:\n" + config)
    container_id = environ["CNI_CONTAINERID"]
    try:
        saved = save_config(conf.data_dir, container_id, config)
    except OSError as err:
        raise _plain(str(err)) from None
    try:
        plugin = find_in_path(str(delegate["type"]), environ.get("CNI_PATH", ""))
    except InvokeError as err:
        raise _plain(f"failed to delegate add: {err}") from None
    try:
        # The file is in place before the delegate starts (a DEL finds it whatever happens
        # next); it is on disk before ADD succeeds, its fsyncs overlapping the delegate's work.
        result, plugin_stderr = exec_plugin(
            "ADD", plugin, config, environ, meanwhile=lambda: make_config_durable(saved)
        )
    except OSError as err:  # the fsync failed: the runtime will DEL, which finds the file
        raise _plain(str(err)) from None
    except CniError as err:
        if not _cleared_stale_gateway(err, delegate, subnet_env, stderr):
            raise
        # The failed ADD left the container's interface behind; DEL takes it, as a runtime would.
        exec_plugin("DEL", plugin, config, environ)
        result, plugin_stderr = exec_plugin("ADD", plugin, config, environ)
    stderr.write(plugin_stderr)
    _check_result(result)
    stdout.write(result)


def _cleared_stale_gateway(
    error: CniError, delegate: dict[str, object], subnet_env: CniSubnetEnv, stderr: BinaryIO
) -> bool:
    """True when the bridge delegate failed on the previous subnet's gateway, and it is gone
    now (`stale_gateway`)."""
    from pyflannel_runtime.cni.stale_gateway import is_stale_gateway_error, remove_stale_gateways

    if delegate["type"] != "bridge" or not is_stale_gateway_error(error):
        return False
    bridge = str(delegate.get("bridge") or _DEFAULT_BRIDGE)
    subnets = [s for s in (subnet_env.subnet, subnet_env.ipv6_subnet) if s is not None]
    try:
        removed = remove_stale_gateways(
            bridge, [*subnet_env.networks, *subnet_env.ipv6_networks], subnets
        )
    except OSError as err:
        stderr.write(f"removing the previous subnet's gateway from {bridge}: {err}\n".encode())
        return False
    if not removed:
        return False
    stderr.write(
        f"{bridge} held the gateway of this node's previous subnet ({', '.join(removed)}):"
        " removed it, running the delegate again\n".encode()
    )
    return True


def _check_result(result: bytes) -> None:
    """libcni parses the delegate's result; one that does not parse fails the ADD."""
    try:
        parsed = decode(result)
    except GoJSONError as err:
        raise _plain(
            f"failed to delegate add: decoding version from network config: {err}"
        ) from None
    if not isinstance(parsed, dict):
        raise _plain("failed to delegate add: delegate returned a result that is not an object")


def cmd_del(environ: Mapping[str, str], stdin: bytes, stderr: BinaryIO) -> str | None:
    """flannel's cmdDel. Returns why the saved config was dropped without a delegate DEL (it
    does not parse), None otherwise."""
    from pyflannel_runtime.cni.invoke import InvokeError, exec_plugin, find_in_path
    from pyflannel_runtime.cni.plugin_config import NetConfError, parse_netconf, saved_delegate_type
    from pyflannel_runtime.cni.state import read_config, remove_config
    from pyflannel_runtime.fsutil import FileTooLarge

    try:
        conf = parse_netconf(stdin)
    except NetConfError as err:
        raise _plain(str(err)) from None
    container_id = environ["CNI_CONTAINERID"]
    try:
        saved = read_config(conf.data_dir, container_id)
        if saved is None:
            return None  # already deleted, or never added: DEL must succeed
        plugin_type = saved_delegate_type(saved)
    except (NetConfError, FileTooLarge) as err:
        # Nothing to hand to a delegate: flannel logs this and succeeds, leaving the interface
        # until a reboot. It also leaves the file; removing it lets the runtime's next DEL of
        # this container succeed cleanly instead of parsing it again.
        reason = f"failed to parse netconf: {err}"
        stderr.write(reason.encode())
        remove_config(conf.data_dir, container_id)
        return reason
    except OSError as err:  # a PathError: Go's text
        raise _plain(str(err)) from None
    try:
        try:
            plugin = find_in_path(plugin_type, environ.get("CNI_PATH", ""))
        except InvokeError as err:
            raise _plain(str(err)) from None
        _, plugin_stderr = exec_plugin("DEL", plugin, saved, environ)
        stderr.write(plugin_stderr)
    finally:
        # flannel removes the file even when the delegate's DEL fails
        remove_config(conf.data_dir, container_id)
    return None
