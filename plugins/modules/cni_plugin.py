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
    O(plugins_dir)) into O(bin_dir), where container runtimes look for them.
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
"""

EXAMPLES = r"""
- name: Install the flannel CNI plugin
  pyflannel.network.cni_plugin:
    bin_dir: /opt/cni/bin
"""

RETURN = r"""
plugin:
  description: Path of the flannel plugin.
  returned: always
  type: str
  sample: /opt/cni/bin/flannel
changed_links:
  description: Links that were (or would be) created or repointed.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    VENV_ARGUMENT_SPEC,
    require_runtime,
)


def build_module():
    return AnsibleModule(
        argument_spec={
            **VENV_ARGUMENT_SPEC,
            "bin_dir": {"type": "path", "default": "/opt/cni/bin"},
            "plugins_dir": {"type": "path", "default": "/usr/lib/cni"},
            "link": {
                "type": "list",
                "elements": "str",
                "default": ["bridge", "host-local", "portmap", "loopback"],
            },
        },
        supports_check_mode=True,
    )


def _links(module):
    """(link path, target) pairs that are missing or point elsewhere."""
    bin_dir, plugins_dir = module.params["bin_dir"], module.params["plugins_dir"]
    if os.path.realpath(bin_dir) == os.path.realpath(plugins_dir):
        return []
    stale = []
    for name in module.params["link"]:
        target = os.path.join(plugins_dir, name)
        if not os.path.exists(target):
            module.fail_json(
                msg=f"link: {target} does not exist (is containernetworking-plugins installed?)"
            )
        path = os.path.join(bin_dir, name)
        if not os.path.islink(path) or os.readlink(path) != target:
            stale.append((path, target))
    return stale


def _relink(path, target):
    temp = f"{path}.{os.getpid()}.tmp"
    os.symlink(target, temp)
    os.replace(temp, path)


def main():
    module = build_module()
    require_runtime(module)
    from pyflannel_runtime.cni.install import PLUGIN_NAME, launcher_script
    from pyflannel_runtime.ops.files import FilesError, WantedFile, sync_files

    plugin = os.path.join(module.params["bin_dir"], PLUGIN_NAME)
    stale = _links(module)
    link_diffs = [
        {
            "before_header": path,
            "after_header": path,
            "before": os.readlink(path) + "\n" if os.path.islink(path) else "",
            "after": target + "\n",
        }
        for path, target in stale
    ]
    try:
        plan = sync_files({plugin: WantedFile(launcher_script(), 0o755)}, check=module.check_mode)
        if not module.check_mode:
            for path, target in stale:
                _relink(path, target)
    except (FilesError, OSError) as err:
        module.fail_json(msg=f"cannot install into {module.params['bin_dir']}: {err}")
    result = {
        "changed": bool(plan.changed or stale),
        "plugin": plugin,
        "changed_links": [path for path, _target in stale],
    }
    if module._diff:
        result["diff"] = plan.diff() + link_diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
