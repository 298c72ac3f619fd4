"""How ``./scripts/test`` runs the suite side by side (pytest-xdist), and a lab per worker.

Most of the suite's wall time is waiting: lab hosts booting, SSH round trips, convergence,
etcd elections. Several workers overlap those waits on a 2-core machine.

* A test module is the unit of work: its module-scoped fixtures (a lab, an etcd, a built
  tarball) are made once, by the one worker that runs it.
* The modules that take longest start first (longest processing time first), so that no
  long module starts last and runs alone at the end. Their weights, in seconds, come from
  an earlier run's ``--junitxml`` report (``python -m tests.parallel WEIGHTS REPORT`` writes
  them); a module the file does not know weighs as a short one. The weights only order the
  work: a stale file makes a run slower, never wrong.
* Each worker's lab hosts have state and an inventory of their own (``worker_lab_paths``), so
  labs of different workers run side by side; the lab's default places stay for the README's
  own command (``./scripts/lab up``, which tests/integration/test_main_job.py runs).
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import OrderedDict, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = Path(__file__).with_name("module_weights.json")
UNKNOWN_WEIGHT = 1.0


def module_of(nodeid: str) -> str:
    """The test file of a pytest node ID: the unit that one worker runs whole."""
    return nodeid.split("::", 1)[0]


def load_weights(path: Path = WEIGHTS) -> dict[str, float]:
    try:
        weights = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in weights.items()} if isinstance(weights, dict) else {}


def longest_first(modules: list[str], weights: Mapping[str, float]) -> list[str]:
    """``modules`` heaviest first; equal weights keep their collection order."""
    order = {module: n for n, module in enumerate(modules)}
    return sorted(modules, key=lambda m: (-weights.get(m, UNKNOWN_WEIGHT), order[m]))


def weights_from_junit(report: str) -> dict[str, float]:
    """Seconds per test file in a ``--junitxml`` report (set-up and tear-down included)."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.fromstring(report).iter("testcase"):
        classname = case.get("classname", "")
        parts = classname.split(".")
        # "tests.integration.test_site" or "tests.unit.test_x.TestClass": the file is the
        # longest prefix that exists as a .py file.
        for end in range(len(parts), 0, -1):
            candidate = "/".join(parts[:end]) + ".py"
            if (ROOT / candidate).is_file():
                seconds[candidate] += float(case.get("time", "0") or 0)
                break
    return {module: round(total, 1) for module, total in sorted(seconds.items())}


def worker_lab_paths(worker: str) -> tuple[Path, Path]:
    """A worker's lab state directory and inventory (its group_vars are the lab's own)."""
    base = ROOT / ".lab" / "workers" / worker
    inventory_dir = base / "inventory"
    inventory_dir.mkdir(parents=True, exist_ok=True)
    group_vars = inventory_dir / "group_vars"
    if not group_vars.is_symlink():
        group_vars.symlink_to(ROOT / "inventories" / "lab" / "group_vars")
    return base / "hosts", inventory_dir / "hosts.yml"


class HeaviestFirst(OrderedDict[str, Any]):
    """xdist's work queue (module -> its tests), handing out the heaviest module first."""

    def __init__(self, weights: Mapping[str, float]) -> None:
        super().__init__()
        self.weights = weights

    def popitem(self, last: bool = True) -> tuple[str, Any]:
        if last:
            return super().popitem(last=True)
        module = longest_first(list(self), self.weights)[0]
        return module, self.pop(module)


def make_scheduler(config: Any, log: Any) -> Any:
    """xdist's scheduling by scope, with a module a scope and the heaviest modules first."""
    from xdist.scheduler import LoadScopeScheduling

    class ModulesLongestFirst(LoadScopeScheduling):  # type: ignore[misc]
        def __init__(self, config: Any, log: Any = None) -> None:
            super().__init__(config, log)
            self.workqueue = HeaviestFirst(load_weights())

        def _split_scope(self, nodeid: str) -> str:
            return module_of(nodeid)

    return ModulesLongestFirst(config, log)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: python -m tests.parallel WEIGHTS_JSON JUNIT_XML\n{__doc__}", file=sys.stderr)
        return 2
    weights = weights_from_junit(Path(argv[1]).read_text())
    Path(argv[0]).write_text(json.dumps(weights, indent=1, sort_keys=True) + "\n")
    print(f"{len(weights)} modules, {sum(weights.values()):.0f} s in all", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))


def configure_worker_lab() -> None:
    """Under xdist, point the lab at this worker's own places (before any lab module loads)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    state, inventory = worker_lab_paths(worker)
    os.environ.setdefault("PYFLANNEL_LAB_STATE", str(state))
    os.environ.setdefault("PYFLANNEL_LAB_INVENTORY", str(inventory))
