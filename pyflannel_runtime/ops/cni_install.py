"""The flannel CNI plugin's installation as the collection's cni_plugin module drives it: the
launcher script, the links to it and their record (pyflannel_runtime.cni.install, which
`pyflannel cni install` shares). Here so that modules reach the node runtime through ops alone."""

from pyflannel_runtime.cni.install import (
    PLUGIN_NAME,
    LinkError,
    LinkRecord,
    launcher_script,
    make_links,
    plan_install,
    removal,
)

__all__ = [
    "PLUGIN_NAME",
    "LinkError",
    "LinkRecord",
    "launcher_script",
    "make_links",
    "plan_install",
    "removal",
]
