"""Filter: the connectivity suite's summary, from each node's verify results."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DOCUMENTATION = r"""
name: connectivity_summary
short_description: The connectivity suite's matrix, its time per group and each failure's likely cause
version_added: 0.2.0
description:
  - Builds readable lines from the verify role's connectivity suite (each host's setup and run results),
    with the routes module's report and the cluster settings for the causes of failures.
  - One row per scenario, a column per node or per path between two nodes; then the failures grouped by
    their most likely cause, the time each group of scenarios took, and a last line that says whether
    every pod reaches every other.
  - Empty when the suite did not run (check mode, O(flannel_verify_pods=false)).
options:
  _input:
    description:
      - Per node of the run, its results, each as its task registered it; C(routes)
        (C(pyflannel.network.routes)), C(suite) (the suite's setup), C(connectivity) (its run)
        and C(auto_offload) (C(auto)'s first pass over the checksum scenario).
    type: dict
    required: true
  cluster:
    description: The cluster settings (C(_flannel_cluster)), for the likely causes of failures.
    type: dict
  other_setups:
    description: The suite's setup on the nodes outside a limited run (the verify role's loop's registered
      result); their columns join the matrix.
    type: dict
  other_runs:
    description: The scenarios run from those nodes (the verify role's loop's registered result); their
      rows join the matrix.
    type: dict
"""

EXAMPLES = r"""
- name: Summary
  ansible.builtin.debug:
    msg: >-
      {{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, '_flannel_verify_report')))
         | pyflannel.network.connectivity_summary(cluster=_flannel_cluster) }}
"""

RETURN = r"""
_value:
  description: Lines of text.
  type: list
  elements: str
"""


def _registered(report: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    value = (report or {}).get(name)
    if not isinstance(value, Mapping) or value.get("skipped"):
        return None
    if name in ("connectivity", "auto_offload") and "rows" not in value:
        return None  # the run failed before it had results
    return value


def _loop_items(result: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """A registered loop over nodes, by node (what ran: not failed, not unreachable)."""
    items = (result or {}).get("results") or ()
    return {
        str(item.get("item")): item
        for item in items
        if not item.get("failed") and not item.get("unreachable") and not item.get("skipped")
    }


def connectivity_summary(
    reports: Mapping[str, Any],
    cluster: Mapping[str, Any] | None = None,
    other_setups: Mapping[str, Any] | None = None,
    other_runs: Mapping[str, Any] | None = None,
) -> list[str]:
    from pyflannel_runtime.connectivity.causes import view_of
    from pyflannel_runtime.connectivity.scenarios import Row
    from pyflannel_runtime.connectivity.summary import summary_lines

    # node -> (routes report, setup, run, cluster): the play's hosts, then the nodes outside a
    # limited run, whose datapath this run did not check (no routes report).
    registered: dict[str, tuple[Any, Any, Mapping[str, Any], Any]] = {}
    for host, report in reports.items():
        run = _registered(report, "connectivity")
        if run is not None:
            registered[host] = (
                _registered(report, "routes"),
                _registered(report, "suite"),
                run,
                cluster,
            )
    setups = _loop_items(other_setups)
    for name, run in _loop_items(other_runs).items():
        if "rows" in run:
            registered[name] = (None, setups.get(name), run, cluster)
    if not registered:
        return []
    ran = list(registered)
    runs = {host: run for host, (_routes, _setup, run, _cluster) in registered.items()}
    rows = [Row.of(row) for run in runs.values() for row in run["rows"]]
    times = {host: dict(run.get("times") or {}) for host, run in runs.items()}
    views = {
        host: view_of(host, routes, setup, run, cluster)
        for host, (routes, setup, run, cluster) in registered.items()
    }
    notes = [
        f"{host}: {change}"
        for host, report in reports.items()
        for run in (_registered(report, "auto_offload"), _registered(report, "connectivity"))
        if run is not None and (change := run.get("offload_change"))
    ]
    return summary_lines(ran, rows, times, views, notes)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"connectivity_summary": connectivity_summary}
