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
  - Needs nothing of pyflannel on the node, and changes nothing (the probe's namespace and device
    vanish when the probe exits). Its action plugin runs it with the agent's virtualenv's Python when
    the node has one (see O(venv)), else with the host's own Python.
  - Also reports whether the pyflannel runtime is installed, and from which wheelhouse.
  - For a re-run that changes nothing to cost one module run per host, it also reports, when asked,
    the state of the files the roles write (O(paths)), systemd units (O(units)) and an etcd member's
    health (O(etcd_health)), and, with the agent's virtualenv's Python only, the checks of O(checks)
    (the datapath against the lease store (as C(pyflannel.network.routes) in check mode), the CNI
    plugin's installation and the pod addresses, as C(pyflannel.network.ipam) in check mode). The
    roles then skip, on the controller, the tasks that would change nothing.
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
  paths:
    description:
      - Paths whose state is reported in C(ansible_facts.pyflannel_host.paths), not following
        symbolic links; the type, mode, owner, group and a digest of a regular file's content (files
        up to 1 MiB).
    type: list
    elements: path
    default: []
    version_added: 0.2.0
  digest_key:
    description:
      - The key the digests of O(paths) are made with (HMAC-SHA256), so that a digest of a file that
        holds a secret says nothing about it to a reader of the output; unset, a plain SHA-256.
    type: str
    version_added: 0.2.0
  units:
    description: systemd units whose load, active and unit file states are reported.
    type: list
    elements: str
    default: []
    version_added: 0.2.0
  etcd_health:
    description: An etcd member's C(/health) to ask (once, with a 5 s timeout).
    type: dict
    version_added: 0.2.0
    suboptions:
      url:
        description: The member's C(/health) URL.
        type: str
        required: true
      cafile:
        description: The CA that signed the member's certificate.
        type: path
      certfile:
        description: A client certificate the member accepts.
        type: path
      keyfile:
        description: Its private key.
        type: path
  checks:
    description:
      - Checks made with the pyflannel runtime, read-only, when the module runs with the agent's
        virtualenv's Python; without the runtime each is reported as not made.
    type: dict
    version_added: 0.2.0
    suboptions:
      datapath:
        description:
          - The datapath against the lease store, with the agent's own settings (its environment
            file), as C(pyflannel.network.routes) reports it in check mode.
        type: bool
        default: false
      cni_plugin:
        description:
          - Whether the flannel CNI plugin is installed as C(pyflannel.network.cni_plugin) would
            install it, with that module's options (and defaults).
        type: dict
        suboptions:
          bin_dir:
            description: The CNI bin directory.
            type: path
            default: /opt/cni/bin
          plugins_dir:
            description: Where the reference plugins are.
            type: path
            default: /usr/lib/cni
          link:
            description: The reference plugins linked into O(checks.cni_plugin.bin_dir).
            type: list
            elements: str
            default: [bridge, host-local, portmap, loopback]
          record:
            description: The record of the links made.
            type: path
            default: /var/lib/pyflannel/cni-plugins.json
      network_config:
        description:
          - What the etcd datastore holds under C(<prefix>/config), with the agent's own settings
            (what C(pyflannel.network.network_config) compares the cluster's network config with).
        type: bool
        default: false
      leases:
        description:
          - Every lease, the utilisation of the network and the unreadable keys, with the agent's own
            settings, as C(pyflannel.network.leases_info) reports them but with no lease matched to
            a host (the controller matches them to the inventory; that action's C(known) option).
        type: bool
        default: false
      ipam:
        description: The pod addresses, as C(pyflannel.network.ipam) reports them in check mode.
        type: dict
        suboptions:
          conflist:
            description: The flannel conflist.
            type: path
            default: /etc/cni/net.d/10-flannel.conflist
          cni_path:
            description: The CNI bin directory.
            type: str
            default: /opt/cni/bin
          free_warning_percent:
            description:
              - The free share of a pool below which the ipam module warns; the result is then not
                clean (C(clean) is true when that module would have said nothing more than this
                result).
            type: int
            default: 10
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

- name: Also the agent's unit, its environment file and the datapath
  pyflannel.network.node_facts:
    units: [pyflanneld]
    paths: [/etc/pyflannel/pyflanneld.env]
    checks:
      datapath: true
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
        paths:
          /etc/pyflannel/pyflanneld.env: {type: file, mode: "0600", uid: 0, gid: 0, owner: root, group: root,
                                          digest: 6b1f...}
          /etc/cni/net.d/10-flannel.conflist: null
        units: {pyflanneld: {load: loaded, active: active, enabled: enabled}}
        etcd_health: {url: "https://198.51.100.11:2379/health", healthy: true, reason: ""}
        checks:
          runtime: true
          datapath: {clean: true, summary: "3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready"}
          cni_plugin: {current: true, bin_dir: /opt/cni/bin, plugins_dir: /usr/lib/cni,
                       link: [bridge, host-local, portmap, loopback]}
          network_config: {config: '{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}'}
          leases: {store: etcd, leases: [], orphans: [], utilisation: [], unreadable: [], notes: []}
          ipam: {clean: true, usage: []}
"""

import json
import os
import platform
import sys

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.datapath import (
    DatapathError,
    check_datapath,
)
from ansible_collections.pyflannel.network.plugins.module_utils.file_state import file_state
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    CNI_PLUGIN_ARGUMENT_SPEC,
    RUNTIME_IMPORT_ERROR,
)

# IFA_F_* bits, as the kernel reports them and flanneld's interface selection ranks addresses.
_ADDR_FLAGS = {"secondary": 0x01, "temporary": 0x01, "deprecated": 0x20}
_IFA_F_PERMANENT = 0x80
# A device of each kind in a namespace that exists only for the probe.
_PROBES = {
    "vxlan": ["link", "add", "pfl-probe", "type", "vxlan", "id", "1", "dstport", "8472"],
    "udp": ["tuntap", "add", "pfl-probe", "mode", "tun"],
}
WHEELHOUSE_STAMP = ".pyflannel-wheelhouse"
_ETCD_HEALTH_TIMEOUT = 5.0
_HEALTH_LIMIT = 4096


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


def _unit_ids(names):
    """systemd's unit name for each name (a bare name is a service)."""
    return {name if "." in name else f"{name}.service": name for name in names}


def parse_units(names, shown):
    """Each unit's load, active and unit file state from ``systemctl show
    --property=Id,LoadState,ActiveState,UnitFileState`` output for them (a blank line between
    units); None for a unit the output lacks."""
    ids = _unit_ids(names)
    states = dict.fromkeys(names)
    for block in shown.split("\n\n"):
        values = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        name = ids.get(values.get("Id", ""))
        if name is not None:
            states[name] = {
                "load": values.get("LoadState", ""),
                "active": values.get("ActiveState", ""),
                "enabled": values.get("UnitFileState", ""),
            }
    return states


def _units(module, names):
    systemctl = module.get_bin_path("systemctl")
    if not names or systemctl is None:
        return dict.fromkeys(names)
    properties = "--property=Id,LoadState,ActiveState,UnitFileState"
    _rc, out, _err = module.run_command([systemctl, "show", properties, "--", *_unit_ids(names)])
    return parse_units(names, out)


def _etcd_health(spec):
    """What an etcd member's /health says, as the etcd role's wait reads it: TLS with the CA
    file and the client pair when given, a non-2xx answer an error (as uri's and open_url's)."""
    # The standard library's client, not ansible.module_utils.urls: that one loads email.mime,
    # cryptography and more, a cost on every member in every run for a single GET.
    import ssl
    from http.client import HTTPException
    from urllib.request import urlopen

    try:
        context = None
        if spec["url"].lower().startswith("https:"):
            context = ssl.create_default_context(cafile=spec["cafile"])
            if spec["certfile"]:
                context.load_cert_chain(spec["certfile"], spec["keyfile"])
        with urlopen(spec["url"], timeout=_ETCD_HEALTH_TIMEOUT, context=context) as answer:
            body = answer.read(_HEALTH_LIMIT)
        health = json.loads(body).get("health")
    # urllib's and TLS errors (OSError: URLError, HTTPError, ssl.SSLError, timeouts), a broken
    # answer (HTTPException), a bad URL or a body that is no JSON object: an answer that says
    # nothing about health.
    except (OSError, HTTPException, ValueError, AttributeError) as err:
        return {"url": spec["url"], "healthy": False, "reason": str(err) or type(err).__name__}
    reason = "" if health == "true" else f"health {health!r}"
    return {"url": spec["url"], "healthy": health == "true", "reason": reason}


def _datapath():
    from pyflannel_runtime import PyflannelError
    from pyflannel_runtime.ops.agent_settings import agent_settings

    try:
        opts = agent_settings({}, None, os.environ)
        result, _warnings = check_datapath(opts, repair=False, diff=False)
    except (DatapathError, PyflannelError) as err:
        return {"clean": False, "error": str(err)}
    # The routes module's result in check mode: its changed is the drift (said by clean).
    del result["changed"]
    return result


def _network_config():
    from pyflannel_runtime import PyflannelError
    from pyflannel_runtime.ops.agent_settings import agent_settings, etcd_settings
    from pyflannel_runtime.ops.node_check import DEFAULT_TIMEOUT
    from pyflannel_runtime.ops.publish import stored_config

    try:
        opts = agent_settings({}, None, os.environ)
        if opts.kube_subnet_mgr:
            return {"error": "the agent's datastore is the Kubernetes API, not etcd"}
        return {"config": stored_config(etcd_settings(opts, request_timeout=DEFAULT_TIMEOUT))}
    except (PyflannelError, OSError) as err:
        return {"error": str(err) or type(err).__name__}


def _leases():
    from pyflannel_runtime import PyflannelError
    from pyflannel_runtime.ops.agent_settings import agent_settings, lease_store
    from pyflannel_runtime.ops.leases import read_leases, report_dict
    from pyflannel_runtime.ops.node_check import DEFAULT_TIMEOUT

    try:
        opts = agent_settings({}, None, os.environ)
        return report_dict(read_leases(lease_store(opts, DEFAULT_TIMEOUT), []))
    except (PyflannelError, OSError) as err:
        return {"error": str(err) or type(err).__name__}


def _cni_plugin(spec):
    from pyflannel_runtime import PyflannelError
    from pyflannel_runtime.ops.cni_install import plugin_current

    checked = {name: spec[name] for name in ("bin_dir", "plugins_dir", "link")}
    try:
        current = plugin_current(spec["bin_dir"], spec["plugins_dir"], spec["link"], spec["record"])
    except (PyflannelError, ValueError, OSError) as err:
        return {**checked, "current": False, "error": str(err)}
    return {**checked, "current": current}


def _ipam(spec):
    from pyflannel_runtime.ops.ipam import IpamError, manage_leaks

    try:
        result = manage_leaks(
            spec["conflist"],
            None,
            spec["cni_path"],
            os.environ,
            check_mode=True,
            free_percent=spec["free_warning_percent"],
        )
    except IpamError as err:
        return {"clean": False, "error": str(err)}
    # Clean: the ipam module in check mode would have said nothing beyond this result (no
    # warning, no failed release), so the verify role can show this one instead.
    warnings = result.pop("warnings")
    result["clean"] = not (warnings or result.get("gc", {}).get("errors"))
    return result


def _checks(spec):
    """The runtime's checks (None each: not asked)."""
    if spec is None:
        return None
    asked = {name: value or None for name, value in spec.items()}
    if RUNTIME_IMPORT_ERROR is not None:
        reason = "not made: the module ran without the pyflannel runtime"
        return {
            "runtime": False,
            **{name: None if value is None else {"error": reason} for name, value in asked.items()},
        }
    made = {
        "datapath": _datapath,
        "network_config": _network_config,
        "leases": _leases,
        "cni_plugin": lambda: _cni_plugin(asked["cni_plugin"]),
        "ipam": lambda: _ipam(asked["ipam"]),
    }
    return {
        "runtime": True,
        **{name: None if asked[name] is None else make() for name, make in made.items()},
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "route_to": {"type": "list", "elements": "str", "default": []},
            "packages": {"type": "list", "elements": "str", "default": []},
            "venv": {"type": "path", "default": "/opt/pyflannel/venv"},
            "files": {"type": "list", "elements": "path", "default": []},
            "paths": {"type": "list", "elements": "path", "default": []},
            "digest_key": {"type": "str", "no_log": True},
            "units": {"type": "list", "elements": "str", "default": []},
            "etcd_health": {
                "type": "dict",
                "options": {
                    "url": {"type": "str", "required": True},
                    "cafile": {"type": "path"},
                    "certfile": {"type": "path"},
                    "keyfile": {"type": "path"},
                },
            },
            "checks": {
                "type": "dict",
                "options": {
                    "datapath": {"type": "bool", "default": False},
                    "network_config": {"type": "bool", "default": False},
                    "leases": {"type": "bool", "default": False},
                    "cni_plugin": {"type": "dict", "options": CNI_PLUGIN_ARGUMENT_SPEC},
                    "ipam": {
                        "type": "dict",
                        "options": {
                            "conflist": {
                                "type": "path",
                                "default": "/etc/cni/net.d/10-flannel.conflist",
                            },
                            "cni_path": {"type": "str", "default": "/opt/cni/bin"},
                            "free_warning_percent": {"type": "int", "default": 10},
                        },
                    },
                },
            },
        },
        supports_check_mode=True,
    )
    params = module.params
    links = _links(module)
    facts = {
        "links": links,
        "default_route": {
            "4": _default_route(module, links, 4),
            "6": _default_route(module, links, 6),
        },
        "routes": _routes(module, links, params["route_to"]),
        "backends": _backends(module),
        "python": "{}.{}".format(*sys.version_info[:2]),
        "interpreter": _interpreter(),
        "kernel": platform.release(),
        "runtime": _runtime(params["venv"]),
        "packages": _packages(module, params["packages"]),
        "files": {path: os.path.isfile(path) for path in params["files"]},
        "paths": {path: file_state(path, params["digest_key"]) for path in params["paths"]},
        "units": _units(module, params["units"]),
        "etcd_health": None
        if params["etcd_health"] is None
        else _etcd_health(params["etcd_health"]),
        "checks": _checks(params["checks"]),
    }
    module.exit_json(changed=False, ansible_facts={"pyflannel_host": facts})


if __name__ == "__main__":
    main()
