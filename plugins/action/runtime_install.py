"""Action plugin: pyflannel.network.runtime_install copies the wheelhouse archive from the
controller into the task's temporary directory on the host (as ansible.builtin.unarchive does)
and runs the module once, with the host's own Python; in check mode nothing is copied."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        shell = self._connection._shell
        try:
            # Without an archive, the module's own argument checks refuse the task.
            if args.get("archive") is not None and not self._task.check_mode:
                try:
                    args["archive"] = self._copy_archive(str(args["archive"]))
                except AnsibleError as err:
                    return {**result, "failed": True, "msg": f"cannot copy the wheelhouse: {err}"}
            result.update(
                self._execute_module(
                    module_name="pyflannel.network.runtime_install",
                    module_args=args,
                    task_vars=task_vars,
                )
            )
        finally:
            self._remove_tmp_path(shell.tmpdir)
        return result

    def _copy_archive(self, archive: str) -> str:
        """The archive's path on the host, in the task's temporary directory."""
        shell = self._connection._shell
        source = self._find_needle("files", archive)
        if not shell.tmpdir:
            self._make_tmp_path()
        remote = str(shell.join_path(shell.tmpdir, "wheelhouse.tar"))
        self._transfer_file(source, remote)
        self._fixup_perms2((shell.tmpdir, remote))
        return remote
