#!/usr/bin/python
"""Thin adapter over pyflannel_runtime.ops.lease."""

from __future__ import annotations

DOCUMENTATION = r"""
module: lease
short_description: Pin a node's subnet as a reservation, or release the node's lease
version_added: 0.2.0
description:
  - With O(state=present) (etcd datastore), makes the node's subnet a reservation (a subnet key
    without an etcd lease) naming its public IPs, as flannel's reservations are made by hand; a
    subnet the node already holds under a lease keeps the agent's own value. A subnet leased by
    another node is an error.
  - With O(state=absent), releases the node's lease at once instead of leaving it to expire
    (after 24 hours). Every peer's watch sees it go and drops the node's routes, neighbours and
    FDB entries, and the subnet is free for the next node. Stop the node's agent first, as
    C(remove-node.yml) does, or it takes a new lease.
  - "etcd: the node's subnet keys are found as the agent finds its own: by O(public_ip) (or
    O(public_ipv6) for a node without IPv4), or by O(subnet)/O(ipv6_subnet); they are deleted.
    A reservation is the operator's pin and is kept unless O(release_reservation) is set (then
    the subnet stays taken and the peers keep their routes to it)."
  - "Kubernetes: the node's lease is its podCIDR, advertised by flannel's annotations on its
    Node. The Node belongs to the cluster: only the annotations flannel writes are removed (the
    C(*-overwrite) ones and the podCIDR stay; deleting the Node frees those). There is nothing to
    pin: the cluster assigns podCIDRs."
  - Runs where the lease store can be reached. On a node it runs with the agent's virtualenv's
    Python and takes every lease store setting it is not given from the agent's environment file,
    as C(pyflannel status) takes them. On the controller (C(delegate_to=localhost)) O(venv) names
    the controller's Python environment (C(ansible_playbook_python)'s), which has pyflannel_runtime
    as the collection's controller plugins need.
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.venv
  - pyflannel.network.attributes.etcd
  - pyflannel.network.attributes.datastore
options:
  state:
    description: C(present) pins the node's subnet as a reservation; C(absent) releases the node's lease.
    type: str
    choices: [present, absent]
    default: present
  kubeconfig_file:
    description:
      - With O(datastore=kubernetes), a kubeconfig allowed to patch other nodes' status (flannel's
        ClusterRole; a kubelet's own credentials may patch only its own Node).
      - Default the agent's setting, else the in-cluster settings.
    type: path
  kube_annotation_prefix:
    description:
      - With O(datastore=kubernetes), flanneld's C(--kube-annotation-prefix) (default the agent's
        setting, else C(flannel.alpha.coreos.com)).
    type: str
  node_name:
    description: With O(datastore=kubernetes), the Node whose flannel annotations are removed.
    type: str
  public_ip:
    description: The node's public IPv4 address (its agent's C(--public-ip)), which its lease names.
    type: str
  public_ipv6:
    description: The node's public IPv6 address.
    type: str
  subnet:
    description: The node's IPv4 subnet; required to pin, and with O(state=absent) another way to find its lease.
    type: str
  ipv6_subnet:
    description: The node's IPv6 subnet.
    type: str
  release_reservation:
    description: With O(state=absent), release the node's subnet also when it is a reservation.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Pin node3 to 10.244.7.0/24, from a node with the agent's etcd settings
  pyflannel.network.lease:
    subnet: 10.244.7.0/24
    public_ip: 198.51.100.13
  run_once: true

- name: Release the lease of a node that is gone, from the controller
  pyflannel.network.lease:
    state: absent
    etcd_endpoints: [https://198.51.100.11:2379]
    etcd_cafile: inventories/mycluster-credentials/etcd-pki/ca.crt
    etcd_certfile: inventories/mycluster-credentials/etcd-pki/node3/client.crt
    etcd_keyfile: inventories/mycluster-credentials/etcd-pki/node3/client.key
    public_ip: 198.51.100.13
    # The controller's environment, and no agent's environment file there.
    venv: "{{ ansible_playbook_python | dirname | dirname }}"
    agent_env: ""
  delegate_to: localhost

- name: Remove flannel's annotations from a Node
  pyflannel.network.lease:
    state: absent
    datastore: kubernetes
    kubeconfig_file: /etc/kubernetes/admin.conf
    node_name: node3
"""

RETURN = r"""
keys:
  description: Every key the module found for the node (an etcd key, or the Node's flannel annotations
    as C(nodes/<name>)), with its value before and after.
  returned: always
  type: list
  elements: dict
  contains:
    key:
      description: The etcd key, or C(nodes/<name>).
      type: str
      sample: /coreos.com/network/subnets/10.244.3.0-24
    before:
      description: The value before (null when absent).
      type: str
    after:
      description: The value now, or in check mode the one it would get (null when deleted).
      type: str
    changed:
      description: Whether the key was (or would be) written or deleted.
      type: bool
kept:
  description: Reservations of the node that were kept (O(release_reservation) is off).
  returned: always
  type: list
  elements: str
  sample: [/coreos.com/network/subnets/10.244.7.0-24]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    ETCD_ARGUMENT_SPEC,
    VENV_ARGUMENT_SPEC,
    agent_settings,
    require_runtime,
)

# The lease store's settings, each also an option of its own name (the agent's setting else).
STORE_OPTIONS = (*ETCD_ARGUMENT_SPEC, "datastore", "kubeconfig_file", "kube_annotation_prefix")


def build_module():
    return AnsibleModule(
        argument_spec={
            **VENV_ARGUMENT_SPEC,
            **ETCD_ARGUMENT_SPEC,
            "datastore": {"type": "str", "choices": ["etcd", "kubernetes"]},
            "kubeconfig_file": {"type": "path"},
            "kube_annotation_prefix": {"type": "str"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "node_name": {"type": "str"},
            "public_ip": {"type": "str"},
            "public_ipv6": {"type": "str"},
            "subnet": {"type": "str"},
            "ipv6_subnet": {"type": "str"},
            "release_reservation": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )


def _node(params):
    from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

    from pyflannel_runtime.ops.lease import NodeLease

    def parse(name, kind):
        value = params[name]
        return None if value in (None, "") else kind(value)

    return NodeLease(
        public_ip=parse("public_ip", IPv4Address),
        public_ipv6=parse("public_ipv6", IPv6Address),
        subnet=parse("subnet", IPv4Network),
        ipv6_subnet=parse("ipv6_subnet", IPv6Network),
    )


def _run(module):
    from pyflannel_runtime.ops import lease
    from pyflannel_runtime.ops.agent_settings import lease_store

    params = module.params
    opts = agent_settings(module, STORE_OPTIONS)
    if opts.kube_subnet_mgr:
        if params["state"] == "present":
            module.fail_json(
                msg="state=present: with the kubernetes datastore a node's subnet is its podCIDR, "
                "which the cluster assigns; there is no reservation to pin"
            )
        return lease.release_kube(lease_store(opts), params["node_name"], check=module.check_mode)
    try:
        node = _node(params)
    except ValueError as err:
        module.fail_json(msg=f"public_ip, public_ipv6, subnet, ipv6_subnet: {err}")
    if params["state"] == "present":
        return lease.pin_etcd(lease_store(opts), node, check=module.check_mode)
    return lease.release_etcd(
        lease_store(opts),
        node,
        release_reservation=params["release_reservation"],
        check=module.check_mode,
    )


def main():
    module = build_module()
    require_runtime(module)
    from pyflannel_runtime import PyflannelError

    try:
        done = _run(module)
    except (PyflannelError, OSError) as err:
        module.fail_json(msg=str(err) or type(err).__name__)
    keys = [
        {"key": c.key, "before": c.before, "after": c.after, "changed": c.changed}
        for c in done.changes
    ]
    result = {"changed": done.changed, "keys": keys, "kept": list(done.kept)}
    if module._diff:
        result["diff"] = [
            {
                "before_header": c.key,
                "after_header": c.key,
                "before": c.before or "",
                "after": c.after or "",
            }
            for c in done.changes
            if c.changed
        ]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
