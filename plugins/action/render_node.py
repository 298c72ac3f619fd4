"""Action plugin: one node's files rendered on the controller by pyflannel_controller.render.

Rendering needs pydantic and jinja2, which nodes do not get; the result feeds
pyflannel.network.files, which writes the contents on the node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ansible.errors import AnsibleActionFail
from ansible_collections.pyflannel.network.plugins.plugin_utils.cluster import ClusterAction

if TYPE_CHECKING:
    from pyflannel_controller.inventory import InventoryPlan

KINDS = ("conflist", "net_conf", "agent_env", "systemd_unit", "subnet_env", "kubeconfig")


def _paths(model: Any) -> dict[str, str]:
    from pyflannel_controller.render.render import AGENT_ENV_FILE, SYSTEMD_UNIT_FILE

    return {
        "conflist": f"{model.flannel_cni_conf_dir}/{model.flannel_cni_conf_file}",
        "net_conf": model.flannel_net_conf_path,
        "agent_env": AGENT_ENV_FILE,
        "systemd_unit": SYSTEMD_UNIT_FILE,
        "subnet_env": model.flannel_subnet_file,
    }


class ActionModule(ClusterAction):
    _VALID_ARGS = frozenset(("group", "files", "kubeconfig_src", "hosts"))
    OPTIONS = {
        "files": {
            "type": "list",
            "elements": "str",
            "choices": list(KINDS),
            "default": list(KINDS),
        },
        # A controller file copied to flannel_kubeconfig_file (kind kubeconfig; none when unset).
        "kubeconfig_src": {"type": "str"},
        # Every one of these hosts' files, from one check of the cluster (with run_once: a check
        # per run, not one per host, each of which reads every node's variables).
        "hosts": {"type": "list", "elements": "str"},
    }

    def act(
        self, checked: InventoryPlan, args: dict[str, Any], task_vars: dict[str, Any]
    ) -> dict[str, Any]:
        from pyflannel_controller.render.render import render_net_conf

        if args["hosts"] is not None and args["kubeconfig_src"]:
            raise AnsibleActionFail(
                "kubeconfig_src is one host's file: render the kubeconfig for each host on its "
                "own, not with hosts"
            )
        hosts_files = {host: self._files(checked, host, args) for host in args["hosts"] or ()}
        task_host = task_vars["inventory_hostname"]
        files = hosts_files.get(task_host) or self._files(checked, task_host, args)
        result: dict[str, Any] = {
            "changed": False,
            "files": files,
            # The net-conf text also for the etcd datastore, where it goes into <prefix>/config.
            "net_conf": render_net_conf(checked.model),
        }
        if args["hosts"] is not None:
            result["hosts"] = hosts_files
        every_file = [f for host_files in hosts_files.values() for f in host_files]
        # Credentials (the etcd password, a kubeconfig) stay out of the output.
        result["_ansible_no_log"] = any(f["sensitive"] for f in [*files, *every_file])
        return result

    def _files(
        self, checked: InventoryPlan, host: str, args: dict[str, Any]
    ) -> list[dict[str, Any]]:
        from pyflannel_controller.render.render import render_node

        rendered = render_node(checked.model, host)
        selected = {path for kind, path in _paths(checked.model).items() if kind in args["files"]}
        files = [
            {
                "path": f"/{relative}",
                "content": wanted.data.decode(),
                "mode": f"{wanted.mode:04o}",
                "sensitive": wanted.sensitive,
            }
            for relative, wanted in sorted(rendered.items())
            if f"/{relative}" in selected
        ]
        target = checked.model.flannel_kubeconfig_file
        if "kubeconfig" in args["files"] and args["kubeconfig_src"] and target:
            content = self.read_source(args["kubeconfig_src"]).decode("utf-8", "replace")
            files.append({"path": target, "content": content, "mode": "0600", "sensitive": True})
        return files
