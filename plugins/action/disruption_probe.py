"""Action plugin: pyflannel.network.disruption_probe runs with the agent's virtualenv's Python."""

from __future__ import annotations

from ansible_collections.pyflannel.network.plugins.plugin_utils.agent_venv import AgentVenvAction


class ActionModule(AgentVenvAction):
    pass
