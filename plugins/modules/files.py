#!/usr/bin/python
"""Thin adapter: rendered file contents onto the node."""

from __future__ import annotations

DOCUMENTATION = r"""
module: files
short_description: Write a node's rendered pyflannel files atomically, only where they differ
version_added: 0.1.0
description:
  - Compares each file with the wanted content, mode, owner and group, then writes only the files
    that differ, all or none (each through a temporary file and a rename, so readers never see a
    partial file), with the exact mode whatever the umask (pyflannel_runtime.ops.files).
  - Pairs with the C(pyflannel.network.render_node) action, which renders the contents on the
    controller from the cluster model.
  - Runs with the agent's virtualenv's Python (see O(venv)).
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.known_states
  - pyflannel.network.attributes.venv
options:
  files:
    description:
      - The files to write.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path of the file.
        type: path
        required: true
      content:
        description: The file's whole content.
        type: str
        required: true
      mode:
        description: Octal mode, written exactly whatever the umask.
        type: str
        default: "0644"
      owner:
        description: Owner's name; left as it is when not given.
        type: str
      group:
        description: Group's name; left as it is when not given.
        type: str
      sensitive:
        description:
          - Keeps the content out of C(--diff) output and out of the module's arguments in the
            result.
        type: bool
        default: false
"""

EXAMPLES = r"""
- name: Render this node's unit and environment file
  pyflannel.network.render_node:
    files: [agent_env, systemd_unit]
  register: __flannel_rendered

- name: Write them
  pyflannel.network.files:
    files: "{{ __flannel_rendered.files }}"
"""

RETURN = r"""
changed_files:
  description: The files that were (or in check mode would be) written.
  returned: always
  type: list
  elements: str
  sample: [/etc/pyflannel/pyflanneld.env]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.file_state import (
    KNOWN_STATES_ARGUMENT_SPEC,
)
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    VENV_ARGUMENT_SPEC,
    require_runtime,
)


def build_module():
    return AnsibleModule(
        argument_spec={
            **VENV_ARGUMENT_SPEC,
            **KNOWN_STATES_ARGUMENT_SPEC,
            "files": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "path": {"type": "path", "required": True},
                    "content": {"type": "str", "required": True},
                    "mode": {"type": "str", "default": "0644"},
                    "owner": {"type": "str"},
                    "group": {"type": "str"},
                    "sensitive": {"type": "bool", "default": False},
                },
            },
        },
        supports_check_mode=True,
    )


def _wanted(module):
    from pyflannel_runtime.ops.files import WantedFile

    wanted = {}
    for spec in module.params["files"]:
        path = spec["path"]
        if not path.startswith("/"):
            module.fail_json(msg=f"files: {path}: must be an absolute path")
        if path in wanted:
            module.fail_json(msg=f"files: {path}: given more than once")
        try:
            mode = int(spec["mode"], 8)
        except ValueError:
            module.fail_json(msg=f"files: {path}: mode {spec['mode']!r} is not an octal mode")
        if spec["sensitive"] and spec["content"]:
            # Out of every output, the module's own arguments (shown with -v) included.
            module.no_log_values.add(spec["content"])
        wanted[path] = WantedFile(
            spec["content"],
            mode,
            owner=spec["owner"],
            group=spec["group"],
            sensitive=spec["sensitive"],
        )
    return wanted


def main():
    module = build_module()
    require_runtime(module)
    from pyflannel_runtime.ops.files import FilesError, sync_files

    try:
        plan = sync_files(_wanted(module), check=module.check_mode)
    except (FilesError, ValueError) as err:
        module.fail_json(msg=str(err))
    result = {"changed": plan.changed, "changed_files": [c.path for c in plan.changes]}
    if module._diff:
        result["diff"] = plan.diff()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
