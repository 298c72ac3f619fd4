#!/usr/bin/python
"""The agent's wheelhouse installed into its virtualenv on a node, in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: runtime_install
short_description: Install the pyflannel runtime from its wheelhouse into the agent's virtualenv
version_added: 0.2.0
description:
  - Installs a wheelhouse that the pyflannel.network.wheelhouse action plugin built or checked on
    the controller into the agent's virtualenv on a node, offline, in one module run (the action
    plugin copies the archive into the task's temporary directory on the host, and the module
    unpacks it, makes the virtualenv where it is missing, installs, removes what the node's
    settings no longer use, records the wheelhouse, and removes the unpacked wheels and the copy
    of the archive whatever happens).
  - The virtualenv is made without pip (C(python3 -m venv --without-pip)); Debian's pip
    (C(python3-pip), pip 22.3 or newer) installs into it from outside with C(--python), from the
    unpacked wheels alone (C(--no-index)).
  - Into a virtualenv that was there already (an older runtime, other settings), the runtime's
    own wheel is installed again even where its version number is the same, and every
    distribution the virtualenv holds that is not one of O(distributions) is uninstalled
    (another datastore's or backend's extra, an older runtime's dependencies, the pip of a
    virtualenv made with one).
  - Nothing is done where the virtualenv records O(digest) as installed and has its Python.
  - The archive's members must be regular files or directories inside the directory they are
    unpacked into; any other archive is refused before anything is unpacked.
  - The module runs with the host's own Python; the pyflannel.network.runtime role runs it where
    a node lacks the run's wheelhouse.
extends_documentation_fragment:
  - pyflannel.network.attributes
attributes:
  check_mode:
    support: partial
    details:
      - Says whether a real run installs (the recorded wheelhouse differs, or the virtualenv has
        no Python) and whether it makes the virtualenv; what it would uninstall is known only
        once the wheelhouse is installed, so check mode returns none. Nothing is copied to the
        host.
  diff_mode:
    support: full
    details: The wheelhouse recorded in the virtualenv, before and after.
options:
  archive:
    description:
      - The wheelhouse archive (C(wheelhouse.tar)) on the controller, as the
        pyflannel.network.wheelhouse action plugin returns it for the host.
      - The action plugin copies it to the host; the module removes that copy.
    type: path
    required: true
  venv:
    description: The agent's virtualenv (the roles' C(flannel_agent_venv)).
    type: path
    required: true
  digest:
    description: The wheelhouse's digest, recorded in the virtualenv once it is installed (C(.pyflannel-wheelhouse)).
    type: str
    required: true
  requirement:
    description: What is installed from the archive, the runtime's wheel with the node's extras.
    type: str
    required: true
  project_wheel:
    description: The file name of the runtime's own wheel in the archive.
    type: str
    required: true
  distributions:
    description: The projects of the archive's wheels, their names normalized (PEP 503).
    type: list
    elements: str
    required: true
  unpack_dir:
    description:
      - The directory in which the archive is unpacked, into a subdirectory named for the
        wheelhouse, while it is installed (made where missing).
    type: path
    default: /var/cache/pyflannel/wheelhouse
requirements:
  - Python's venv module and Debian's pip (C(python3-venv), C(python3-pip)) on the host
"""

EXAMPLES = r"""
- name: Install the runtime where the node lacks this run's wheelhouse
  pyflannel.network.runtime_install:
    archive: "{{ _flannel_wheelhouse.archive }}"
    venv: /opt/pyflannel/venv
    digest: "{{ _flannel_wheelhouse.digest }}"
    requirement: "{{ _flannel_wheelhouse.requirement }}"
    project_wheel: "{{ _flannel_wheelhouse.project_wheel }}"
    distributions: "{{ _flannel_wheelhouse.distributions }}"
"""

RETURN = r"""
venv_created:
  description: Whether the virtualenv was (or in check mode would be) made.
  returned: always
  type: bool
removed:
  description: The distributions uninstalled from the virtualenv, their names normalized.
  returned: always
  type: list
  elements: str
  sample: [numpy]
"""

import json
import os
import re
import shutil
import tarfile
from contextlib import suppress

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.file_state import write_atomically
from ansible_collections.pyflannel.network.plugins.module_utils.wheelhouse_record import (
    RECORD_NAME,
    installed_wheelhouse,
)

# The unpacked wheels' modes, whatever the archive says.
_FILE_MODE = 0o644
_DIRECTORY_MODE = 0o755
_CHUNK = 1 << 20


class InstallError(Exception):
    """A step that failed, with what the command printed."""

    def __init__(self, msg, **details):
        super().__init__(msg)
        self.details = details


def build_module():
    return AnsibleModule(
        argument_spec={
            "archive": {"type": "path", "required": True},
            "venv": {"type": "path", "required": True},
            "digest": {"type": "str", "required": True},
            "requirement": {"type": "str", "required": True},
            "project_wheel": {"type": "str", "required": True},
            "distributions": {"type": "list", "elements": "str", "required": True},
            "unpack_dir": {"type": "path", "default": "/var/cache/pyflannel/wheelhouse"},
        },
        supports_check_mode=True,
    )


def normalized(name):
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def stale(listed, distributions):
    """What `pip list --format=json` shows that is none of the wheelhouse's distributions, by
    normalized name."""
    wanted = {normalized(name) for name in distributions}
    names = (normalized(entry["name"]) for entry in listed)
    return [name for name in names if name not in wanted]


def refused_member(member, target):
    """Why `member` of an archive may not be unpacked into `target`; None when it may. Only
    regular files and directories, inside `target`: a hostile archive's links, devices,
    absolute paths and `..` go nowhere."""
    if not (member.isfile() or member.isdir()):
        return f"{member.name}: not a regular file or directory"
    path = os.path.normpath(os.path.join(target, member.name))
    inside = path.startswith(target.rstrip(os.sep) + os.sep) or (member.isdir() and path == target)
    if os.path.isabs(member.name) or not inside:
        return f"{member.name}: outside the directory it is unpacked into"
    return None


def unpack(archive, target):
    """Every member of `archive` written into `target` with the modes above, once all are
    checked."""
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            refused = [why for why in (refused_member(m, target) for m in members) if why]
            if refused:
                raise InstallError(f"refusing the wheelhouse archive: {'; '.join(refused)}")
            for member in members:
                path = os.path.normpath(os.path.join(target, member.name))
                if member.isdir():
                    os.makedirs(path, mode=_DIRECTORY_MODE, exist_ok=True)
                    continue
                os.makedirs(os.path.dirname(path), mode=_DIRECTORY_MODE, exist_ok=True)
                source = tar.extractfile(member)
                with source, open(path, "wb") as out:
                    shutil.copyfileobj(source, out, _CHUNK)
                os.chmod(path, _FILE_MODE)
    except (tarfile.TarError, OSError) as err:
        raise InstallError(f"cannot unpack the wheelhouse archive {archive}: {err}") from err


class Installer:
    """The commands of an install, each failing with what it printed."""

    def __init__(self, module, wheels):
        self.module = module
        self.wheels = wheels
        self.python3 = module.get_bin_path("python3", required=True)
        self.venv = module.params["venv"]
        # Debian's pip, run by the system's Python, installing into the virtualenv's.
        self.pip = [
            self.python3,
            "-m",
            "pip",
            "--python",
            os.path.join(self.venv, "bin", "python"),
            "--disable-pip-version-check",
        ]

    def run(self, what, argv):
        rc, out, err = self.module.run_command(argv)
        if rc != 0:
            raise InstallError(
                f"{what} failed (rc {rc}): {(err or out).strip()}",
                cmd=argv,
                rc=rc,
                stdout=out,
                stderr=err,
            )
        return out

    def create_venv(self):
        self.run(
            "creating the virtualenv",
            [self.python3, "-m", "venv", "--without-pip", self.venv],
        )

    def install(self, requirement):
        self.run(
            "installing the runtime",
            [
                *self.pip,
                "install",
                "--no-index",
                "--find-links",
                self.wheels,
                f"{self.wheels}/{requirement}",
            ],
        )

    def reinstall_project(self, project_wheel):
        # Same version number, new code: only the project's own wheel is forced in.
        self.run(
            "installing this build of the runtime",
            [
                *self.pip,
                "install",
                "--no-index",
                "--no-deps",
                "--force-reinstall",
                f"{self.wheels}/{project_wheel}",
            ],
        )

    def remove_stale(self, distributions):
        listed = self.run("listing the virtualenv", [*self.pip, "list", "--format=json"])
        try:
            names = stale(json.loads(listed), distributions)
        except (ValueError, TypeError, KeyError) as err:
            raise InstallError(
                f"pip list gave no list of distributions: {err}", stdout=listed
            ) from err
        if names:
            self.run(
                "removing what the settings no longer use",
                [*self.pip, "uninstall", "--yes", *names],
            )
        return names


def install(module, wheels, create_venv):
    """Unpacked, installed (into a new virtualenv where `create_venv`) and recorded: what was
    removed."""
    params = module.params
    installer = Installer(module, wheels)
    parent = os.path.dirname(wheels)
    os.makedirs(parent, mode=_DIRECTORY_MODE, exist_ok=True)
    # Left by an install that was killed.
    shutil.rmtree(wheels, ignore_errors=True)
    os.mkdir(wheels)
    os.chmod(wheels, _DIRECTORY_MODE)
    unpack(params["archive"], wheels)
    if create_venv:
        installer.create_venv()
    installer.install(params["requirement"])
    removed = []
    if not create_venv:
        installer.reinstall_project(params["project_wheel"])
        removed = installer.remove_stale(params["distributions"])
    # The installed wheelhouse's digest, 0644.
    write_atomically(
        os.path.join(params["venv"], RECORD_NAME), f"{params['digest']}\n".encode(), 0o644
    )
    return removed


def main():
    module = build_module()
    params = module.params
    venv, digest = params["venv"], params["digest"]
    before = installed_wheelhouse(venv)
    has_python = os.path.exists(os.path.join(venv, "bin", "python"))
    changed = before != digest or not has_python
    result = {"changed": changed, "venv_created": not has_python, "removed": []}
    if module._diff and changed:
        record = os.path.join(venv, RECORD_NAME)
        result["diff"] = {
            "before_header": record,
            "after_header": record,
            "before": f"{before}\n" if before else "",
            "after": f"{digest}\n",
        }
    wheels = os.path.normpath(os.path.join(params["unpack_dir"], digest[:16]))
    if not os.path.isabs(wheels):
        module.fail_json(msg=f"unpack_dir: {params['unpack_dir']} must be an absolute path")
    try:
        if changed and not module.check_mode:
            result["removed"] = install(module, wheels, create_venv=not has_python)
    except InstallError as err:
        module.fail_json(msg=str(err), **err.details)
    except OSError as err:
        module.fail_json(msg=f"cannot install the runtime into {venv}: {err}")
    finally:
        if changed and not module.check_mode:
            shutil.rmtree(wheels, ignore_errors=True)
        if not module.check_mode:
            with suppress(FileNotFoundError):
                os.unlink(params["archive"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
