"""The node modules' action plugin (plugins/plugin_utils/agent_venv.py): which virtualenv's
Python runs a module, how the task's variables say so, and the failure of a module whose
Python is not there (the whole path runs in tests/integration/test_leases_info.py)."""

from __future__ import annotations

from ansible_collections.pyflannel.network.plugins.plugin_utils.agent_venv import (
    agent_venv,
    missing_runtime,
    with_interpreter,
)


def test_the_option_then_the_hosts_setting_then_the_preflights_then_the_default() -> None:
    cluster = {"_flannel_cluster": {"flannel_agent_venv": "/srv/cluster"}}
    host = {"flannel_agent_venv": "/srv/host", **cluster}
    assert agent_venv("/srv/option", host) == "/srv/option"
    assert agent_venv(None, host) == "/srv/host"
    assert agent_venv(None, cluster) == "/srv/cluster"
    assert agent_venv(None, {}) == "/opt/pyflannel/venv"


def test_the_interpreter_is_set_for_the_host_or_the_delegated_one() -> None:
    task_vars = {
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_delegated_vars": {"ctl": {"ansible_host": "192.0.2.1"}},
    }
    plain = with_interpreter(task_vars, "/v/bin/python", None)
    assert plain["ansible_python_interpreter"] == "/v/bin/python"
    assert "ansible_python_interpreter" not in plain["ansible_delegated_vars"]["ctl"]
    delegated = with_interpreter(task_vars, "/v/bin/python", "ctl")
    assert delegated["ansible_delegated_vars"]["ctl"] == {
        "ansible_host": "192.0.2.1",
        "ansible_python_interpreter": "/v/bin/python",
    }
    assert task_vars["ansible_python_interpreter"] == "/usr/bin/python3"  # not changed in place
    assert "ansible_python_interpreter" not in task_vars["ansible_delegated_vars"]["ctl"]


def test_a_python_that_cannot_start_names_the_runtime_and_the_virtualenv() -> None:
    started_not = {
        "failed": True,
        "rc": 127,
        "module_stdout": "",
        "module_stderr": "/bin/sh: 1: /v/bin/python: not found\n",
        "msg": "MODULE FAILURE",
    }
    failed = missing_runtime(started_not, "/v", "/v/bin/python")
    assert failed is not None and failed["failed"]
    assert failed["msg"].startswith(
        "pyflannel_runtime is not installed on this host: /v/bin/python cannot run"
    )
    assert "the agent's virtualenv /v" in failed["msg"]
    assert failed["module_stderr"] == started_not["module_stderr"]
    # A module that ran and failed, or printed something, is its own failure.
    assert missing_runtime({"failed": True, "rc": 1, "msg": "x"}, "/v", "/v/bin/python") is None
    printed = {**started_not, "module_stdout": "Traceback ..."}
    assert missing_runtime(printed, "/v", "/v/bin/python") is None
    # Without pipelining, sudo's terminal puts the shell's stderr on stdout.
    on_a_terminal = {
        **started_not,
        "module_stdout": "/bin/sh: 1: /v/bin/python: not found",
        "module_stderr": "",
    }
    assert missing_runtime(on_a_terminal, "/v", "/v/bin/python") is not None
    another = {**on_a_terminal, "module_stdout": "/bin/sh: 1: /usr/bin/tool: not found"}
    assert missing_runtime(another, "/v", "/v/bin/python") is None
    assert missing_runtime({"changed": False}, "/v", "/v/bin/python") is None
