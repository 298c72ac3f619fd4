"""Action plugin: etcd authentication for flannel's agents, turned on from the controller
(pyflannel_runtime.ops.etcd_auth), where the operator's root password is and stays."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.pyflannel.network.plugins.plugin_utils.cluster import require_runtime

ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "etcd_endpoints": {"type": "list", "elements": "str", "required": True},
    "etcd_prefix": {"type": "str", "default": "/coreos.com/network"},
    "etcd_cafile": {"type": "path"},
    "etcd_certfile": {"type": "path"},
    "etcd_keyfile": {"type": "path"},
    "agent_user": {"type": "str", "required": True},
    "agent_password": {"type": "str", "required": True, "no_log": True},
    "root_password": {"type": "str", "required": True, "no_log": True},
    "certificate_users": {"type": "list", "elements": "str", "default": []},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _validated, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        require_runtime()
        from pyflannel_runtime import PyflannelError
        from pyflannel_runtime.ops.etcd_auth import AuthSetup, EtcdSettings, ensure_auth

        settings = EtcdSettings(
            endpoints=tuple(args["etcd_endpoints"]),
            prefix=args["etcd_prefix"],
            cafile=args["etcd_cafile"] or "",
            certfile=args["etcd_certfile"] or "",
            keyfile=args["etcd_keyfile"] or "",
        )
        setup = AuthSetup(
            prefix=args["etcd_prefix"],
            agent_user=args["agent_user"],
            agent_password=args["agent_password"],
            root_password=args["root_password"],
            certificate_users=tuple(args["certificate_users"]),
        )
        try:
            changes = ensure_auth(settings, setup, check=bool(self._task.check_mode))
        except (PyflannelError, OSError) as err:
            return {**result, "failed": True, "msg": str(err) or type(err).__name__}
        result.update(changed=bool(changes), changes=changes)
        return result
