"""``pyflannel``: the node's operator command line (the controller's own commands are
``python -m pyflannel_controller``, pyflannel_controller/cli.py).

Each command is one small function; adding a command means adding a ``_register_*`` function
to ``COMMANDS``. Heavy imports happen inside the command that needs them, so ``pyflannel
config check`` stays quick and pydantic-free.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.agent.cli_flags import ETCD_FLAGS, add_agent_flags


class CommandError(PyflannelError):
    """Ends the command with exit status 1; ``str()`` goes to stderr as it is."""


Handler = Callable[[argparse.Namespace], int]
Subparsers = Any  # argparse's _SubParsersAction, which typeshed keeps private


def add_command(
    subparsers: Subparsers, name: str, handler: Handler, help: str, description: str
) -> Any:
    parser = subparsers.add_parser(name, help=help, description=description)
    parser.set_defaults(handler=handler)
    return parser


# --- config check -----------------------------------------------------------------------------


def _read_net_conf(path: str) -> bytes:
    from pyflannel_runtime.fsutil import read_small_file

    try:
        return read_small_file(path)
    except OSError as err:  # Go's wording: "open <path>: no such file or directory"
        raise CommandError(f"failed to read net conf: {err}") from None


def _config_check(args: argparse.Namespace) -> int:
    from pyflannel_runtime.backend_spec import specs
    from pyflannel_runtime.wire import netconf

    data = _read_net_conf(args.file)
    try:
        cfg = netconf.parse_config(data)
        cfg = netconf.check_network_config(cfg)
        netconf.ip_stack(cfg)
        specs.validate(cfg)  # the agent's own check of the backend and its options
    except netconf.ConfigError as err:
        raise CommandError(str(err)) from None
    sys.stdout.write(netconf.encode_config(cfg))
    return 0


def _register_config(subparsers: Subparsers) -> None:
    config = subparsers.add_parser(
        "config", help="work with net-conf.json", description="Work with net-conf.json."
    )
    actions = config.add_subparsers(title="commands", metavar="COMMAND", required=True)
    check = add_command(
        actions,
        "check",
        _config_check,
        "validate a net-conf.json and print it normalized",
        "Validate a net-conf.json as flanneld does and print it normalized as JSON; "
        "on error print flannel's message and exit 1.",
    )
    check.add_argument("file", metavar="FILE", help="the net-conf.json to check")
    publish = add_command(
        actions,
        "publish",
        _config_publish,
        "put a net-conf.json into etcd as <prefix>/config, where flanneld reads it",
        "Check a net-conf.json as flanneld does, then make etcd's <prefix>/config hold it: "
        "nothing is written when it already does, and the change is printed as a diff. The "
        "etcd flags are the agent's and resolve as its do: the command line, else FLANNELD_* "
        "variables, else the agent's environment file.",
    )
    publish.add_argument("file", metavar="FILE", help="the net-conf.json to publish")
    publish.add_argument("--dry-run", action="store_true", help="show the change, write nothing")
    add_agent_flags(publish, ETCD_FLAGS)


def _config_publish(args: argparse.Namespace) -> int:
    import difflib
    import logging

    from pyflannel_runtime.agent.cli_flags import (
        AgentFlagsError,
        agent_environment,
        agent_options,
    )
    from pyflannel_runtime.agent.stores import etcd_settings
    from pyflannel_runtime.fsutil import os_error_text
    from pyflannel_runtime.ops.publish import PublishError, publish

    # The etcd client logs the agent's warnings (e.g. plain http); a failure is reported below.
    logging.basicConfig(level=logging.ERROR, format="%(message)s")
    text = _read_net_conf(args.file).decode("utf-8", errors="replace")
    try:
        opts = agent_options(args, ETCD_FLAGS, agent_environment(args))
    except AgentFlagsError as err:
        raise CommandError(str(err)) from None
    try:
        (change,) = publish(etcd_settings(opts), text, check=args.dry_run)
    except PublishError as err:
        raise CommandError(str(err)) from None
    except (PyflannelError, OSError) as err:  # etcd's own errors, through the one error base
        reason = os_error_text(err) if isinstance(err, OSError) and err.errno else str(err)
        raise CommandError(
            f"cannot publish to etcd {opts.etcd_endpoints} (prefix {opts.etcd_prefix}): {reason}"
        ) from None
    if change.changed:
        before = (change.before or "").splitlines(keepends=True)
        after = change.after.splitlines(keepends=True)
        label = change.key if change.before is not None else "/dev/null"
        sys.stdout.writelines(difflib.unified_diff(before, after, label, change.key))
    verb = "would publish" if args.dry_run else "published"
    print(f"{change.key}: {verb if change.changed else 'unchanged'}")
    return 0


# --- cni install ------------------------------------------------------------------------------


def _cni_install(args: argparse.Namespace) -> int:
    from pyflannel_runtime.cni.install import install_plugin

    try:
        installed: str = install_plugin(args.bin_dir)
    except (OSError, ValueError) as err:
        raise CommandError(f"cannot install the flannel CNI plugin: {err}") from None
    print(installed)
    return 0


def _register_cni(subparsers: Subparsers) -> None:
    cni = subparsers.add_parser(
        "cni", help="manage the flannel CNI plugin", description="Manage the flannel CNI plugin."
    )
    actions = cni.add_subparsers(title="commands", metavar="COMMAND", required=True)
    install = add_command(
        actions,
        "install",
        _cni_install,
        "install the flannel CNI plugin executable",
        "Install the flannel CNI plugin executable into the CNI bin directory.",
    )
    install.add_argument(
        "--bin-dir", required=True, metavar="DIR", help="the CNI bin directory, e.g. /opt/cni/bin"
    )


# --- status -----------------------------------------------------------------------------------


def _register_status(subparsers: Subparsers) -> None:
    # status imports its lease stores and pyroute2 only when it runs.
    from pyflannel_runtime.cli import status

    parser = add_command(subparsers, "status", status.command, status.HELP, status.DESCRIPTION)
    status.add_arguments(parser)


# --- ipam -------------------------------------------------------------------------------------


def _register_ipam(subparsers: Subparsers) -> None:
    from pyflannel_runtime.cli import ipam

    parser = add_command(subparsers, "ipam", ipam.command, ipam.HELP, ipam.DESCRIPTION)
    ipam.add_arguments(parser)


# --- connectivity -----------------------------------------------------------------------------


def _register_connectivity(subparsers: Subparsers) -> None:
    from pyflannel_runtime.cli import connectivity

    parser = add_command(
        subparsers,
        "connectivity",
        connectivity.command,
        connectivity.HELP,
        connectivity.DESCRIPTION,
    )
    connectivity.add_arguments(parser)


# --- bundle -----------------------------------------------------------------------------------


def _register_bundle(subparsers: Subparsers) -> None:
    from pyflannel_runtime.cli import bundle

    parser = add_command(subparsers, "bundle", bundle.command, bundle.HELP, bundle.DESCRIPTION)
    bundle.add_arguments(parser)


# --- entry point ------------------------------------------------------------------------------

COMMANDS: list[Callable[[Subparsers], None]] = [
    _register_config,
    _register_cni,
    _register_status,
    _register_ipam,
    _register_connectivity,
    _register_bundle,
]


class _Version(argparse.Action):
    """``--version`` as pyflanneld's (and flanneld's): the bare version on stderr, exit 0."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from pyflannel_runtime import __version__

        sys.stderr.write(f"{__version__}\n")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pyflannel", description="Operate pyflannel, a flannel-compatible pod network."
    )
    parser.add_argument("--version", action=_Version)
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for register in COMMANDS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse `argv` and run the command it names: its exit status, 2 for a usage error."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error argparse already printed
        return exit_.code if isinstance(exit_.code, int) else 2
    handler: Handler = args.handler
    try:
        return handler(args)
    except CommandError as err:
        print(err, file=sys.stderr)
        return 1
