"""The pyflannel runtime for modules that run on a node: present only in the agent's virtualenv,
so these modules run with ``ansible_python_interpreter`` set to that virtualenv's Python."""

from __future__ import annotations

import traceback

from ansible.module_utils.basic import missing_required_lib

try:
    import pyflannel_runtime  # noqa: F401
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
                    "run this module with the agent's virtualenv interpreter "
                    "(ansible_python_interpreter: /opt/pyflannel/venv/bin/python, "
                    "installed by the pyflannel.network.agent role)"
                ),
            ),
            exception=RUNTIME_IMPORT_ERROR,
        )


ETCD_ARGUMENT_SPEC = {
    "etcd_endpoints": {"type": "list", "elements": "str", "required": True},
    "etcd_prefix": {"type": "str", "default": "/coreos.com/network"},
    "etcd_cafile": {"type": "path"},
    "etcd_certfile": {"type": "path"},
    "etcd_keyfile": {"type": "path"},
    "etcd_username": {"type": "str"},
    "etcd_password": {"type": "str", "no_log": True},
}


# A lease store of either datastore, as the agent reads it: etcd (its endpoints then required)
# or the Kubernetes API through a kubeconfig.
STORE_ARGUMENT_SPEC = {
    **ETCD_ARGUMENT_SPEC,
    "etcd_endpoints": {"type": "list", "elements": "str"},
    "datastore": {"type": "str", "choices": ["etcd", "kubernetes"], "default": "etcd"},
    "kubeconfig_file": {"type": "path"},
}
STORE_REQUIRED_IF = [("datastore", "etcd", ["etcd_endpoints"])]


def etcd_settings(params):
    """flanneld's etcd flags from the module's options (pyflannel_runtime's EtcdSettings)."""
    from pyflannel_runtime.subnet.etcd import EtcdSettings

    return EtcdSettings(
        endpoints=tuple(params["etcd_endpoints"]),
        prefix=params["etcd_prefix"],
        cafile=params["etcd_cafile"] or "",
        certfile=params["etcd_certfile"] or "",
        keyfile=params["etcd_keyfile"] or "",
        username=params["etcd_username"] or "",
        password=params["etcd_password"] or "",
    )
