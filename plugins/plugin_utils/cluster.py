"""Controller side: the flannel nodes' variables and facts out of Ansible's hostvars, checked
through pyflannel_controller.inventory (imported from the controller's environment).

A limited run (``--limit``) still checks every node of the group: a host outside the play has
no ``_flannel_settings`` fact, so its settings are computed here as the preflight role would
have collected them (the role's defaults under the host's inventory and extra vars), and its
node facts are the ones the preflight role gathered from it read-only (``delegate_facts``); a
node that could not be reached is checked without them. A host of the play that could not be
reached stops the check, naming it and what to do about it.
"""

from __future__ import annotations

import errno
import functools
from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase
from ansible.template import Templar
from ansible_collections.pyflannel.network.plugins.plugin_utils.role_values import (
    convert_role_values,
    role_options,
)

try:
    from pyflannel_controller.inventory import (
        KUBECONFIG_LIMIT,
        KUBECONFIG_SOURCE,
        InventoryError,
        InventoryPlan,
        ReadSource,
        check_inventory,
    )
    from pyflannel_runtime.fsutil import read_small_file
except ImportError as err:  # pragma: no cover - depends on the controller's environment
    _IMPORT_ERROR: ImportError | None = err
else:
    _IMPORT_ERROR = None

# Set by the preflight role (every flannel_* variable as the host sees it) and node_facts.
SETTINGS_FACT = "_flannel_settings"
HOST_FACT = "pyflannel_host"
# The preflight role's node_facts results: a play host's own, and those of the nodes outside the
# play (one loop item each), which say whether the node could be reached.
PLAY_FACTS_RESULT = "__flannel_preflight_facts"
OUTSIDE_FACTS_RESULT = "__flannel_preflight_outside"
_VARIABLE_PREFIX = "flannel_"
_ROLES = Path(__file__).resolve().parents[2] / "roles"


def require_runtime() -> None:
    if _IMPORT_ERROR is not None:
        raise AnsibleActionFail(
            "pyflannel.network needs the pyflannel_controller package on the controller (pip "
            f"install 'pyflannel[controller]' into ansible's environment): {_IMPORT_ERROR}"
        )


@functools.cache
def preflight_defaults() -> dict[str, Any]:
    """The preflight role's defaults: what a host outside the play gets under its own vars."""
    path = _ROLES / "preflight" / "defaults" / "main.yml"
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")) or {})


def host_settings(hostvars: Any, host: str, templar: Templar) -> dict[str, Any]:
    """Every flannel_* variable of ``host`` as the preflight role collects it: its own fact when
    the role ran there, else the role's defaults under the host's inventory and extra vars,
    templated in that host's context (``hostvars`` included, which ``hostvars[host]`` lacks)."""
    if SETTINGS_FACT in hostvars[host]:
        return dict(hostvars[host][SETTINGS_FACT])
    raw = hostvars.raw_get(host)
    context = templar.copy_with_new_env(available_variables={**raw, "hostvars": hostvars})
    own = {name: context.template(raw[name]) for name in raw if name.startswith(_VARIABLE_PREFIX)}
    return {**preflight_defaults(), **own}


def fact_failures(task_vars: dict[str, Any]) -> dict[str, tuple[bool, str]]:
    """Host -> (unreachable, why) for each node whose facts the preflight role could not
    gather (this play's hosts and the nodes outside it)."""
    found: dict[str, tuple[bool, str]] = {}
    hostvars = task_vars["hostvars"]
    outside = task_vars.get(OUTSIDE_FACTS_RESULT) or {}
    results = [(str(result.get("item")), result) for result in outside.get("results") or ()] + [
        (host, hostvars[host].get(PLAY_FACTS_RESULT) or {})
        for host in task_vars.get("ansible_play_hosts_all") or ()
    ]
    for host, result in results:
        if result.get("unreachable") or result.get("failed"):
            found[host] = (bool(result.get("unreachable")), _first_line(result.get("msg")))
    return found


def _first_line(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0].removeprefix("Task failed: ") if lines else "no reason given"


def unreachable_advice(host: str, why: str) -> str:
    return (
        f"{host}: unreachable ({why}); nothing was changed on any host. Power {host} on, or "
        f"converge the others without it (--limit '!{host}': its lease stays held), or take "
        f"it out of the cluster (remove-node.yml -e node={host})"
    )


def cluster_hosts(task_vars: dict[str, Any], group: str) -> list[str]:
    hosts = list(task_vars.get("groups", {}).get(group) or [])
    if not hosts:
        raise AnsibleActionFail(
            f"flannel_nodes_group: the inventory has no hosts in group {group!r}"
        )
    return hosts


def check_cluster(
    task_vars: dict[str, Any],
    group: str,
    *,
    with_facts: bool,
    read_source: ReadSource,
    templar: Templar,
    allow_unreachable: bool = False,
) -> InventoryPlan:
    """The whole cluster, as every node's own variables (and facts) describe it, each value
    converted by its role's argument spec first; the nodes outside the play included.
    ``allow_unreachable``: a play host that could not be reached is checked without its facts
    instead of stopping the check."""
    require_runtime()
    hostvars = task_vars["hostvars"]
    hosts = cluster_hosts(task_vars, group)
    play_hosts = set(task_vars.get("ansible_play_hosts_all") or ())
    failures = fact_failures(task_vars) if with_facts else {}
    settings = {host: host_settings(hostvars, host, templar) for host in hosts}
    facts: dict[str, Any] = {}
    unconvertible: list[str] = []
    for host in hosts:
        settings[host], wrong = convert_role_values(host, settings[host])
        unconvertible += wrong
    problems, missing = [], []
    for host in hosts if with_facts else ():
        fact = (hostvars[host].get("ansible_facts") or {}).get(HOST_FACT)
        unreachable, why = failures.get(host, (False, ""))
        if fact is not None:
            facts[host] = fact
        elif host not in play_hosts or (unreachable and allow_unreachable):
            continue  # checked without its facts
        elif unreachable:
            problems.append(unreachable_advice(host, why))
        elif why:
            problems.append(f"{host}: gathering its node facts failed: {why}")
        else:
            missing.append(host)
    if missing:
        problems.append(
            "the pyflannel.network.preflight role has not gathered the node facts of "
            f"{', '.join(missing)} (run it on them first)"
        )
    if problems:
        raise AnsibleActionFail("\n".join(problems))
    if unconvertible:
        raise InventoryError(unconvertible)
    return check_inventory(settings, facts if with_facts else None, role_options(), read_source)


class ClusterAction(ActionBase):
    """An action that checks the whole cluster on the controller, then does its own part in
    ``act``; an invalid inventory fails it with every problem, one per line."""

    TRANSFERS_FILES = False
    _requires_connection = False
    OPTIONS: dict[str, Any] = {}

    def with_facts(self, args: dict[str, Any]) -> bool:
        return True

    def allow_unreachable(self, args: dict[str, Any]) -> bool:
        return False

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

    def node_source(self, host_vars: Any) -> str | None:
        """A host's flannel_kubeconfig_src (``host_vars``: its variables, after the preflight
        role collected its settings), found on the controller (None when unset)."""
        settings = host_vars.get(SETTINGS_FACT) or {}
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
                task_vars,
                group,
                with_facts=self.with_facts(args),
                read_source=self.read_source,
                templar=self._templar,
                allow_unreachable=self.allow_unreachable(args),
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
