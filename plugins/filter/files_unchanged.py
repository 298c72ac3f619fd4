"""Filter: files a role wants on a host are there as wanted, as node_facts found them earlier in
the run (plugins/plugin_utils/host_files.py): a role skips the tasks that would change nothing."""

from __future__ import annotations

from typing import Any

from ansible_collections.pyflannel.network.plugins.plugin_utils.host_files import unchanged

DOCUMENTATION = r"""
name: files_unchanged
short_description: Whether files are already on a host as wanted, by the states node_facts reported
version_added: 0.2.0
description:
  - True when every file of the input is on the host with exactly its content, mode, and owner and
    group when given, as C(pyflannel.network.node_facts) reported the host's O(states) earlier in the
    same run (its option C(paths), digested with O(digest_key)).
  - False for a file the states do not hold, any difference, a file too large to have a digest, or
    anything malformed; a role then runs the module that writes the files, which compares for itself.
    A wrong answer can cost a module run, never a change left undone.
  - Only for states gathered before any task of the run could change these files.
positional: states, digest_key
options:
  _input:
    description:
      - The files, as C(pyflannel.network.files) takes them (O(path_key) C(path), C(content), C(mode),
        C(owner), C(group)) or as C(pyflannel.network.pki_files) does (C(dest), C(content) or C(src),
        an absolute path to a plain file on the controller).
    type: list
    elements: dict
    required: true
  states:
    description: The host's C(ansible_facts.pyflannel_host.paths).
    type: dict
    required: true
  digest_key:
    description: The key node_facts digested the files with.
    type: str
  path_key:
    description: The key of each file's path (C(path), or C(dest) for pki_files' files).
    type: str
    default: path
  defaults:
    description:
      - What an entry that leaves out C(mode), C(owner) or C(group) means (the module's defaults); a
        C(mode) left out everywhere is C(0644).
    type: dict
"""

EXAMPLES = r"""
- name: Skip the host when its conflist is as wanted
  ansible.builtin.meta: end_role
  when: >-
    __rendered.files | pyflannel.network.files_unchanged(ansible_facts.pyflannel_host.paths, _flannel_digest_key)
"""

RETURN = r"""
_value:
  description: Whether every file is as wanted.
  type: bool
"""


def files_unchanged(
    files: Any,
    states: Any,
    digest_key: str | None = None,
    path_key: str = "path",
    defaults: dict[str, Any] | None = None,
) -> bool:
    return unchanged(files, states, digest_key, path_key=path_key, defaults=defaults)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"files_unchanged": files_unchanged}
