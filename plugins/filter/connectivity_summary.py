"""Filter: the connectivity suite's summary, from what the verify role registered on each host."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
positional: hostvars
options:
  _input:
    description: The hosts to summarize, e.g. C(ansible_play_hosts).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
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
    msg: "{{ ansible_play_hosts | pyflannel.network.connectivity_summary(hostvars) }}"
"""

RETURN = r"""
_value:
  description: Lines of text.
  type: list
  elements: str
"""

SETUP = "__flannel_verify_suite"
RUN = "__flannel_verify_connectivity"
AUTO = "__flannel_verify_auto_offload"  # auto's first pass over the checksum scenario
ROUTES = "__flannel_verify_routes"


def _registered(hostvars: Mapping[str, Any], host: str, name: str) -> Mapping[str, Any] | None:
    value = hostvars[host].get(name)
    if not isinstance(value, Mapping) or value.get("skipped"):
        return None
    if name in (RUN, AUTO) and "rows" not in value:  # the run failed before it had results
        return None
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
    hosts: Sequence[str],
    hostvars: Mapping[str, Any],
    other_setups: Mapping[str, Any] | None = None,
    other_runs: Mapping[str, Any] | None = None,
) -> list[str]:
    from pyflannel_runtime.connectivity.causes import view_of
    from pyflannel_runtime.connectivity.scenarios import Row
    from pyflannel_runtime.connectivity.summary import summary_lines

    # node -> (routes report, setup, run, cluster): the play's hosts, then the nodes outside a
    # limited run, whose datapath this run did not check (no routes report).
    registered: dict[str, tuple[Any, Any, Mapping[str, Any], Any]] = {}
    for host in hosts:
        run = _registered(hostvars, host, RUN)
        if run is not None:
            registered[host] = (
                _registered(hostvars, host, ROUTES),
                _registered(hostvars, host, SETUP),
                run,
                hostvars[host].get("_flannel_cluster"),
            )
    setups = _loop_items(other_setups)
    for name, run in _loop_items(other_runs).items():
        if "rows" in run:
            cluster = hostvars[hosts[0]].get("_flannel_cluster") if hosts else None
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
        for host in hosts
        for run in (_registered(hostvars, host, AUTO), _registered(hostvars, host, RUN))
        if run is not None and (change := run.get("offload_change"))
    ]
    return summary_lines(ran, rows, times, views, notes)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"connectivity_summary": connectivity_summary}
