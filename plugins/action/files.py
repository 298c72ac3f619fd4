"""Action plugin: pyflannel.network.files runs with the agent's virtualenv's Python, and not at
all when the host reported earlier in the run (known_states) that every file is as wanted."""

from __future__ import annotations

from typing import Any

from ansible_collections.pyflannel.network.plugins.plugin_utils.agent_venv import AgentVenvAction
from ansible_collections.pyflannel.network.plugins.plugin_utils.host_files import unchanged

# The controller's options, not the module's.
KNOWN_OPTIONS = ("known_states", "digest_key")


class ActionModule(AgentVenvAction):
    def known_result(self, args: dict[str, Any]) -> dict[str, Any] | None:
        states, key = (args.pop(name, None) for name in KNOWN_OPTIONS)
        if not unchanged(args.get("files"), states, key):
            return None
        # What the module returns for files that are all as wanted (no diff: nothing differs).
        return {"changed": False, "changed_files": []}
