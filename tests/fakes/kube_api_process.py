"""The Node API TEST DOUBLE (``kube_api.FakeKubeApi``) in a process of its own, for playbooks
that cannot hold it in a test's process: the molecule ``kubernetes`` scenario starts it in its
prepare step and stops it in its cleanup step.

    python -m tests.fakes.kube_api_process start STATE_DIR [--cluster-cidr 10.244.0.0/16]
    python -m tests.fakes.kube_api_process stop STATE_DIR

``start`` serves the double where the lab's hosts reach the controller (the lab of
``PYFLANNEL_LAB_STATE``: its bridge's address), with a Node per lab host carrying the podCIDR
kube-controller-manager would assign (the cluster CIDR's /24s, in host order). It writes
``STATE_DIR/kubeconfig`` (mode 0600, the double's URL and a bearer token), ``STATE_DIR/url`` and
``STATE_DIR/pid``, and returns once the double answers. ``stop`` ends that process (only one
whose command line is this module's) and removes the files and an emptied STATE_DIR; without
one it does nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from ipaddress import IPv4Network
from pathlib import Path

from pyflannel_lab import hosts, underlay
from pyflannel_runtime.fsutil import write_atomic
from tests.fakes.kube_api import FakeKubeApi

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.fakes.kube_api_process"
# Generous bounds for a busy 2-core machine; the double starts in well under a second.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


class DoubleError(Exception):
    pass


def pod_cidrs(cluster_cidr: IPv4Network, names: Sequence[str]) -> dict[str, str]:
    """kube-controller-manager's assignment: the cluster CIDR's /24s, in node order."""
    subnets = cluster_cidr.subnets(new_prefix=24)
    return {name: str(next(subnets)) for name in names}


def kubeconfig(url: str, token: str) -> str:
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: lab\n  cluster:\n    server: {url}\n"
        f"users:\n- name: flannel\n  user:\n    token: {token}\n"
        "contexts:\n- name: flannel@lab\n  context:\n    cluster: lab\n    user: flannel\n"
        "current-context: flannel@lab\n"
    )


def _serve(state_dir: Path, host: str, cidrs: dict[str, str]) -> int:
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    with FakeKubeApi(host=host) as api:
        for name, cidr in cidrs.items():
            api.add_node(name, pod_cidr=cidr)
        config = kubeconfig(api.url, f"pyft-{secrets.token_hex(8)}")
        write_atomic(state_dir / "kubeconfig", config.encode(), 0o600)
        # Written last: `start` waits for it.
        write_atomic(state_dir / "url", api.url.encode(), 0o644)
        signal.sigwait(stop)
    return 0


def _running(pid_file: Path) -> int | None:
    """The double's pid from ``pid_file``, if that process is still this module's."""
    try:
        pid = int(pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ValueError):
        return None
    return pid if MODULE.encode() in cmdline else None


def start(state_dir: Path, cluster_cidr: IPv4Network) -> str:
    lab = hosts.load()
    if lab is None:
        raise DoubleError("no lab is up (PYFLANNEL_LAB_STATE): the double serves the lab's hosts")
    state_dir.mkdir(parents=True, exist_ok=True)
    if _running(state_dir / "pid") is not None:
        raise DoubleError(f"the Node API test double of {state_dir} is running; stop it first")
    (state_dir / "url").unlink(missing_ok=True)
    cidrs = pod_cidrs(cluster_cidr, lab.names())
    argv = [sys.executable, "-m", MODULE, "serve", str(state_dir)]
    argv += ["--host", str(underlay.gateway(lab.network))]
    argv += [f"--node={name}={cidr}" for name, cidr in cidrs.items()]
    with (state_dir / "log").open("wb") as log:
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    write_atomic(state_dir / "pid", str(process.pid).encode(), 0o644)
    deadline = time.monotonic() + START_TIMEOUT
    while not (state_dir / "url").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            output = (state_dir / "log").read_text()
            stop(state_dir)
            raise DoubleError(f"the Node API test double did not start: {output}")
        time.sleep(0.1)
    return (state_dir / "url").read_text()


def stop(state_dir: Path) -> bool:
    """End the double; whether one was running."""
    pid = _running(state_dir / "pid")
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while _running(state_dir / "pid") is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if _running(state_dir / "pid") is not None:
            os.kill(pid, signal.SIGKILL)
    for name in ("url", "kubeconfig", "pid", "log"):
        (state_dir / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        state_dir.rmdir()  # gone already, or holding more than the double's files
    return pid is not None


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    commands = top.add_subparsers(dest="command", required=True)
    up = commands.add_parser("start", help="serve the double for the lab's hosts")
    up.add_argument("state_dir", type=Path)
    up.add_argument("--cluster-cidr", type=IPv4Network, default=IPv4Network("10.244.0.0/16"))
    down = commands.add_parser("stop", help="end the double")
    down.add_argument("state_dir", type=Path)
    serve = commands.add_parser("serve", help="the double's own process (run by start)")
    serve.add_argument("state_dir", type=Path)
    serve.add_argument("--host", required=True)
    serve.add_argument("--node", action="append", default=[], help="NAME=PODCIDR")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "serve":
            cidrs = dict(node.split("=", 1) for node in args.node)
            return _serve(args.state_dir, args.host, cidrs)
        if args.command == "start":
            print(f"Node API test double serving {start(args.state_dir, args.cluster_cidr)}")
        elif stop(args.state_dir):
            print("Node API test double stopped")
        else:
            print("no Node API test double was running")
    except DoubleError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
