"""Every plugin's documentation parses as ansible-doc reads it (doc fragments merged), every
module claims its check and diff support, and each module's documented options are its
argument spec: name, type, default, choices, required and elements, as ansible-test's
validate-modules compares them (that tool needs the collection installed; this runs in place).
A module that is only documentation for a controller-side action plugin of its name is held to
the spec that action plugin validates its arguments with, which validate-modules skips."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from ansible.module_utils import basic
from ansible.plugins.action import ActionBase
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    ETCD_ARGUMENT_SPEC,
    KUBERNETES_ARGUMENT_SPEC,
    VENV_ARGUMENT_SPEC,
)
from ansible_collections.pyflannel.network.plugins.plugin_utils.agent_venv import AgentVenvAction

ROOT = Path(__file__).resolve().parents[3]
KINDS = {"module": "modules", "filter": "filter"}
MODULES = "ansible_collections.pyflannel.network.plugins.modules"
ACTIONS = "ansible_collections.pyflannel.network.plugins.action"


def plugin_names(kind: str) -> list[str]:
    folder = ROOT / "plugins" / KINDS[kind]
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))


def ansible_doc(kind: str) -> dict[str, Any]:
    names = [f"pyflannel.network.{name}" for name in plugin_names(kind)]
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-doc")), "--json", "-t", kind, *names],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "[ERROR]" not in done.stderr, done.stderr
    docs: dict[str, Any] = json.loads(done.stdout)
    assert sorted(docs) == names
    return docs


@pytest.fixture(scope="module")
def module_docs() -> dict[str, Any]:
    return ansible_doc("module")


def test_every_filter_documents_itself() -> None:
    for name, doc in ansible_doc("filter").items():
        assert doc["doc"]["short_description"] and doc["return"], name


class _Spec(Exception):
    pass


def action_only(name: str) -> bool:
    """Whether the module is only documentation for the action plugin of its name."""
    return not hasattr(importlib.import_module(f"{MODULES}.{name}"), "main")


def module_arguments(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The argument spec a module builds and AnsibleModule's other arguments
    (supports_check_mode, ...), caught before it reads its arguments; for a documentation-only
    module, the spec its action plugin validates with, and whether that supports check mode."""
    if action_only(name):
        return action_arguments(name)
    captured: dict[str, Any] = {}

    def capture(self: Any, argument_spec: dict[str, Any], **kwargs: Any) -> None:
        captured.update(spec=argument_spec, kwargs=kwargs)
        raise _Spec

    module = importlib.import_module(f"{MODULES}.{name}")
    with mock.patch.object(basic.AnsibleModule, "__init__", capture), pytest.raises(_Spec):
        module.main()
    return captured["spec"], captured["kwargs"]


def action_arguments(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    captured: dict[str, Any] = {}

    def capture(self: Any, argument_spec: dict[str, Any], **kwargs: Any) -> None:
        captured.update(spec=argument_spec, kwargs=kwargs)
        raise _Spec

    plugin = importlib.import_module(f"{ACTIONS}.{name}").ActionModule
    task = mock.MagicMock(args={}, async_val=0)
    action = plugin(task, mock.MagicMock(), mock.MagicMock(), None, None, None)
    with mock.patch.object(ActionBase, "validate_argument_spec", capture), pytest.raises(_Spec):
        action.run(task_vars={})
    assert set(captured["spec"]) == set(plugin._VALID_ARGS), name
    return captured["spec"], {"supports_check_mode": plugin._supports_check_mode}


def compared(option: dict[str, Any]) -> dict[str, Any]:
    """What validate-modules holds a documented option and its spec to, with the defaults
    both leave out."""
    return {
        "type": option.get("type", "str"),
        "default": option.get("default"),
        "choices": option.get("choices"),
        "required": option.get("required", False),
        "elements": option.get("elements"),
    }


@pytest.mark.parametrize("name", plugin_names("module"))
def test_a_modules_documentation_is_its_argument_spec(
    module_docs: dict[str, Any], name: str
) -> None:
    doc = module_docs[f"pyflannel.network.{name}"]["doc"]
    for attribute in ("check_mode", "diff_mode"):
        assert doc["attributes"][attribute]["support"] in ("full", "partial", "none"), attribute
    options = doc.get("options", {})
    spec, _ = module_arguments(name)
    assert sorted(options) == sorted(spec)
    for option, declared in spec.items():
        assert compared(options[option]) == compared(declared), option


@pytest.mark.parametrize("name", plugin_names("module"))
def test_a_modules_check_and_diff_claims_are_what_it_does(
    module_docs: dict[str, Any], name: str
) -> None:
    """check_mode support only with supports_check_mode; diff_mode support only in a module
    that looks at --diff (module._diff) to return one."""
    attributes = module_docs[f"pyflannel.network.{name}"]["doc"]["attributes"]
    _, kwargs = module_arguments(name)
    claims_check = attributes["check_mode"]["support"] != "none"
    assert claims_check == kwargs.get("supports_check_mode", False)
    folder = "action" if action_only(name) else "modules"
    source = (ROOT / "plugins" / folder / f"{name}.py").read_text()
    claims_diff = attributes["diff_mode"]["support"] != "none"
    assert claims_diff == ("module._diff" in source or "self._task.diff" in source)


def test_every_action_plugin_has_a_module_of_its_name() -> None:
    """ansible-test's action-plugin-docs: an action plugin's documentation is the module's."""
    actions = {p.stem for p in (ROOT / "plugins" / "action").glob("*.py")}
    assert actions <= set(plugin_names("module")), actions - set(plugin_names("module"))


# The options each action group of meta/runtime.yml sets for its members.
GROUP_OPTIONS = {
    "flannel": VENV_ARGUMENT_SPEC,
    "etcd": ETCD_ARGUMENT_SPEC,
    "kubernetes": KUBERNETES_ARGUMENT_SPEC,
}


def action_groups() -> dict[str, list[str]]:
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text(encoding="utf-8"))
    return dict(runtime["action_groups"])


@pytest.mark.parametrize("group", sorted(GROUP_OPTIONS))
def test_every_member_of_an_action_group_takes_every_option_of_the_group(group: str) -> None:
    """module_defaults for a group never hands a member an option it refuses, or one it reads
    as another type."""
    assert set(action_groups()) == set(GROUP_OPTIONS)
    for member in action_groups()[group]:
        spec, _ = module_arguments(member)
        for option, declared in GROUP_OPTIONS[group].items():
            assert option in spec, (member, option)
            assert spec[option]["type"] == declared["type"], (member, option)


def test_every_module_run_with_the_agents_virtualenv_is_in_the_flannel_group() -> None:
    venv_modules = {
        path.stem
        for path in (ROOT / "plugins" / "action").glob("*.py")
        if issubclass(
            importlib.import_module(f"{ACTIONS}.{path.stem}").ActionModule, AgentVenvAction
        )
    }
    assert {"lease", "node_reset", "connectivity"} <= venv_modules
    assert venv_modules <= set(action_groups()["flannel"]), venv_modules - set(
        action_groups()["flannel"]
    )
