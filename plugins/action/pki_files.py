"""Action plugin: pyflannel.network.pki_files reads each src on the controller (as
ansible.builtin.copy does) and hands the contents to the module, which runs once on the host,
and not at all when the host reported earlier in the run (known_states) that every file is as
wanted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase
from ansible_collections.pyflannel.network.plugins.plugin_utils.host_files import unchanged

# The module's defaults for what an entry leaves out.
_DEFAULTS = {"mode": "0644", "owner": "root", "group": "root"}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False  # the contents travel as the module's arguments

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        states, key = args.pop("known_states", None), args.pop("digest_key", None)
        files = args.get("files")
        if isinstance(files, list):
            try:
                files = [self._with_content(entry) for entry in files]
            except AnsibleError as err:
                return {**result, "failed": True, "msg": str(err)}
        if unchanged(files, states, key, path_key="dest", defaults=_DEFAULTS):
            # What the module returns when every file is as wanted (no diff: nothing differs).
            return {**result, "changed": False, "changed_files": [], "created_directories": []}
        # Anything else is refused by the module's own argument checks.
        result.update(
            self._execute_module(
                module_name="pyflannel.network.pki_files",
                module_args={**args, "files": files},
                task_vars=task_vars,
            )
        )
        return result

    def _with_content(self, entry: Any) -> Any:
        """The entry with its controller file's text as content in place of src."""
        if not isinstance(entry, Mapping) or entry.get("src") is None:
            return entry
        src = entry["src"]
        if entry.get("content") is not None:
            raise AnsibleError(
                f"files: {entry.get('dest')}: src and content are mutually exclusive"
            )
        real = self._loader.get_real_file(self._find_needle("files", src), decrypt=True)
        try:
            with open(real, "rb") as source:
                data = source.read()
        except OSError as err:
            raise AnsibleError(
                f"files: cannot read {src} on the controller: {err.strerror}"
            ) from err
        finally:
            self._loader.cleanup_tmp_file(real)
        try:
            content = data.decode()
        except UnicodeDecodeError as err:
            raise AnsibleError(
                f"files: {src}: not UTF-8 text ({err.reason} at byte {err.start})"
            ) from err
        return {**{key: value for key, value in entry.items() if key != "src"}, "content": content}
