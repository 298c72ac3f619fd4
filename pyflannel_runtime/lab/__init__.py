"""A local lab of bare-metal-like hosts: podman containers from a Debian rootfs, systemd as PID 1,
reached over SSH on their own underlay bridge, described by a generated Ansible inventory.

* :mod:`.rootfs`: the host image (debootstrap recipe, cache keyed by the recipe, podman import).
* :mod:`.hosts`: boot, restart and tear down the hosts.
* :mod:`.inventory`: the Ansible inventory the lab writes.
* ``python -m pyflannel_runtime.lab``: the command line.
"""
