"""The flannel CNI plugin's installation as the collection's cni_plugin module drives it: the
launcher script, the links to it and their record (pyflannel_runtime.cni.install, which
`pyflannel cni install` shares). Here so that modules reach the node runtime through ops alone."""

from __future__ import annotations

import os

from pyflannel_runtime.cni.install import (
    PLUGIN_NAME,
    LinkError,
    LinkPlan,
    LinkRecord,
    launcher_script,
    make_links,
    plan_install,
    removal,
)
from pyflannel_runtime.ops.files import WantedFile, plan_files

_LAUNCHER_MODE = 0o755
_RECORD_MODE = 0o644


def plugin_files(
    bin_dir: str, plugins_dir: str, names: list[str], record_path: str, recorded: LinkRecord
) -> tuple[LinkPlan, dict[str, WantedFile]]:
    """The links to make, and the files the installation wants: the launcher, and the record
    of the links when it changes. Raises LinkError for a reference plugin that is missing."""
    plan = plan_install(bin_dir, plugins_dir, names, recorded)
    wanted = {os.path.join(bin_dir, PLUGIN_NAME): WantedFile(launcher_script(), _LAUNCHER_MODE)}
    if plan.record != recorded:
        wanted[record_path] = WantedFile(plan.record.text(), _RECORD_MODE)
    return plan, wanted


def plugin_current(bin_dir: str, plugins_dir: str, names: list[str], record_path: str) -> bool:
    """The plugin is installed as this runtime installs it: nothing to write, no link to make
    (read-only). Raises LinkError, ValueError for a record that is not one, FilesError."""
    plan, wanted = plugin_files(
        bin_dir, plugins_dir, names, record_path, LinkRecord.load(record_path)
    )
    return not plan.make and not plan_files(wanted).changed


__all__ = [
    "PLUGIN_NAME",
    "LinkError",
    "LinkRecord",
    "launcher_script",
    "make_links",
    "plan_install",
    "plugin_current",
    "plugin_files",
    "removal",
]
