"""Throwaway etcd servers (Debian's etcd 3.4) for the netns lab and the tests.

``start_etcd()`` runs a single-member etcd on free ports (or in a network namespace), waits
until it answers, and returns an ``EtcdServer`` whose ``stop()`` kills it by PID and removes its
data directory. Tests use the fixtures in tests/integration/conftest.py, which always stop what
they start, and tests/integration/etcd_tls.py for certificates.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"


@dataclass(frozen=True)
class EtcdTLS:
    """PEM files: a CA, a server pair for ``host`` and a client pair, all signed by the CA."""

    ca_file: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


@dataclass
class EtcdServer:
    host: str
    client_port: int
    peer_port: int
    workdir: Path
    command: list[str]
    netns: str | None = None
    tls: EtcdTLS | None = None
    process: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir
            )

    def wait_healthy(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.running:
            if self.is_healthy():
                return True
            time.sleep(0.1)
        return False

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """Kill the server by PID, keeping its data (``restart`` brings it back)."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout=30)

    def restart(self) -> None:
        """Kill and start again with the same data, ports and certificates."""
        self.kill()
        self.spawn()
        if not self.wait_healthy():
            raise RuntimeError(f"etcd did not restart:\n{self.log_tail()}")

    @property
    def endpoint(self) -> str:
        scheme = "https" if self.tls else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "etcd.log"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def etcdctl(self, *args: str, user: str | None = None, check: bool = True) -> str:
        """Run ``etcdctl`` (v3 API) against this server; returns its stdout."""
        cmd = [ETCDCTL, f"--endpoints={self.endpoint}", "--dial-timeout=2s", "--command-timeout=5s"]
        if self.tls:
            cmd += [
                f"--cacert={self.tls.ca_file}",
                f"--cert={self.tls.client_cert}",
                f"--key={self.tls.client_key}",
            ]
        if user:
            cmd.append(f"--user={user}")
        cmd += list(args)
        if self.netns:
            cmd = ["ip", "netns", "exec", self.netns, *cmd]
        env = dict(os.environ, ETCDCTL_API="3")
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def is_healthy(self) -> bool:
        try:
            self.etcdctl("endpoint", "health")
        except (RuntimeError, subprocess.TimeoutExpired):
            return False
        return True

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


def free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _launch(
    host: str,
    client_port: int,
    peer_port: int,
    netns: str | None,
    tls: EtcdTLS | None,
    extra_args: Sequence[str],
) -> EtcdServer:
    workdir = Path(tempfile.mkdtemp(prefix="pyft-etcd-"))
    url_host = f"[{host}]" if ":" in host else host
    client_url = f"{'https' if tls else 'http'}://{url_host}:{client_port}"
    peer_url = f"http://{url_host}:{peer_port}"
    cmd = [
        ETCD,
        "--name=pyft",
        f"--data-dir={workdir / 'data'}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=pyft={peer_url}",
        # A lone member still waits one election timeout before it leads: keep it short.
        "--heartbeat-interval=50",
        "--election-timeout=250",
        "--logger=zap",
        "--log-outputs=stderr",
    ]
    if tls:
        cmd += [
            f"--cert-file={tls.server_cert}",
            f"--key-file={tls.server_key}",
            f"--trusted-ca-file={tls.ca_file}",
            "--client-cert-auth",
        ]
    cmd += extra_args
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    server = EtcdServer(host, client_port, peer_port, workdir, cmd, netns, tls)
    try:
        server.spawn()
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return server


def start_etcd(
    *,
    netns: str | None = None,
    host: str = "127.0.0.1",
    tls: EtcdTLS | None = None,
    client_port: int | None = None,
    peer_port: int | None = None,
    extra_args: Sequence[str] = (),
    timeout: float = 30.0,
) -> EtcdServer:
    """Start an etcd and wait until it serves. In a netns the ports default to 2379/2380 (a
    fresh namespace has them free, but bring its ``lo`` up first when ``host`` is a loopback
    address); otherwise free ports on ``host`` are picked, retrying if
    another process takes one first. ``extra_args`` go to etcd as they are. The caller must
    call ``stop()``."""
    attempts = 1 if netns or client_port else 3
    last_log = ""
    for _ in range(attempts):
        cport = client_port or (2379 if netns else free_port(host))
        pport = peer_port or (2380 if netns else free_port(host))
        server = _launch(host, cport, pport, netns, tls, extra_args)
        try:
            if server.wait_healthy(timeout):
                return server
        except BaseException:
            server.stop()
            raise
        last_log = server.log_tail()
        server.stop()
    raise RuntimeError(f"etcd did not start:\n{last_log}")
