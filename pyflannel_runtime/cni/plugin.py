"""The ``flannel`` CNI plugin: ADD, DEL, CHECK, GC, STATUS and VERSION, as flannel's Go plugin.

This module runs once per pod operation. Every import here is on the start-up path, so only
modules built into the interpreter are used (``posix``, not ``os``: see ``fsutil``), and what
ADD alone needs (the subnet.env reader, the delegate's builder) is imported by ADD alone
(`commands.cmd_add`).
"""

from __future__ import annotations

import posix
import sys

from pyflannel_runtime import __version__
from pyflannel_runtime.cni import skel
from pyflannel_runtime.cni.commands import cmd_add, cmd_del
from pyflannel_runtime.cni.skel import CniError
from pyflannel_runtime.gojson.core import MAX_DOCUMENT_BYTES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import BinaryIO

_GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le"}


def about() -> str:
    machine = posix.uname().machine
    return f"CNI Plugin flannel version {__version__} (linux/{_GO_ARCH.get(machine, machine)}) commit unknown"


def _check_netns(environ: Mapping[str, str]) -> None:
    """skel refuses a CNI_NETNS that is the plugin's own network namespace."""
    if (
        environ.get("CNI_NETNS_OVERRIDE", "").upper() == "TRUE"
        or environ.get("CNI_NETNS_OVERRIDE") == "1"
    ):
        return
    try:
        target = posix.stat(environ.get("CNI_NETNS", ""))
        own = posix.stat("/proc/self/ns/net")
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
    skel.check_stdin_config(data)
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
        skel.check_version_supported(version)  # flannel's CHECK does nothing more
        if command == "GC":
            from pyflannel_runtime.cni.gc import cmd_gc

            cmd_gc(environ, data, stderr)
        elif command == "STATUS":
            from pyflannel_runtime.cni.status_check import cmd_status

            cmd_status(environ, data, stderr)
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


def process_environment() -> dict[str, str]:
    """``os.environ`` as a plain dict (the file system encoding, undecodable bytes escaped)."""
    encoding = sys.getfilesystemencoding()
    return {
        name.decode(encoding, "surrogateescape"): value.decode(encoding, "surrogateescape")
        for name, value in posix.environ.items()
    }


def main() -> int:
    return run(process_environment(), sys.stdin.buffer, sys.stdout.buffer, sys.stderr.buffer)


if __name__ == "__main__":
    sys.exit(main())
