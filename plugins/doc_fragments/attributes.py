"""Documentation the modules share: check and diff support, the runtime, the etcd options."""

from __future__ import annotations


class ModuleDocFragment:
    # Full check and diff support unless a module says otherwise.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and return the changed status it predicts, writing nothing.
    support: full
  diff_mode:
    description: Returns details on what has changed (or would change in check mode) with C(--diff).
    support: full
author:
  - pyflannel maintainers
"""

    VENV = r"""
options: {}
requirements:
  - pyflannel_runtime, from the agent's virtualenv (the agent role installs it); run the module with
    C(ansible_python_interpreter) set to that virtualenv's Python
"""

    ETCD = r"""
options:
  etcd_endpoints:
    description: etcd client URLs, tried in order (flanneld's C(--etcd-endpoints)).
    type: list
    elements: str
    required: true
  etcd_prefix:
    description: The key prefix flannel's data lives under (flanneld's C(--etcd-prefix)).
    type: str
    default: /coreos.com/network
  etcd_cafile:
    description: CA bundle that signed the etcd server certificates.
    type: path
  etcd_certfile:
    description: Client certificate for etcd (with O(etcd_keyfile)).
    type: path
  etcd_keyfile:
    description: Private key of the client certificate.
    type: path
  etcd_username:
    description: etcd user, when etcd authentication is on.
    type: str
  etcd_password:
    description: Password of O(etcd_username).
    type: str
"""
