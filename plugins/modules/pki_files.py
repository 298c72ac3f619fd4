#!/usr/bin/python
"""Certificates and keys from the controller onto a host, all in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: pki_files
short_description: Put certificates and private keys from the controller on a host in one module run
version_added: 0.2.0
description:
  - Writes each file whose content, mode, owner or group differs from what is wanted, and only
    those, through a temporary file in the same directory that has its owner, group and mode
    before its content, then a rename, so that a key is never readable by others and a reader
    never sees part of a file. Missing parent directories are made (owned by root, O(directory_mode)).
  - One module run for all the files, where C(ansible.builtin.copy) runs two per file (a stat,
    then C(file) for the attributes) even when nothing changes; the pyflannel.network.etcd role
    puts the cluster CA and each host's certificates and keys in place with it.
  - O(files[].src) is read on the controller (an action plugin), like C(ansible.builtin.copy)'s
    C(src), vault-encrypted files included; the module itself runs with the host's own Python and
    needs nothing of pyflannel there (an etcd member need not be a flannel node).
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.known_states
options:
  files:
    description: The files to put in place.
    type: list
    elements: dict
    required: true
    suboptions:
      dest:
        description: Absolute path of the file on the host.
        type: path
        required: true
      src:
        description:
          - A file on the controller whose content is written (a relative path is looked up as
            C(ansible.builtin.copy) looks up its C(src)). Text (UTF-8) only.
          - Exactly one of O(files[].src) and O(files[].content).
        type: path
      content:
        description: The file's whole content, instead of O(files[].src).
        type: str
      mode:
        description: Octal mode, written exactly whatever the umask.
        type: str
        default: "0644"
      owner:
        description: The owner's user name.
        type: str
        default: root
      group:
        description: The group's name.
        type: str
        default: root
      private:
        description:
          - A private key (or another secret) whose content never shows, in C(--diff) output or in
            the module's arguments in its result.
        type: bool
        default: false
  directory_mode:
    description: Mode of the parent directories the module makes (owned by root).
    type: str
    default: "0755"
"""

EXAMPLES = r"""
- name: The cluster CA and this host's client certificate and key
  pyflannel.network.pki_files:
    files:
      - {src: pki/ca.crt, dest: /etc/pyflannel/etcd/ca.crt}
      - {src: "pki/{{ inventory_hostname }}/client.crt", dest: /etc/pyflannel/etcd/client.crt}
      - {src: "pki/{{ inventory_hostname }}/client.key", dest: /etc/pyflannel/etcd/client.key, mode: "0600", private: true}
  notify: restart etcd
"""

RETURN = r"""
changed_files:
  description: The files that were (or in check mode would be) written or given other attributes.
  returned: always
  type: list
  elements: str
  sample: [/etc/pyflannel/etcd/client.crt]
created_directories:
  description: The parent directories that were (or in check mode would be) made.
  returned: always
  type: list
  elements: str
  sample: [/etc/pyflannel/etcd]
"""

import grp
import os
import pwd
import stat
from dataclasses import dataclass

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.file_state import (
    KNOWN_STATES_ARGUMENT_SPEC,
    write_atomically,
)

# Shown in --diff output instead of a private file's content.
_HIDDEN = "(private: content not shown)\n"


def build_module():
    return AnsibleModule(
        argument_spec={
            **KNOWN_STATES_ARGUMENT_SPEC,
            "files": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "dest": {"type": "path", "required": True},
                    "src": {"type": "path"},
                    "content": {"type": "str"},
                    "mode": {"type": "str", "default": "0644"},
                    "owner": {"type": "str", "default": "root"},
                    "group": {"type": "str", "default": "root"},
                    "private": {"type": "bool", "default": False},
                },
                "mutually_exclusive": [("src", "content")],
                "required_one_of": [("src", "content")],
            },
            "directory_mode": {"type": "str", "default": "0755"},
        },
        supports_check_mode=True,
    )


@dataclass(frozen=True)
class Wanted:
    dest: str
    data: bytes
    mode: int
    uid: int
    gid: int
    private: bool


@dataclass(frozen=True)
class Present:
    data: bytes | None  # None: no such file
    mode: int = 0
    uid: int = -1
    gid: int = -1


def _octal(module, name: str, text: str) -> int:
    try:
        return int(text, 8)
    except ValueError:
        module.fail_json(msg=f"{name}: {text!r} is not an octal mode")


def _wanted(module) -> list[Wanted]:
    """Every file as it should be, or a failure before anything is written: a path given twice,
    a relative path, a user or group this host does not have, a mode that is not octal."""
    wanted = []
    for spec in module.params["files"]:
        dest = spec["dest"]
        if spec["content"] is None:
            module.fail_json(
                msg=f"files: {dest}: src is read on the controller (by the action plugin)"
            )
        if not os.path.isabs(dest):
            module.fail_json(msg=f"files: {dest}: must be an absolute path")
        if dest in (file.dest for file in wanted):
            module.fail_json(msg=f"files: {dest}: given more than once")
        if spec["private"] and spec["content"]:
            # Out of every output, the module's own arguments (shown with -v) included.
            module.no_log_values.add(spec["content"])
        try:
            uid = pwd.getpwnam(spec["owner"]).pw_uid
        except KeyError:
            module.fail_json(msg=f"files: {dest}: this host has no user {spec['owner']!r}")
        try:
            gid = grp.getgrnam(spec["group"]).gr_gid
        except KeyError:
            module.fail_json(msg=f"files: {dest}: this host has no group {spec['group']!r}")
        mode = _octal(module, f"files: {dest}: mode", spec["mode"])
        wanted.append(Wanted(dest, spec["content"].encode(), mode, uid, gid, spec["private"]))
    return wanted


def _present(dest: str) -> Present:
    try:
        with open(dest, "rb") as current:
            facts = os.fstat(current.fileno())
            return Present(current.read(), stat.S_IMODE(facts.st_mode), facts.st_uid, facts.st_gid)
    except FileNotFoundError:
        return Present(None)


def _write(file: Wanted) -> None:
    write_atomically(file.dest, file.data, file.mode, (file.uid, file.gid))


def _attributes(mode: int, uid: int, gid: int) -> str:
    return f"mode {mode:04o}, owner {uid}, group {gid}\n"


def _diff(file: Wanted, present: Present) -> dict[str, str]:
    if present.data == file.data:
        before = _attributes(present.mode, present.uid, present.gid)
        after = _attributes(file.mode, file.uid, file.gid)
    elif file.private:
        before, after = ("" if present.data is None else _HIDDEN), _HIDDEN
    else:
        before = "" if present.data is None else present.data.decode(errors="replace")
        after = file.data.decode()
    return {"before_header": file.dest, "after_header": file.dest, "before": before, "after": after}


def _missing_directories(dests: list[str]) -> list[str]:
    """The files' parent directories that do not exist, and their missing ancestors, parents
    first."""
    missing: set[str] = set()
    for dest in dests:
        directory = os.path.dirname(dest)
        while not os.path.isdir(directory) and directory not in missing:
            missing.add(directory)
            directory = os.path.dirname(directory)
    return sorted(missing, key=lambda directory: directory.count("/"))


def main():
    module = build_module()
    wanted = _wanted(module)
    directory_mode = _octal(module, "directory_mode", module.params["directory_mode"])
    missing = _missing_directories([file.dest for file in wanted])
    present = {file.dest: _present(file.dest) for file in wanted}
    changes = [
        file
        for file in wanted
        if present[file.dest] != Present(file.data, file.mode, file.uid, file.gid)
    ]
    if not module.check_mode:
        try:
            for directory in missing:
                os.mkdir(directory)
                os.chown(directory, 0, 0)
                os.chmod(directory, directory_mode)
            for file in changes:
                _write(file)
        except OSError as err:
            module.fail_json(msg=f"cannot write {err.filename}: {err.strerror}")
    result = {
        "changed": bool(changes or missing),
        "changed_files": [file.dest for file in changes],
        "created_directories": missing,
    }
    if module._diff:
        result["diff"] = [_diff(file, present[file.dest]) for file in changes]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
