#!/usr/bin/python
"""Thin adapter over pyflannel_runtime.cni.install (what `pyflannel cni install` writes)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cni_plugin
short_description: Install the flannel CNI plugin and make the reference plugins reachable
version_added: 0.1.0
description:
  - Writes the C(flannel) plugin launcher of the agent's virtualenv into O(bin_dir), exactly as
    C(pyflannel cni install) does, but only when it differs.
  - Links the plugins the flannel plugin delegates to (Debian's C(containernetworking-plugins) in
    O(plugins_dir)) into O(bin_dir), where container runtimes look for them, where no plugin of
    that name is yet. A plugin someone else put there stays as it is. The links made are noted in
    O(record).
  - With O(state=absent), removes the launcher and the links O(record) notes that are still as
    they were made, and the record; nothing else in O(bin_dir).
  - Runs with the agent's virtualenv's Python (see O(venv)), which the launcher starts too.
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.venv
options:
  bin_dir:
    description: The CNI bin directory container runtimes search.
    type: path
    default: /opt/cni/bin
  plugins_dir:
    description: Where the reference plugins are installed.
    type: path
    default: /usr/lib/cni
  link:
    description: Reference plugins to link from O(plugins_dir) into O(bin_dir).
    type: list
    elements: str
    default: [bridge, host-local, portmap, loopback]
  record:
    description: The node's record of the links this module made (JSON), which O(state=absent) reads.
    type: path
    default: /var/lib/pyflannel/cni-plugins.json
    version_added: 0.2.0
  state:
    description: C(present) installs; C(absent) removes what this module installed.
    type: str
    choices: [present, absent]
    default: present
    version_added: 0.2.0
"""

EXAMPLES = r"""
- name: Install the flannel CNI plugin
  pyflannel.network.cni_plugin:
    bin_dir: /opt/cni/bin

- name: Remove it again, with the reference plugin links it made
  pyflannel.network.cni_plugin:
    bin_dir: /opt/cni/bin
    state: absent
"""

RETURN = r"""
plugin:
  description: Path of the flannel plugin.
  returned: always
  type: str
  sample: /opt/cni/bin/flannel
changed_links:
  description: Links that were (or would be) created, repointed or removed.
  returned: always
  type: list
  elements: str
foreign:
  description: Plugins of a name in O(link) that are not this module's and were left as they are.
  returned: O(state=present)
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    CNI_PLUGIN_ARGUMENT_SPEC,
    VENV_ARGUMENT_SPEC,
    require_runtime,
)


def build_module():
    return AnsibleModule(
        argument_spec={
            **VENV_ARGUMENT_SPEC,
            **CNI_PLUGIN_ARGUMENT_SPEC,
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        },
        supports_check_mode=True,
    )


def _link_diff(path, before, after):
    return {"before_header": path, "after_header": path, "before": before, "after": after}


def install(module, recorded):
    from pyflannel_runtime.ops.cni_install import LinkError, make_links, plugin_files
    from pyflannel_runtime.ops.files import FilesError, sync_files

    params = module.params
    try:
        plan, wanted = plugin_files(
            params["bin_dir"], params["plugins_dir"], params["link"], params["record"], recorded
        )
    except LinkError as err:
        module.fail_json(msg=str(err))
    diffs = [
        _link_diff(path, os.readlink(path) + "\n" if os.path.islink(path) else "", target + "\n")
        for path, target in plan.make
    ]
    try:
        files = sync_files(wanted, check=module.check_mode)
        if not module.check_mode:
            make_links(plan)
    except (FilesError, OSError) as err:
        module.fail_json(msg=f"cannot install into {params['bin_dir']}: {err}")
    changed_links = [path for path, _target in plan.make]
    return bool(files.changed or changed_links), changed_links, files.diff() + diffs, plan.foreign


def remove(module, plugin, recorded):
    from pyflannel_runtime.ops.cni_install import removal

    links, paths = removal(plugin, module.params["record"], recorded)
    diffs = [_link_diff(path, os.readlink(path) + "\n", "") for path in links]
    diffs += [_link_diff(path, f"{path}\n", "") for path in paths if path not in links]
    if not module.check_mode:
        try:
            for path in paths:
                os.unlink(path)
        except OSError as err:
            module.fail_json(msg=f"cannot remove {err.filename}: {err.strerror}")
    return bool(paths), links, diffs


def main():
    module = build_module()
    require_runtime(module)
    from pyflannel_runtime.ops.cni_install import PLUGIN_NAME, LinkRecord

    plugin = os.path.join(module.params["bin_dir"], PLUGIN_NAME)
    try:
        recorded = LinkRecord.load(module.params["record"])
    except ValueError as err:
        module.fail_json(msg=f"record: {err}")
    result = {"plugin": plugin}
    if module.params["state"] == "present":
        changed, changed_links, diff, foreign = install(module, recorded)
        result["foreign"] = foreign
    else:
        changed, changed_links, diff = remove(module, plugin, recorded)
    result.update(changed=changed, changed_links=changed_links)
    if module._diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
