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
  - pyflannel maintainers (@pyflannel)
"""

    VENV = r"""
options:
  venv:
    description:
      - The agent's virtualenv, whose Python runs this module (the collection's action plugin
        starts it there, whatever interpreter the host uses otherwise).
      - Default the host's C(flannel_agent_venv) (the roles' setting), else C(/opt/pyflannel/venv).
    type: path
    version_added: 0.2.0
requirements:
  - pyflannel_runtime, from the agent's virtualenv (the agent role installs it); the module runs
    with that virtualenv's Python by itself, with no C(ansible_python_interpreter) to set
"""

    # Files the action plugin compares with what the host reported earlier in the run
    # (plugins/plugin_utils/host_files.py).
    KNOWN_STATES = r"""
options:
  known_states:
    description:
      - The files' states as C(pyflannel.network.node_facts) reported them earlier in the same run
        (C(ansible_facts.pyflannel_host.paths)). When every file is already as wanted there
        (content, mode, owner and group), the action plugin does not run the module on the host and
        reports no change; otherwise the module runs and compares for itself.
      - Only for states gathered before any other task of the run could change these files.
    type: dict
    version_added: 0.2.0
  digest_key:
    description: The key the states in O(known_states) were digested with (node_facts' C(digest_key)).
    type: str
    version_added: 0.2.0
"""

    # The etcd connection (action group pyflannel.network.etcd).
    ETCD = r"""
options:
  etcd_endpoints:
    description:
      - etcd client URLs, tried in order (flanneld's C(--etcd-endpoints)).
      - Default the agent's setting (see O(agent_env)), else flanneld's default
        C(http://127.0.0.1:4001,http://127.0.0.1:2379).
    type: list
    elements: str
  etcd_prefix:
    description:
      - The key prefix flannel's data lives under (flanneld's C(--etcd-prefix)).
      - Default the agent's setting, else C(/coreos.com/network).
    type: str
  etcd_cafile:
    description: CA bundle that signed the etcd server certificates (default the agent's setting).
    type: path
  etcd_certfile:
    description: Client certificate for etcd, with O(etcd_keyfile) (default the agent's setting).
    type: path
  etcd_keyfile:
    description: Private key of the client certificate (default the agent's setting).
    type: path
  etcd_username:
    description: etcd user, when etcd authentication is on (default the agent's setting).
    type: str
  etcd_password:
    description: Password of O(etcd_username) (default the agent's setting).
    type: str
  agent_env:
    description:
      - The agent's environment file, whose C(FLANNELD_*) settings apply to every option of the
        agent's that is not given (as C(pyflannel status) reads them); C(FLANNELD_*) variables in
        the module's environment come first.
      - Default C(/etc/pyflannel/pyflanneld.env) when it exists (the agent role writes it); an
        empty string reads none, so that only the options given and flanneld's defaults apply.
    type: path
    version_added: 0.2.0
"""

    # Which lease store (in action group pyflannel.network.kubernetes, with KUBERNETES).
    DATASTORE = r"""
options:
  datastore:
    description:
      - Where the leases are (C(kubernetes) is flanneld's C(--kube-subnet-mgr)).
      - Default the agent's setting (see O(agent_env)), else C(etcd).
    type: str
    choices: [etcd, kubernetes]
"""

    # The Kubernetes datastore (action group pyflannel.network.kubernetes, with DATASTORE).
    KUBERNETES = r"""
options:
  kubeconfig_file:
    description:
      - With O(datastore=kubernetes), the kubeconfig (default the agent's setting, else the
        in-cluster settings).
    type: path
  net_config_path:
    description:
      - With O(datastore=kubernetes), the net-conf.json the agent reads (default the agent's
        setting, else C(/etc/kube-flannel/net-conf.json)).
    type: path
"""

    # The controller-side actions that check the inventory as one cluster first
    # (plugins/plugin_utils/cluster.py).
    CLUSTER = r"""
options:
  group:
    description: The inventory group of the flannel nodes (default C(flannel_nodes_group), else C(flannel_nodes)).
    type: str
requirements:
  - pyflannel_runtime, pydantic and jinja2 on the controller (C(pip install 'pyflannel[controller]') in
    Ansible's environment)
"""
