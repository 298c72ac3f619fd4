"""Controller side: the flannel nodes' variables and facts out of Ansible's hostvars, checked
through pyflannel_runtime.ops.inventory (imported from the controller's environment)."""

from __future__ import annotations

import errno
import functools
from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

try:
    from pyflannel_runtime.fsutil import read_small_file
    from pyflannel_runtime.ops.inventory import (
        KUBECONFIG_LIMIT,
        KUBECONFIG_SOURCE,
        InventoryPlan,
        ReadSource,
        check_inventory,
    )
except ImportError as err:  # pragma: no cover - depends on the controller's environment
    _IMPORT_ERROR: ImportError | None = err
else:
    _IMPORT_ERROR = None

# Set by the preflight role (every flannel_* variable as the host sees it) and node_facts.
SETTINGS_FACT = "_flannel_settings"
HOST_FACT = "pyflannel_host"
_ROLES = Path(__file__).resolve().parents[2] / "roles"


def require_runtime() -> None:
    if _IMPORT_ERROR is not None:
        raise AnsibleActionFail(
            "pyflannel.network needs the pyflannel_runtime package on the controller "
            f"(pip install the pyflannel project into ansible's environment): {_IMPORT_ERROR}"
        )


@functools.cache
def role_variables() -> frozenset[str]:
    """Every variable the collection's roles document in meta/argument_specs.yml."""
    names: set[str] = set()
    for spec_file in _ROLES.glob("*/meta/argument_specs.yml"):
        specs = yaml.safe_load(spec_file.read_text(encoding="utf-8")) or {}
        for entry in (specs.get("argument_specs") or {}).values():
            names.update((entry or {}).get("options") or {})
    return frozenset(names)


def cluster_hosts(task_vars: dict[str, Any], group: str) -> list[str]:
    hosts = list(task_vars.get("groups", {}).get(group) or [])
    if not hosts:
        raise AnsibleActionFail(
            f"flannel_nodes_group: the inventory has no hosts in group {group!r}"
        )
    return hosts


def check_cluster(
    task_vars: dict[str, Any], group: str, *, with_facts: bool, read_source: ReadSource
) -> InventoryPlan:
    """The whole cluster, as every node's own variables (and facts) describe it."""
    require_runtime()
    hostvars = task_vars["hostvars"]
    hosts = cluster_hosts(task_vars, group)
    settings: dict[str, dict[str, Any]] = {}
    facts: dict[str, Any] = {}
    missing = []
    for host in hosts:
        host_vars = hostvars[host]
        if SETTINGS_FACT not in host_vars or (
            with_facts and HOST_FACT not in host_vars.get("ansible_facts", {})
        ):
            missing.append(host)
            continue
        settings[host] = dict(host_vars[SETTINGS_FACT])
        if with_facts:
            facts[host] = host_vars["ansible_facts"][HOST_FACT]
    if missing:
        raise AnsibleActionFail(
            "the pyflannel.network.preflight role has not run on "
            f"{', '.join(missing)} (every host of group {group!r} must be in the play)"
        )
    return check_inventory(settings, facts if with_facts else None, role_variables(), read_source)


class ClusterAction(ActionBase):
    """An action that checks the whole cluster on the controller, then does its own part in
    ``act``; an invalid inventory fails it with every problem, one per line."""

    TRANSFERS_FILES = False
    _requires_connection = False
    OPTIONS: dict[str, Any] = {}

    def with_facts(self, args: dict[str, Any]) -> bool:
        return True

    def act(
        self, checked: InventoryPlan, args: dict[str, Any], task_vars: dict[str, Any]
    ) -> dict[str, Any]:
        raise NotImplementedError

    def find_source(self, source: str) -> str:
        """A controller file as ansible.builtin.copy finds its src (files/ of the role or the
        playbook, then the playbook's directory); OSError when there is none."""
        try:
            return str(self._find_needle("files", source))
        except AnsibleError as err:
            message = str(err.message).splitlines()[0]
            raise OSError(errno.ENOENT, message) from None

    def read_source(self, source: str) -> bytes:
        """A controller file's contents, decrypted when it is vault-encrypted."""
        try:
            real = self._loader.get_real_file(self.find_source(source), decrypt=True)
        except AnsibleError as err:
            raise OSError(errno.EIO, str(err.message).splitlines()[0]) from None
        try:
            return read_small_file(real, KUBECONFIG_LIMIT)
        finally:
            self._loader.cleanup_tmp_file(real)

    def node_source(self, task_vars: dict[str, Any]) -> str | None:
        """This host's flannel_kubeconfig_src, found on the controller (None when unset)."""
        settings = task_vars.get(SETTINGS_FACT) or {}
        source = settings.get(KUBECONFIG_SOURCE)
        return self.find_source(str(source)) if source else None

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        _validated, args = self.validate_argument_spec(
            argument_spec={"group": {"type": "str"}, **self.OPTIONS}
        )
        group = args["group"] or task_vars.get("flannel_nodes_group", "flannel_nodes")
        try:
            checked = check_cluster(
                task_vars, group, with_facts=self.with_facts(args), read_source=self.read_source
            )
            result.update(self.act(checked, args, task_vars))
        except AnsibleActionFail as err:
            return {**result, "failed": True, "msg": err.message}
        except OSError as err:  # a controller file that went away after the check
            return {**result, "failed": True, "msg": f"{KUBECONFIG_SOURCE}: {err}"}
        except ValueError as err:  # InventoryError; PlanError for a host that is no flannel node
            problems = getattr(err, "problems", [str(err)])
            message = f"invalid inventory, {len(problems)} problem(s):\n" + "\n".join(problems)
            return {**result, "failed": True, "msg": message, "problems": problems}
        return result
