"""A local lab of bare-metal-like hosts: podman containers from a Debian rootfs, systemd as PID 1,
reached over SSH on their own underlay bridge, described by a generated Ansible inventory. Development tooling: the main job
(``./scripts/lab``), the tests, the benchmarks and molecule use it from the checkout; no wheel
and no collection tarball carries it.

* :mod:`.rootfs`: the host image (debootstrap recipe, cache keyed by the recipe, podman import).
* :mod:`.hosts`: boot, restart and tear down the hosts.
* :mod:`.inventory`: the Ansible inventory the lab writes.
* :mod:`.playbook`: run the repository's playbooks against the lab and read their recap.
* ``python -m pyflannel_lab``: the command line.

The agent-only lab, without systemd or Ansible, lives in network namespaces on this machine:

* :mod:`.netns_lab`: an underlay bridge, hosts and pods in namespaces, and helpers that drive
  backends there from synthetic leases.
* :mod:`.netns_agents`: pyflanneld on every host against a real etcd (:mod:`.etcd_server`) or a
  Node API server, with pods wired by the CNI plugin.
* :mod:`.netns_cli`: ``python -m pyflannel_lab netns up|down``.
"""
