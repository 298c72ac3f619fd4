#!/usr/bin/python
"""Thin adapter: rendered file contents onto the node."""

from __future__ import annotations

DOCUMENTATION = r"""
module: files
short_description: Write a node's rendered pyflannel files atomically, only where they differ
version_added: 0.1.0
description:
  - Compares each file with the wanted content and mode, then writes only the files that differ,
    each through a temporary file and a rename (readers never see a partial file), with the exact
    mode whatever the umask.
  - Pairs with the C(pyflannel.network.render_node) action, which renders the contents on the
    controller from the cluster model.
  - Runs with the agent's virtualenv interpreter.
extends_documentation_fragment:
  - pyflannel.network.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  files:
    description:
      - Absolute path to C({content, mode, owner, group}); C(mode) is an octal string such as
        C("0644"); C(owner) and C(group) are names and default to the writing user's.
    type: dict
    required: true
requirements:
  - pyflannel_runtime (the agent's virtualenv)
author:
  - pyflannel maintainers
"""

EXAMPLES = r"""
- name: Render this node's unit and environment file
  pyflannel.network.render_node:
    files: [agent_env, systemd_unit]
  register: __flannel_rendered

- name: Write them
  pyflannel.network.files:
    files: "{{ __flannel_rendered.files }}"
  vars:
    ansible_python_interpreter: /opt/pyflannel/venv/bin/python
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
from ansible_collections.pyflannel.network.plugins.module_utils.files import WantedFile, sync_files
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import require_runtime


def build_module():
    return AnsibleModule(
        argument_spec={"files": {"type": "dict", "required": True}},
        supports_check_mode=True,
    )


def _wanted(module):
    wanted = {}
    for path, spec in module.params["files"].items():
        if not isinstance(spec, dict) or "content" not in spec:
            module.fail_json(msg=f"files.{path}: needs content (and mode)")
        if not path.startswith("/"):
            module.fail_json(msg=f"files.{path}: must be an absolute path")
        try:
            mode = int(str(spec.get("mode", "0644")), 8)
        except ValueError:
            module.fail_json(msg=f"files.{path}.mode: {spec.get('mode')!r} is not an octal mode")
        wanted[path] = WantedFile(
            str(spec["content"]).encode("utf-8"), mode, spec.get("owner"), spec.get("group")
        )
    return wanted


def main():
    module = build_module()
    require_runtime(module)
    try:
        changed, diffs = sync_files(module, _wanted(module))
    except OSError as err:
        module.fail_json(msg=f"cannot write {err.filename or ''}: {err.strerror or err}")
    result = {"changed": bool(changed), "changed_files": changed}
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
