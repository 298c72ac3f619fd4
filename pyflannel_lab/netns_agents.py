"""The whole stack in network namespaces: real etcd in the underlay, pyflanneld on every host.

Built on ``netns_lab.NetLab`` (hosts, pods) and ``etcd_server.start_etcd``. With NetLab's pods,
each host's subnet is reserved in etcd ahead (a flannel reservation: a key without an etcd
lease, naming the host's public IP), so the pods, addressed before the agents start, sit in the
leased subnets. Without them, etcd allocates and ``add_cni_pod`` wires pods the way kubelet's
runtime would, through the `flannel` CNI plugin delegating to Debian's bridge and host-local.
With ``kube_api``, leases come from a Node API server in the underlay instead (the tests pass
their test double). Agents run as plain processes (``ip netns exec``), killed by PID in
``destroy()``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pyflannel_lab.etcd_server import EtcdServer, EtcdTLS, start_etcd
from pyflannel_lab.netns_lab import Lab, LabHost, NetLab
from pyflannel_runtime.netlink.netns import run_in_netns
from pyflannel_runtime.wire.lease import LeaseAttrs, make_subnet_key

ETCD_IP = "192.0.2.100"
HEALTHZ_PORT = 8081
CNI_PLUGINS = "/usr/lib/cni"
PREFIX = "/coreos.com/network"
AGENT_PROGRAM = ("-m", "pyflannel_runtime.agent.main")


class KubeApiServer(Protocol):
    """A Node API server the agents reach over the underlay."""

    @property
    def url(self) -> str: ...

    def start(self) -> KubeApiServer: ...

    def stop(self) -> None: ...

    def add_node(self, name: str, *, pod_cidr: str | None = None) -> Any: ...


class KubeApiFactory(Protocol):
    def __call__(self, *, host: str) -> KubeApiServer: ...


@dataclass
class Agent:
    host: LabHost
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class AgentLab(Lab):
    backend: dict[str, Any]
    hosts: int = 3
    # More of net-conf.json beside Network and Backend (SubnetLen, SubnetMin, ...).
    net_conf: dict[str, Any] = field(default_factory=dict)
    prefix: str = "pag"
    ip_masq: bool = True
    extra_args: tuple[str, ...] = ()
    # True: NetLab's pods, pre-addressed, with each host's subnet reserved in etcd to match.
    # False: no pods and no reservations; etcd allocates, and pods come from the CNI plugin.
    lab_pods: bool = True
    # None: leases in a real etcd in the underlay. Otherwise the Node API server this makes
    # there, with one node per host whose podCIDR is the host's lab subnet.
    kube_api: KubeApiFactory | None = None
    # The bearer token the agents (and `pyflannel status`) present to it, in a kubeconfig.
    kube_token: str | None = None
    # etcd over TLS with these files (its server certificate for ETCD_IP); the agents present
    # the client pair.
    etcd_tls: EtcdTLS | None = None
    net: NetLab = field(init=False)
    etcd: EtcdServer | None = field(init=False, default=None)
    kube: KubeApiServer | None = field(init=False, default=None)
    workdir: Path = field(init=False)
    agents: dict[int, Agent] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.net = NetLab(self.prefix, self.hosts, pods=self.lab_pods)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.net.token}-"))

    # --- lifecycle -----------------------------------------------------------------------------

    def create(self) -> None:
        self.net.create()
        self.net.ip(self.net.ul, "addr", "add", f"{ETCD_IP}/24", "dev", "br-ul")
        config = json.dumps({"Network": "10.244.0.0/16", **self.net_conf, "Backend": self.backend})
        if self.kube_api is not None:
            self.net_conf_path.write_text(config)
            kube_api = self.kube_api
            self.kube = run_in_netns(self.net.ul, lambda: kube_api(host=ETCD_IP)).start()
            for host in self.net.hosts:
                self.kube.add_node(host.ns, pod_cidr=str(host.subnet))
            return
        self.etcd = start_etcd(netns=self.net.ul, host=ETCD_IP, tls=self.etcd_tls)
        self.etcdctl("put", f"{PREFIX}/config", config)
        if self.lab_pods:
            for host in self.net.hosts:
                self.reserve(host)

    def destroy(self) -> None:
        for agent in list(self.agents.values()):
            self._kill(agent)
        self.agents.clear()
        if self.etcd is not None:
            self.etcd.stop()
            self.etcd = None
        if self.kube is not None:
            self.kube.stop()
            self.kube = None
        self.net.destroy()
        subprocess.run(["rm", "-rf", str(self.workdir)], check=False)

    # --- etcd ----------------------------------------------------------------------------------

    def etcdctl(self, *args: str) -> str:
        assert self.etcd is not None
        return self.etcd.etcdctl(*args)

    def lease_key(self, host: LabHost) -> str:
        return f"{PREFIX}/subnets/{make_subnet_key(host.subnet, None)}"

    def reserve(self, host: LabHost) -> None:
        """A reservation: the host's lab subnet, held for its public IP, with no etcd lease."""
        self.etcdctl("put", self.lease_key(host), LeaseAttrs(public_ip=host.underlay_ip).to_json())

    def lease_value(self, host: LabHost) -> str:
        return self.etcdctl("get", "--print-value-only", self.lease_key(host)).strip()

    # --- agents --------------------------------------------------------------------------------

    @property
    def net_conf_path(self) -> Path:
        return self.workdir / "net-conf.json"

    def store_args(self) -> list[str]:
        if self.kube is not None:
            kubeconfig = [f"--kubeconfig-file={self.kubeconfig()}"] if self.kube_token else []
            return [
                "--kube-subnet-mgr",
                f"--kube-api-url={self.kube.url}",
                *kubeconfig,
                f"--net-config-path={self.net_conf_path}",
            ]
        assert self.etcd is not None
        tls = self.etcd_tls
        files = (
            [
                f"--etcd-cafile={tls.ca_file}",
                f"--etcd-certfile={tls.client_cert}",
                f"--etcd-keyfile={tls.client_key}",
            ]
            if tls is not None
            else []
        )
        return [f"--etcd-endpoints={self.etcd.endpoint}", *files]

    def kubeconfig(self) -> Path:
        """A kubeconfig naming the Node API server and the agents' token (mode 0600)."""
        assert self.kube is not None and self.kube_token is not None
        path = self.workdir / "kubeconfig"
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: lab\n  cluster:\n    server: {self.kube.url}\n"
            f"users:\n- name: flannel\n  user:\n    token: {self.kube_token}\n"
            "contexts:\n- name: flannel@lab\n  context:\n    cluster: lab\n    user: flannel\n"
            "current-context: flannel@lab\n"
        )
        path.chmod(0o600)
        return path

    def subnet_file(self, host: LabHost) -> Path:
        return self.workdir / host.ns / "subnet.env"

    def status_argv(self, host: LabHost) -> list[str]:
        """`pyflannel status` for the host, run from the root namespace: its agent's settings
        (no environment file: this machine's is not the lab's)."""
        return [
            str(Path(sys.executable).with_name("pyflannel")),
            "status",
            f"--netns={host.ns}",
            *self.store_args(),
            f"--subnet-file={self.subnet_file(host)}",
            f"--healthz-port={HEALTHZ_PORT}",
            "--agent-env=",
            f"--conflist={self.write_conflist(host)}",
        ]

    def write_conflist(self, host: LabHost) -> Path:
        """The host's flannel conflist, as the CNI role installs one, so that `pyflannel ipam`
        and `pyflannel status` find its pod addresses; the path."""
        config = self.cni_config(host)
        network = {"cniVersion": config.pop("cniVersion"), "name": config.pop("name")}
        path = self.workdir / host.ns / "10-flannel.conflist"
        path.write_text(json.dumps({**network, "plugins": [config]}, indent=2) + "\n")
        return path

    def start_agent(
        self,
        host: LabHost,
        *extra: str,
        program: Sequence[str] = AGENT_PROGRAM,
        cwd: Path | None = None,
    ) -> Agent:
        """Run the agent (`program`: what the interpreter runs, before the flags) on `host`,
        in `cwd` (a tree of another revision there comes first on the import path)."""
        log_path = self.workdir / f"{host.ns}.log"
        argv = [
            "ip", "netns", "exec", host.ns,
            sys.executable, *program,
            *self.store_args(),
            "--iface=eth0",
            f"--subnet-file={self.subnet_file(host)}",
            f"--healthz-port={HEALTHZ_PORT}",
            "--reconcile-interval=1",
            *(["--ip-masq"] if self.ip_masq else []),
            *self.extra_args,
            *extra,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLANNELD_")}
        env["NODE_NAME"] = host.ns
        with open(log_path, "ab") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        agent = Agent(host, process, log_path)
        self.agents[host.n] = agent
        return agent

    def start_all(self) -> None:
        for host in self.net.hosts:
            self.start_agent(host)
        for host in self.net.hosts:
            self.wait_ready(host)

    def wait_ready(self, host: LabHost, timeout: float = 30.0) -> str:
        """Wait for /readyz to answer 200; returns subnet.env."""
        deadline = time.monotonic() + timeout
        agent = self.agents[host.n]
        while time.monotonic() < deadline:
            if agent.process.poll() is not None:
                raise RuntimeError(
                    f"agent on {host.ns} exited {agent.process.returncode}:\n{agent.log()}"
                )
            if self.http_status(host, "/readyz") == 200:
                return self.subnet_file(host).read_text()
            time.sleep(0.1)
        raise RuntimeError(f"agent on {host.ns} not ready after {timeout}s:\n{agent.log()}")

    def http_status(self, host: LabHost, path: str) -> int:
        probe = (
            "import sys, urllib.request, urllib.error\n"
            "try:\n"
            f"    print(urllib.request.urlopen('http://127.0.0.1:{HEALTHZ_PORT}{path}',"
            " timeout=2).status)\n"
            "except urllib.error.HTTPError as e:\n    print(e.code)\n"
            "except OSError:\n    print(0)\n"
        )
        done = self.net.run(host.ns, sys.executable, "-c", probe, check=False)
        return int(done.stdout.strip() or 0)

    def metrics(self, host: LabHost) -> str:
        """The agent's /metrics, as Prometheus scrapes it."""
        probe = (
            "import sys, urllib.request\n"
            f"url = 'http://127.0.0.1:{HEALTHZ_PORT}/metrics'\n"
            "sys.stdout.write(urllib.request.urlopen(url, timeout=5).read().decode())\n"
        )
        return str(self.net.run(host.ns, sys.executable, "-c", probe).stdout)

    def stop_agent(self, host: LabHost, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        agent = self.agents.pop(host.n)
        agent.process.send_signal(sig)
        try:
            return agent.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill(agent)
            raise

    @staticmethod
    def _kill(agent: Agent) -> None:
        if agent.process.poll() is None:
            agent.process.kill()
            agent.process.wait(10)

    # --- faults --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def cut_from_store(self, host: LabHost, *, abort: bool = False) -> Iterator[None]:
        """A partition between ``host`` and the lease store (etcd or the Node API, both at
        ETCD_IP): the underlay drops their packets both ways, and the host's datapath to the
        other hosts stays. ``abort`` also aborts the host's connections to the store (each side
        gets a reset), as a partition longer than TCP's keepalive ends them; without it they
        hang until it heals. Healed when the block exits."""
        table = f"pyflannel-cut-{host.n}"
        rules = (
            f"table inet {table} {{\n"
            f"  chain input {{ type filter hook input priority 0; ip saddr {host.underlay_ip} drop; }}\n"
            f"  chain output {{ type filter hook output priority 0; ip daddr {host.underlay_ip} drop; }}\n"
            "}\n"
        )
        subprocess.run(
            ["ip", "netns", "exec", self.net.ul, "nft", "-f", "-"], input=rules.encode(), check=True
        )
        try:
            if abort:  # on both ends: the drops would swallow the resets
                self.net.run(self.net.ul, "ss", "-K", "src", ETCD_IP, "dst", str(host.underlay_ip))
                self.net.run(host.ns, "ss", "-K", "dst", ETCD_IP)
            yield
        finally:
            self.net.run(self.net.ul, "nft", "delete", "table", "inet", table)

    # --- observation ---------------------------------------------------------------------------

    def install_cni(self) -> Path:
        """A CNI bin dir: our `flannel` plus Debian's plugins, as a runtime would see it."""
        from pyflannel_runtime.cni.install import install_plugin

        bin_dir = self.workdir / "cni-bin"
        install_plugin(str(bin_dir))
        for plugin in ("bridge", "host-local", "portmap", "loopback"):
            link = bin_dir / plugin
            if not link.exists():
                link.symlink_to(Path(CNI_PLUGINS) / plugin)
        return bin_dir

    def cni_config(self, host: LabHost, **extra: Any) -> dict[str, Any]:
        """The flannel plugin's config on ``host``, as a runtime passes it (conflist keys merged)."""
        state = self.workdir / host.ns
        config = {
            "cniVersion": "0.3.1",
            "name": "cbr0",
            "type": "flannel",
            "subnetFile": str(self.subnet_file(host)),
            "dataDir": str(state / "cni-flannel"),
            "delegate": {"hairpinMode": True, "isDefaultGateway": True},
            "ipam": {"dataDir": str(state / "cni-ipam")},
        }
        config.update(extra)
        return config

    def run_cni(
        self, host: LabHost, command: str, config: dict[str, Any], **env: str
    ) -> subprocess.CompletedProcess[bytes]:
        """The installed `flannel` plugin run in ``host``'s namespace, as a runtime runs it."""
        bin_dir = self.workdir / "cni-bin"
        if not bin_dir.exists():
            self.install_cni()
        environ = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CNI_COMMAND": command,
            "CNI_PATH": str(bin_dir),
            **env,
        }
        return subprocess.run(
            ["ip", "netns", "exec", host.ns, str(bin_dir / "flannel")],
            input=json.dumps(config).encode(),
            env=environ,
            capture_output=True,
            check=False,
        )

    def add_cni_pod(self, host: LabHost, name: str) -> str:
        """A pod netns wired by `flannel` ADD (as kubelet's runtime calls it); returns its IP."""
        pod_ns = f"{self.net.token}-{name}"
        subprocess.run(["ip", "netns", "add", pod_ns], check=True)
        self.net.adopt(pod_ns)
        done = self.run_cni(
            host,
            "ADD",
            self.cni_config(host),
            CNI_CONTAINERID=pod_ns,
            CNI_NETNS=f"/run/netns/{pod_ns}",
            CNI_IFNAME="eth0",
        )
        if done.returncode != 0:
            raise RuntimeError(f"flannel ADD failed: {done.stdout.decode()} {done.stderr.decode()}")
        result = json.loads(done.stdout)
        return str(result["ips"][0]["address"]).split("/")[0]

    def reachability(self) -> dict[tuple[int, int], bool]:
        return {
            (a.n, b.n): self.net.ping(a.pod_ns, b.pod_ip, count=1)
            for a in self.net.hosts
            for b in self.net.hosts
            if a.n != b.n
        }

    def wait_reachable(self, timeout: float = 30.0) -> dict[tuple[int, int], bool]:
        """`reachability` once every pod reaches every other, or as it stands at `timeout`.

        An agent is ready once its own subnet.env is written; a peer that registers after that
        reaches it by a watch event, which on a loaded machine may come a moment later."""
        deadline = time.monotonic() + timeout
        reached = self.reachability()
        while not all(reached.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
            reached = self.reachability()
        return reached
