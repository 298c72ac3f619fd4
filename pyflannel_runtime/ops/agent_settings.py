"""The agent's settings for a collection module that runs on a node: the options given to the
module, else the agent's own (FLANNELD_* in the module's environment, then the agent's
environment file, as ``pyflannel status`` reads them), else pyflanneld's defaults. On a node the
roles provisioned, a module therefore needs no options to reach what the agent reaches.

The lease store's settings come from here too (`lease_store` for the store the settings name,
`etcd_settings` and `kube_settings` for one of them), so a module reaches the runtime through
ops alone.

Module options are named as pyflanneld's flags with underscores (``etcd_endpoints`` is
``--etcd-endpoints``): a list is joined with commas, a bool is ``true`` or ``false``, and None
is an option not given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyflannel_runtime.agent.cli_flags import environment_with_file, resolve_options
from pyflannel_runtime.agent.flags import Options
from pyflannel_runtime.agent.stores import etcd_settings, kube_settings
from pyflannel_runtime.ops.verify import LeaseStore

__all__ = [
    "OptionValue",
    "agent_settings",
    "etcd_settings",
    "kube_settings",
    "lease_store",
    "module_flags",
]

OptionValue = str | int | bool | Sequence[str] | None


def module_flags(options: Mapping[str, OptionValue]) -> dict[str, str]:
    """pyflanneld's flags, by name, for the module options that were given."""
    flags = {}
    for option, value in options.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str | int):
            text = str(value)
        else:
            text = ",".join(value)
        flags[option.replace("_", "-")] = text
    return flags


def agent_settings(
    options: Mapping[str, OptionValue], env_file: str | None, environ: Mapping[str, str]
) -> Options:
    """pyflanneld's settings: `options` given, else FLANNELD_* in `environ`, else the agent's
    environment file (`env_file`; None: the agent's own when it exists; '': none), else
    pyflanneld's defaults. Raises AgentFlagsError for a value the agent would refuse."""
    return resolve_options(module_flags(options), environment_with_file(env_file, environ))


def lease_store(opts: Options, timeout: float | None = None) -> LeaseStore:
    """The settings of the lease store the agent's settings name, the Kubernetes API or etcd,
    with `timeout` for each request (None: the store's default)."""
    extra = {} if timeout is None else {"request_timeout": timeout}
    if opts.kube_subnet_mgr:
        return kube_settings(opts, **extra)
    return etcd_settings(opts, **extra)
