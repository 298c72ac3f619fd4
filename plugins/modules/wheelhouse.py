#!/usr/bin/python
"""Documentation only: the action plugin of this name (plugins/action/wheelhouse.py) runs on the
controller."""

from __future__ import annotations

DOCUMENTATION = r"""
module: wheelhouse
short_description: Build (once) or check the agent's wheelhouses on the controller
version_added: 0.1.0
description:
  - Builds the wheels of the pyflannel runtime and its dependencies into one archive on the
    controller, which the pyflannel.network.runtime role unpacks on each node and installs offline.
  - The archive holds the runtime, its dependencies and the extras the cluster's settings use
    (O(cluster)), nothing more; the default etcd node's holds the runtime and pyroute2 alone.
  - One archive per distinct interpreter among O(interpreters) (Python version, ABI, platform, as
    their wheel tags name them). The dependencies' binary wheels are downloaded for the node's
    interpreter, not the controller's, so one play serves Debian 12 (Python 3.11) and Debian 13
    (Python 3.13) nodes together.
  - A build is cached under the digest of what goes into it (the runtime's source, the
    interpreter it is built for and the extras), so that runs, tests and molecule scenarios share
    one.
  - With O(archive), checks a prebuilt wheelhouse instead and gives it to every host.
  - An action plugin; it runs on the controller and contacts no host.
extends_documentation_fragment:
  - pyflannel.network.attributes
attributes:
  check_mode:
    support: full
    details: Builds in either mode; the build changes nothing on any host.
  diff_mode:
    support: none
options:
  source:
    description:
      - The pyflannel source tree to build from.
      - By default the runtime's source the collection carries at its root (the repository itself
        in-tree; the copy in the tarball where the collection is installed).
    type: path
  cache_dir:
    description: Where builds are kept, by digest.
    type: path
    default: ~/.cache/pyflannel/wheelhouse
  archive:
    description: A prebuilt wheelhouse archive to check and use instead of building (not with O(source)).
    type: path
  interpreters:
    description:
      - Each host's Python, as pyflannel.network.node_facts reports it (C(ansible_facts.pyflannel_host.interpreter)),
        by inventory host name.
    type: dict
    default: {}
  cluster:
    description:
      - The cluster's settings, as the pyflannel.network.preflight role's cluster facts carry them
        (C(_flannel_cluster)), from which the runtime's extras are picked.
      - C(flannel_datastore=kubernetes) adds C(kube) (urllib3 and PyYAML, for the Kubernetes API
        client and the kubeconfig); C(flannel_backend_type=udp) adds C(udp) (numpy, for the udp
        backend's segmentation offload). Empty, no extras.
    type: dict
    default: {}
requirements:
  - pyflannel_runtime and pip on the controller, and the package index reachable from it for a build
"""

EXAMPLES = r"""
- name: Build the wheelhouses once for the run, one per interpreter of the play's hosts
  pyflannel.network.wheelhouse:
    interpreters: >-
      {{ dict(ansible_play_hosts | zip(ansible_play_hosts
         | map('extract', hostvars, ['ansible_facts', 'pyflannel_host', 'interpreter']))) }}
    cluster: "{{ _flannel_cluster }}"
  run_once: true
  register: __flannel_wheelhouse
"""

RETURN = r"""
wheelhouses:
  description: Each wheelhouse of the run.
  returned: success
  type: list
  elements: dict
  contains:
    archive:
      description: The wheelhouse archive on the controller.
      type: str
    digest:
      description: What a node records as installed (the build's source digest, or a prebuilt archive's sha256).
      type: str
    project_wheel:
      description: The file name of the runtime's own wheel in the archive.
      type: str
    python:
      description: The Python version the wheels were built for.
      type: str
      sample: "3.13"
    target:
      description: The interpreter's wheel tags, as one key (empty for a prebuilt archive).
      type: str
      sample: cp313-cp313-manylinux_2_41_x86_64
    extras:
      description: The runtime's extras a node installs from it.
      type: list
      elements: str
      sample: [kube]
    requirement:
      description: What a node installs, the runtime's wheel with its extras.
      type: str
      sample: pyflannel-0.1.0-py3-none-any.whl[kube]
    distributions:
      description:
        - The projects of the archive's wheels, their names normalized (PEP 503), which is what the
          virtualenv holds once installed. Anything else in it is left from other settings and is
          removed.
      type: list
      elements: str
      sample: [pyflannel, pyroute2]
hosts:
  description: The wheelhouse of each host in O(interpreters), by host name, as an item of RV(wheelhouses).
  returned: success
  type: dict
"""
