#!/usr/bin/python
"""Facts the preflight needs about a node, gathered with the system Python before any change."""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_facts
short_description: Gather what the pyflannel preflight checks about a node
version_added: 0.1.0
description:
  - Reads the node's links, addresses and default routes (as C(ip -json) shows them), answers
    C(ip route get) for the addresses given in O(route_to), and tries each flannel backend's
    kernel device in a throwaway network namespace, so that the preflight on the controller can run
    flanneld's own interface selection and fail before any host changes.
  - Runs with the system Python; it needs nothing of pyflannel on the node, and changes nothing
    (the probe's namespace and device vanish when the probe exits).
  - Also reports whether the pyflannel runtime is installed, and from which wheelhouse.
options:
  route_to:
    description: Addresses to look up the route to (flanneld's C(--iface-can-reach)).
    type: list
    elements: str
    default: []
  packages:
    description: Debian packages whose installed version is reported (null when not installed).
    type: list
    elements: str
    default: []
  venv:
    description: The agent's virtualenv, whose wheelhouse stamp is reported.
    type: path
    default: /opt/pyflannel/venv
  files:
    description: Paths reported as a regular file or not (e.g. a kubeconfig the agent is to read).
    type: list
    elements: path
    default: []
extends_documentation_fragment:
  - pyflannel.network.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
    description: Returns the facts under C(ansible_facts.pyflannel_host).
requirements:
  - iproute2 (C(ip -json))
  - util-linux (C(unshare)) for the backend probes
"""

EXAMPLES = r"""
- name: Gather the node facts the preflight needs
  pyflannel.network.node_facts:
    route_to: [192.0.2.1]
"""

RETURN = r"""
ansible_facts:
  description: Facts about the node.
  returned: always
  type: dict
  contains:
    pyflannel_host:
      description: Links, default routes, route look-ups, backend support, Python and runtime state, files.
      type: dict
      sample:
        links:
          - {name: eth0, index: 2, mtu: 1500, addrs: [{ip: 198.51.100.11, prefixlen: 24, flags: 128}]}
        default_route: {"4": 2, "6": null}
        routes: {"192.0.2.1": {oif: 2, src: 198.51.100.11}}
        backends: {vxlan: {supported: true, reason: ""}, host-gw: {supported: true, reason: ""}}
        python: "3.11"
        interpreter: {implementation: cpython, python: "3.11", abiflags: "", machine: x86_64, libc: glibc 2.36}
        kernel: 6.1.0-18-amd64
        runtime: {python: /opt/pyflannel/venv/bin/python, wheelhouse: 9f2c...}
        packages: {etcd-server: 3.4.23-4+b7, containernetworking-plugins: null}
        files: {/etc/kubernetes/kubelet.conf: true}
"""

import json
import os
import platform
import sys

from ansible.module_utils.basic import AnsibleModule

# IFA_F_* bits, as the kernel reports them and flanneld's interface selection ranks addresses.
_ADDR_FLAGS = {"secondary": 0x01, "temporary": 0x01, "deprecated": 0x20}
_IFA_F_PERMANENT = 0x80
# A device of each kind in a namespace that exists only for the probe.
_PROBES = {
    "vxlan": ["link", "add", "pfl-probe", "type", "vxlan", "id", "1", "dstport", "8472"],
    "udp": ["tuntap", "add", "pfl-probe", "mode", "tun"],
}
WHEELHOUSE_STAMP = ".pyflannel-wheelhouse"


def _ip_json(module, *args):
    rc, out, err = module.run_command([module.get_bin_path("ip", True), "-json", *args])
    if rc != 0:
        module.fail_json(msg=f"ip {' '.join(args)} failed: {err.strip()}")
    return json.loads(out or "[]")


def _flags(addr):
    flags = 0 if addr.get("dynamic") else _IFA_F_PERMANENT
    for name, bit in _ADDR_FLAGS.items():
        if addr.get(name):
            flags |= bit
    return flags


def _links(module):
    links = []
    for link in _ip_json(module, "address", "show"):
        addrs = [
            {"ip": a["local"], "prefixlen": a["prefixlen"], "flags": _flags(a)}
            for a in link.get("addr_info", ())
            if a.get("family") in ("inet", "inet6") and "local" in a
        ]
        links.append(
            {
                "name": link["ifname"],
                "index": link["ifindex"],
                "mtu": link.get("mtu", 0),
                "addrs": addrs,
            }
        )
    return links


def _default_route(module, links, version):
    routes = _ip_json(module, f"-{version}", "route", "show", "default")
    if not routes:
        return None
    by_name = {link["name"]: link["index"] for link in links}
    return by_name.get(routes[0].get("dev"), 0)


def _routes(module, links, addresses):
    by_name = {link["name"]: link["index"] for link in links}
    answers = {}
    for address in addresses:
        rc, out, _err = module.run_command(
            [module.get_bin_path("ip", True), "-json", "route", "get", address]
        )
        hops = json.loads(out or "[]") if rc == 0 else []
        answers[address] = (
            {"oif": by_name.get(hops[0].get("dev"), 0), "src": hops[0].get("prefsrc")}
            if hops
            else None
        )
    return answers


def _backends(module):
    results = {"host-gw": {"supported": True, "reason": ""}}
    unshare = module.get_bin_path("unshare")
    ip = module.get_bin_path("ip", True)
    for backend, args in _PROBES.items():
        if unshare is None:
            results[backend] = {"supported": False, "reason": "unshare (util-linux) is missing"}
            continue
        rc, _out, err = module.run_command([unshare, "--net", ip, *args])
        results[backend] = {"supported": rc == 0, "reason": err.strip()}
    return results


def _packages(module, names):
    """Installed versions from dpkg's database (no network, no apt lists needed)."""
    if not names:
        return {}
    dpkg_query = module.get_bin_path("dpkg-query")
    versions = dict.fromkeys(names)
    if dpkg_query is None:
        return versions
    _rc, out, _err = module.run_command(
        [dpkg_query, "-W", "-f", "${Package} ${Status} ${Version}\n", *names]
    )
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 5 and fields[1:4] == ["install", "ok", "installed"]:
            versions[fields[0]] = fields[4]
    return versions


def _runtime(venv):
    python = os.path.join(venv, "bin", "python")
    try:
        with open(os.path.join(venv, WHEELHOUSE_STAMP), encoding="utf-8") as stamp:
            wheelhouse = stamp.read().strip() or None
    except OSError:
        wheelhouse = None
    return {"python": python if os.path.exists(python) else None, "wheelhouse": wheelhouse}


def _interpreter():
    """What picks the wheels this Python installs (the agent's wheelhouse is built for it)."""
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        libc = ""
    return {
        "implementation": sys.implementation.name,
        "python": "{}.{}".format(*sys.version_info[:2]),
        "abiflags": sys.abiflags,
        "machine": platform.machine(),
        "libc": libc,
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "route_to": {"type": "list", "elements": "str", "default": []},
            "packages": {"type": "list", "elements": "str", "default": []},
            "venv": {"type": "path", "default": "/opt/pyflannel/venv"},
            "files": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    links = _links(module)
    facts = {
        "links": links,
        "default_route": {
            "4": _default_route(module, links, 4),
            "6": _default_route(module, links, 6),
        },
        "routes": _routes(module, links, module.params["route_to"]),
        "backends": _backends(module),
        "python": "{}.{}".format(*sys.version_info[:2]),
        "interpreter": _interpreter(),
        "kernel": platform.release(),
        "runtime": _runtime(module.params["venv"]),
        "packages": _packages(module, module.params["packages"]),
        "files": {path: os.path.isfile(path) for path in module.params["files"]},
    }
    module.exit_json(changed=False, ansible_facts={"pyflannel_host": facts})


if __name__ == "__main__":
    main()
