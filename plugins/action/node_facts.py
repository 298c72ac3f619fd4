"""Action plugin: pyflannel.network.node_facts runs with the agent's virtualenv's Python when the
node has one, where it can also make the runtime's checks (its option checks), and with the
host's own Python otherwise (a node before its first run): one module run on a provisioned
node, two on a new one (the first finds no virtualenv and fails at once)."""

from __future__ import annotations

import os
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash
from ansible_collections.pyflannel.network.plugins.plugin_utils.agent_venv import (
    agent_venv,
    missing_runtime,
    with_interpreter,
)


class ActionModule(ActionBase):
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        venv = str(self._templar.template(agent_venv(args.get("venv"), task_vars)))
        python = os.path.join(venv, "bin", "python")
        ran = self._execute_module(
            module_args=args, task_vars=with_interpreter(task_vars, python, self._task.delegate_to)
        )
        if missing_runtime(ran, venv, python) is not None:
            ran = self._execute_module(module_args=args, task_vars=task_vars)
        self._remove_tmp_path(self._connection._shell.tmpdir)
        return merge_hash(result, ran)
