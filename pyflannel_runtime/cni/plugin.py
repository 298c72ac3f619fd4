"""The ``flannel`` CNI plugin: ADD, DEL, CHECK, GC, STATUS and VERSION, as flannel's Go plugin.

This module runs once per pod operation. Every import here is on the start-up path, so only
cheap standard-library modules are used and the subnet.env reader (which pulls in
``ipaddress`` and ``dataclasses``) is imported by ADD alone.
"""

from __future__ import annotations

import os
import sys

from pyflannel_runtime import __version__
from pyflannel_runtime.cni import skel
from pyflannel_runtime.cni.skel import CniError
from pyflannel_runtime.gojson.core import MAX_DOCUMENT_BYTES, GoJSONError, decode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import BinaryIO

    from pyflannel_runtime.model.subnet_env import CniSubnetEnv

_GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le"}
_SUBNET_ENV_HINT = ". Check the flannel pod log for this node."


def about() -> str:
    machine = os.uname().machine
    return f"CNI Plugin flannel version {__version__} (linux/{_GO_ARCH.get(machine, machine)}) commit unknown"


def _plain(msg: str) -> CniError:
    """A plain Go error returned from cmdAdd/cmdDel: skel reports it as an internal error."""
    return CniError(skel.ERR_INTERNAL, msg)


def _load_subnet_env(path: str) -> CniSubnetEnv:
    from pyflannel_runtime.fsutil import read_small_file
    from pyflannel_runtime.model.subnet_env import parse_cni_subnet_env

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
    from pyflannel_runtime.cni.netconf import NetConfError, parse_netconf
    from pyflannel_runtime.cni.state import save_config

    try:
        conf = parse_netconf(stdin)
    except NetConfError as err:
        raise _plain(f"failed to load flannel netconf file: {err}") from None
    try:
        subnet_env = _load_subnet_env(conf.subnet_file)
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
        save_config(conf.data_dir, container_id, config)
    except OSError as err:
        raise _plain(str(err)) from None
    try:
        plugin = find_in_path(str(delegate["type"]), environ.get("CNI_PATH", ""))
    except InvokeError as err:
        raise _plain(f"failed to delegate add: {err}") from None
    result, plugin_stderr = exec_plugin("ADD", plugin, config, environ)
    stderr.write(plugin_stderr)
    _check_result(result)
    stdout.write(result)


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


def cmd_del(environ: Mapping[str, str], stdin: bytes, stderr: BinaryIO) -> None:
    from pyflannel_runtime.cni.invoke import InvokeError, exec_plugin, find_in_path
    from pyflannel_runtime.cni.netconf import NetConfError, parse_netconf, saved_delegate_type
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
            return  # already deleted, or never added: DEL must succeed
        plugin_type = saved_delegate_type(saved)
    except (NetConfError, FileTooLarge) as err:
        # Nothing to hand to a delegate: flannel logs this and succeeds, leaving the interface
        # until a reboot. It also leaves the file; removing it lets the runtime's next DEL of
        # this container succeed cleanly instead of parsing it again.
        stderr.write(f"failed to parse netconf: {err}".encode())
        remove_config(conf.data_dir, container_id)
        return
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


def _check_netns(environ: Mapping[str, str]) -> None:
    """skel refuses a CNI_NETNS that is the plugin's own network namespace."""
    if (
        environ.get("CNI_NETNS_OVERRIDE", "").upper() == "TRUE"
        or environ.get("CNI_NETNS_OVERRIDE") == "1"
    ):
        return
    try:
        target = os.stat(environ.get("CNI_NETNS", ""))
        own = os.stat("/proc/self/ns/net")
    except (OSError, ValueError):
        return
    if (target.st_dev, target.st_ino) == (own.st_dev, own.st_ino):
        raise CniError(
            skel.ERR_INVALID_NETNS, "plugin's netns and netns from CNI_NETNS should not be the same"
        )


def dispatch(
    environ: Mapping[str, str], stdin: BinaryIO, stdout: BinaryIO, stderr: BinaryIO
) -> None:
    """skel's pluginMain: raises CniError for every failure."""
    try:
        command = skel.check_environment(environ)
    except CniError as err:
        if err.code == skel.ERR_INVALID_ENVIRONMENT_VARIABLES and not environ.get("CNI_COMMAND"):
            versions = ", ".join(skel.SUPPORTED_VERSIONS)
            stderr.write(f"{about()}\nCNI protocol versions supported: {versions}\n".encode())
            return
        raise
    if command == "VERSION":
        stdout.write(skel.version_json())
        return
    data = stdin.read(MAX_DOCUMENT_BYTES + 1)  # one byte more is enough for the decoder to refuse
    skel.check_network_config(data)
    if command in ("ADD", "DEL"):
        skel.check_version_supported(skel.config_version(data))
        if command == "ADD":
            cmd_add(environ, data, stdout, stderr)
        else:
            cmd_del(environ, data, stderr)
        _check_netns(environ)
    elif command in ("CHECK", "GC", "STATUS"):
        version = skel.config_version(data)
        skel.check_version_at_least(version, "0.4.0" if command == "CHECK" else "1.1.0", command)
        skel.check_version_supported(version)  # flannel's CHECK, GC and STATUS do nothing more
    else:
        raise CniError(skel.ERR_INVALID_ENVIRONMENT_VARIABLES, f"unknown CNI_COMMAND: {command}")


def run(environ: Mapping[str, str], stdin: BinaryIO, stdout: BinaryIO, stderr: BinaryIO) -> int:
    """One plugin invocation; the exit status. Errors become CNI error results on stdout."""
    try:
        dispatch(environ, stdin, stdout, stderr)
    except CniError as err:
        stdout.write(err.to_json())
        return 1
    except Exception as err:  # a bug must still produce a CNI error result, never a traceback
        stdout.write(CniError(skel.ERR_INTERNAL, f"{type(err).__name__}: {err}").to_json())
        return 1
    return 0


def main() -> int:
    return run(os.environ, sys.stdin.buffer, sys.stdout.buffer, sys.stderr.buffer)


if __name__ == "__main__":
    sys.exit(main())
