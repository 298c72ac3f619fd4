"""pyflanneld's flags on ``pyflannel`` commands and the collection's node modules: the same
names, values, checks and defaults.

A command that talks to what the agent talks to (``status``, ``config publish``) takes the
agent's flags for it and resolves them as the agent would, from (first wins) the command line,
the FLANNELD_* environment, and the agent's environment file when there is one, so that on a
node the bare command uses the agent's own settings. A module resolves its options the same way
(`resolve_options`, `environment_with_file`), its options given explicitly first.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.agent.envfile import AGENT_ENV_FILE, EnvFileError, read_env_file
from pyflannel_runtime.agent.flags import (
    FLAGS,
    FlagError,
    Options,
    env_name,
    parse_flags,
    validate,
)

_BY_NAME = {flag.name: flag for flag in FLAGS}
# Where etcd is and how to log in: what every command talking to etcd takes.
ETCD_FLAGS = (
    "etcd-endpoints",
    "etcd-prefix",
    "etcd-keyfile",
    "etcd-certfile",
    "etcd-cafile",
    "etcd-username",
    "etcd-password",
)


class AgentFlagsError(PyflannelError):
    """The agent's settings are unusable; ``str()`` says what and why."""


def add_agent_flags(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    """The named pyflanneld flags, each with its usage, default and variable, plus
    ``--agent-env``."""
    for name in names:
        flag = _BY_NAME[name]
        default = flag.default
        shown = "" if default in ("", ()) or isinstance(default, bool) else f"default {default}; "
        text = f"{flag.usage} (pyflanneld's -{name}; {shown}${env_name(name)})"
        dest = name.replace("-", "_")
        if isinstance(default, bool):
            parser.add_argument(f"--{name}", dest=dest, action="store_const", const="true",
                                help=text)  # fmt: skip
        else:
            parser.add_argument(f"--{name}", dest=dest, metavar="VALUE", help=text)
    parser.add_argument(
        "--agent-env",
        metavar="FILE",
        help=f"the agent's environment file, its FLANNELD_* settings (default {AGENT_ENV_FILE} "
        "when it exists; '' reads none)",
    )


def agent_environment(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment the agent's flags are read from: this process's, over the agent's
    environment file (``--agent-env``)."""
    return environment_with_file(args.agent_env, os.environ if environ is None else environ)


def environment_with_file(path: str | None, environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` over the agent's environment file at `path` (None: the agent's own file when
    it exists; '': none)."""
    env = dict(_env_file(path))
    env.update(environ)
    return env


def agent_options(
    args: argparse.Namespace, names: Sequence[str], environ: Mapping[str, str]
) -> Options:
    """pyflanneld's settings: the given flags, else FLANNELD_* from `environ` (see
    `agent_environment`), else pyflanneld's defaults; checked as the agent checks them."""
    given = {
        name: value
        for name in names
        if (value := getattr(args, name.replace("-", "_"))) is not None
    }
    return resolve_options(given, environ)


def resolve_options(given: Mapping[str, str], environ: Mapping[str, str]) -> Options:
    """pyflanneld's settings from flags given by name (``{"etcd-prefix": "/x"}``), else
    FLANNELD_* from `environ`, else pyflanneld's defaults; checked as the agent checks them."""
    try:
        opts = parse_flags([f"--{name}={value}" for name, value in given.items()], environ)
        validate(opts)
    except FlagError as err:
        raise AgentFlagsError(str(err)) from None
    return opts


def _env_file(path: str | None) -> Mapping[str, str]:
    if path == "":
        return {}
    if path is None:
        if not os.path.exists(AGENT_ENV_FILE):
            return {}
        path = AGENT_ENV_FILE
    try:
        return read_env_file(path)
    except EnvFileError as err:
        raise AgentFlagsError(
            f"{err} (the agent's settings: run as root, or pass --agent-env '' to ignore them)"
        ) from None
