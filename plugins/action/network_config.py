"""Action plugin: pyflannel.network.network_config runs with the agent's virtualenv's Python, and
not at all when the config is what node_facts read from etcd earlier in the run (known_config)
and there are no reservations to pin: nothing would be written."""

from __future__ import annotations

from typing import Any

from ansible_collections.pyflannel.network.plugins.plugin_utils.agent_venv import (
    AgentVenvAction,
    controller_runtime,
)


class ActionModule(AgentVenvAction):
    def known_result(self, args: dict[str, Any]) -> dict[str, Any] | None:
        known = args.pop("known_config", None)
        config, prefix = args.get("config"), args.get("etcd_prefix")
        if known is None or known != config or args.get("reservations") or not prefix:
            return None
        publish = controller_runtime("pyflannel_runtime.ops.publish")
        # What the module returns for a config etcd already holds.
        change = {
            "key": publish.config_key(str(prefix)),
            "before": known,
            "after": config,
            "changed": False,
        }
        return {"changed": False, "keys": [change]}
