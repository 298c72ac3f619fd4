"""Controller side of the modules that run on a node with the pyflannel runtime: each runs with
the Python of the agent's virtualenv, which holds the runtime, whatever interpreter the host
otherwise uses; a play never sets ``ansible_python_interpreter`` for them.

The virtualenv is the module's ``venv`` option, else the host's ``flannel_agent_venv`` (the
roles' setting, also in the preflight's cluster facts), else /opt/pyflannel/venv. Each module
of the collection that needs it has an action plugin of its own name (plugins/action/) that is
this class.
"""

from __future__ import annotations

import importlib
import os
import re
from types import ModuleType
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash

DEFAULT_VENV = "/opt/pyflannel/venv"
VENV_VARIABLE = "flannel_agent_venv"
CLUSTER_FACT = "_flannel_cluster"
# What a POSIX shell exits with when the command is missing or cannot be executed, and says.
_NOT_RUNNABLE = (126, 127)
_NOT_THERE = "(?:No such file or directory|not found|command not found|Permission denied)"


def agent_venv(option: str | None, task_vars: dict[str, Any]) -> str:
    """The agent's virtualenv for a task: its option, else the host's setting, else the
    default."""
    cluster = task_vars.get(CLUSTER_FACT) or {}
    return option or task_vars.get(VENV_VARIABLE) or cluster.get(VENV_VARIABLE) or DEFAULT_VENV


def with_interpreter(
    task_vars: dict[str, Any], python: str, delegate_to: str | None
) -> dict[str, Any]:
    """The task's variables with `python` as the host's interpreter (the delegated host's, when
    the task is delegated: Ansible builds the module from that host's variables then)."""
    module_vars = dict(task_vars, ansible_python_interpreter=python)
    delegated = task_vars.get("ansible_delegated_vars") or {}
    if delegate_to and delegate_to in delegated:
        module_vars["ansible_delegated_vars"] = {
            **delegated,
            delegate_to: dict(delegated[delegate_to], ansible_python_interpreter=python),
        }
    return module_vars


def controller_runtime(name: str) -> ModuleType:
    """A module of pyflannel_runtime imported on the controller, where an action plugin works a
    result out from what a host reported earlier in the run; a clear failure without it."""
    try:
        return importlib.import_module(name)
    except ImportError as why:
        raise AnsibleActionFail(
            f"pyflannel.network needs the pyflannel_runtime package on the controller: {why}"
        ) from why


def missing_runtime(result: dict[str, Any], venv: str, python: str) -> dict[str, Any] | None:
    """A clear failure for a module that could not start because the virtualenv's Python is not
    there; None when it started."""
    if not result.get("failed") or result.get("rc") not in _NOT_RUNNABLE:
        return None
    # Nothing on stdout, or only the shell's word that the Python is not there (without
    # pipelining, sudo's terminal carries the shell's stderr to stdout).
    stdout = (result.get("module_stdout") or "").strip()
    if stdout and not re.fullmatch(rf".*{re.escape(python)}: {_NOT_THERE}", stdout):
        return None
    return {
        "failed": True,
        "msg": (
            f"pyflannel_runtime is not installed on this host: {python} cannot run (the "
            f"agent's virtualenv {venv}; the pyflannel.network.agent role installs it there, "
            f"and the module's venv option or the host's {VENV_VARIABLE} names another)"
        ),
        "rc": result["rc"],
        "module_stderr": result.get("module_stderr", ""),
    }


class AgentVenvAction(ActionBase):
    """Runs the module of the task's name with the agent's virtualenv's Python."""

    _supports_check_mode = True
    _supports_async = True

    def module_args(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        """The module's arguments (a subclass adds what it finds on the controller)."""
        return args

    def known_result(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """The module's result when the controller already knows it (a subclass finds it in
        what the host reported earlier in the run); None runs the module."""
        return None

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = self.module_args(dict(self._task.args), task_vars)
        known = self.known_result(args)
        if known is not None:
            return merge_hash(result, known)
        # The host's setting may still be a template; the task's arguments are templated.
        venv = str(self._templar.template(agent_venv(args.get("venv"), task_vars)))
        python = os.path.join(venv, "bin", "python")
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        ran = self._execute_module(
            module_args=args,
            task_vars=with_interpreter(task_vars, python, self._task.delegate_to),
            wrap_async=wrap_async,
        )
        result = merge_hash(result, missing_runtime(ran, venv, python) or ran)
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
