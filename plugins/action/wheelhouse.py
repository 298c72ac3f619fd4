"""Action plugin: the agent's wheelhouses on the controller, one per distinct interpreter of the
play's nodes, built once and cached (pyflannel_controller.wheelhouse), or a prebuilt one checked."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.pyflannel.network.plugins.plugin_utils.cluster import require_runtime

# The runtime's source at the collection's root: the repository itself in-tree, the copy the
# tarball carries (galaxy.yml) where the collection is installed.
_SOURCE = Path(__file__).resolve().parents[2]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("source", "cache_dir", "archive", "interpreters", "cluster"))
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _validated, args = self.validate_argument_spec(
            argument_spec={
                "source": {"type": "path"},
                "cache_dir": {"type": "path", "default": "~/.cache/pyflannel/wheelhouse"},
                "archive": {"type": "path"},
                "interpreters": {"type": "dict", "default": {}},
                "cluster": {"type": "dict", "default": {}},
            },
            mutually_exclusive=[("source", "archive")],
        )
        require_runtime()
        from pyflannel_controller.wheelhouse import (
            WheelhouseError,
            build_for_hosts,
            load_wheelhouse,
            node_extras,
        )

        try:
            extras = node_extras(args["cluster"]) if args["cluster"] else ()
            if args["archive"]:
                prebuilt = load_wheelhouse(Path(args["archive"]), extras)
                hosts = dict.fromkeys(args["interpreters"], prebuilt)
            else:
                source = Path(args["source"]) if args["source"] else _SOURCE
                cache_dir = Path(args["cache_dir"]).expanduser()
                hosts = build_for_hosts(source, cache_dir, args["interpreters"], extras)
        except (WheelhouseError, OSError) as err:
            return {**result, "failed": True, "msg": f"cannot make the agent's wheelhouse: {err}"}
        described = {
            host: {**asdict(built), "archive": str(built.archive), "requirement": built.requirement}
            for host, built in hosts.items()
        }
        result.update(
            changed=False,
            wheelhouses=list(
                {wheelhouse["archive"]: wheelhouse for wheelhouse in described.values()}.values()
            ),
            hosts=described,
        )
        return result
