"""The pyflannel runtime for modules that run on a node: it is in the agent's virtualenv, whose
Python the collection's action plugin (plugins/plugin_utils/agent_venv.py) runs these modules
with; and the agent's own settings, which the modules start from."""

from __future__ import annotations

import os
import sys
import traceback

from ansible.module_utils.basic import missing_required_lib

try:
    import pyflannel_runtime  # noqa: F401 # pylint: disable=unused-import
except ImportError:
    RUNTIME_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    RUNTIME_IMPORT_ERROR = None


def require_runtime(module) -> None:
    """Fail with a clear message when the module's interpreter has no pyflannel_runtime."""
    if RUNTIME_IMPORT_ERROR is not None:
        module.fail_json(
            msg=missing_required_lib(
                "pyflannel_runtime",
                reason=(
                    f"by this module, and the agent's virtualenv {sys.prefix} lacks it (the "
                    "pyflannel.network.agent role installs it in flannel_agent_venv, default "
                    "/opt/pyflannel/venv)"
                ),
            ),
            exception=RUNTIME_IMPORT_ERROR,
        )


# What every module run with the agent's virtualenv takes (action group pyflannel.network.flannel).
VENV_ARGUMENT_SPEC = {"venv": {"type": "path"}}

# The etcd connection (action group pyflannel.network.etcd). None is an option not given: the
# agent's own setting applies (`agent_settings`).
ETCD_ARGUMENT_SPEC = {
    "etcd_endpoints": {"type": "list", "elements": "str"},
    "etcd_prefix": {"type": "str"},
    "etcd_cafile": {"type": "path"},
    "etcd_certfile": {"type": "path"},
    "etcd_keyfile": {"type": "path"},
    "etcd_username": {"type": "str"},
    "etcd_password": {"type": "str", "no_log": True},
    "agent_env": {"type": "path"},
}

# The Kubernetes datastore (action group pyflannel.network.kubernetes, with agent_env).
KUBERNETES_ARGUMENT_SPEC = {
    "datastore": {"type": "str", "choices": ["etcd", "kubernetes"]},
    "kubeconfig_file": {"type": "path"},
    "net_config_path": {"type": "path"},
    "agent_env": {"type": "path"},
}


# Where the flannel CNI plugin is installed (the cni_plugin module's options; node_facts checks
# an installation with the same defaults).
CNI_PLUGIN_ARGUMENT_SPEC = {
    "bin_dir": {"type": "path", "default": "/opt/cni/bin"},
    "plugins_dir": {"type": "path", "default": "/usr/lib/cni"},
    "link": {
        "type": "list",
        "elements": "str",
        "default": ["bridge", "host-local", "portmap", "loopback"],
    },
    "record": {"type": "path", "default": "/var/lib/pyflannel/cni-plugins.json"},
}


def agent_settings(module, names):
    """pyflanneld's settings (pyflannel_runtime.agent.flags.Options) for the module: the options
    `names` as given, else the agent's own settings (its environment file, ``agent_env``), else
    pyflanneld's defaults. Fails the module on a value the agent would refuse."""
    from pyflannel_runtime import PyflannelError
    from pyflannel_runtime.ops.agent_settings import agent_settings as resolve

    params = module.params
    given = {name: params[name] for name in names if name not in ("datastore", "agent_env")}
    if "datastore" in names and params["datastore"] is not None:
        given["kube_subnet_mgr"] = params["datastore"] == "kubernetes"
    try:
        return resolve(given, params["agent_env"], os.environ)
    except PyflannelError as err:
        module.fail_json(msg=f"the agent's settings: {err}")


def etcd_settings(params):
    """The etcd connection (pyflannel_runtime's EtcdSettings) from the etcd options in `params`,
    over the agent's own settings. Raises AgentFlagsError for a value the agent would refuse."""
    from pyflannel_runtime.ops.agent_settings import agent_settings as resolve
    from pyflannel_runtime.ops.agent_settings import etcd_settings

    given = {name: params[name] for name in ETCD_ARGUMENT_SPEC if name != "agent_env"}
    return etcd_settings(resolve(given, params["agent_env"], os.environ))
