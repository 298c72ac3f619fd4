"""``python -m pyflannel_lab netns up|down``: a flannel cluster in network namespaces.

`up` starts a real etcd in the underlay, pyflanneld on each host (subnets allocated by etcd),
wires one pod per host through the `flannel` CNI plugin, then prints the leases, each host's
programmed peers and a pod-to-pod reachability matrix. Everything keeps running until `down`,
which finds it again through the state file and removes it (processes by PID, namespaces,
scratch directories).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pyflannel_lab.netns_agents import AgentLab
from pyflannel_lab.paths import project_root
from pyflannel_runtime.backend_spec import specs

STATE_ENV = "PYFLANNEL_NETNS_LAB_STATE"  # not lab.paths.STATE_ENV: that one is a directory


def state_file() -> Path:
    return Path(os.environ.get(STATE_ENV) or project_root() / ".lab" / "state.json")


def _write_state(lab: AgentLab, pods: dict[str, dict[str, str]]) -> None:
    assert lab.etcd is not None and lab.etcd.process is not None
    state = {
        "backend": lab.backend["Type"],
        "token": lab.net.token,
        "namespaces": lab.net.namespaces() + [p["netns"] for p in pods.values()],
        "pids": {
            "etcd": lab.etcd.process.pid,
            **{
                host_ns: a.process.pid
                for host_ns, a in ((a.host.ns, a) for a in lab.agents.values())
            },
        },
        "dirs": [str(lab.workdir), str(lab.etcd.workdir)],
        "etcd_endpoint": lab.etcd.endpoint,
        "status_command": shlex.join(lab.status_argv(lab.net.hosts[0])),
        "pods": pods,
    }
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2) + "\n")


def _status(argv: list[str]) -> str:
    """What `pyflannel status` prints, run exactly as shown."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


def _print_summary(lab: AgentLab, pods: dict[str, dict[str, str]]) -> bool:
    store = lab.etcd.endpoint if lab.etcd else "the Node API test double"
    print(f"\npyflannel lab {lab.net.token}: backend {lab.backend['Type']}, leases in {store}")
    argv = lab.status_argv(lab.net.hosts[0])
    print(f"\n`pyflannel status` for {lab.net.hosts[0].ns}, run from here (paste it to run again):")
    print(f"$ {shlex.join(argv)}")
    print(_status(argv))
    print("\nAgent logs (tail -f to follow):")
    for agent in lab.agents.values():
        print(f"  {agent.host.ns:<24} {agent.log_path}")
    print("\nPods (wired by the flannel CNI plugin):")
    for host_ns, pod in pods.items():
        print(f"  {pod['netns']:<24} {pod['ip']:<15} on {host_ns}")
    print("\nPod-to-pod reachability (ping):")
    names = list(pods)
    header = "  from \\ to".ljust(26) + "".join(f"{pods[n]['ip']:>14}" for n in names)
    print(header)
    ok = True
    for src in names:
        row = f"  {pods[src]['ip']:<24}"
        for dst in names:
            if src == dst:
                row += f"{'-':>14}"
                continue
            reached = lab.net.ping(pods[src]["netns"], pods[dst]["ip"], count=1)
            ok &= reached
            row += f"{'ok' if reached else 'FAIL':>14}"
        print(row)
    print(f"\n{'all pods reach each other' if ok else 'SOME PODS CANNOT REACH EACH OTHER'}")
    return ok


def up(backend: str, hosts: int) -> int:
    if state_file().exists():
        print(
            f"a lab is already up ({state_file()}); run ./scripts/lab netns down first",
            file=sys.stderr,
        )
        return 1
    lab = AgentLab({"Type": backend}, hosts=hosts, prefix="pfl", lab_pods=False)
    try:
        started = time.monotonic()
        lab.create()
        lab.start_all()
        pods: dict[str, dict[str, str]] = {}
        for host in lab.net.hosts:
            ip = lab.add_cni_pod(host, f"pod{host.n}")
            pods[host.ns] = {"netns": f"{lab.net.token}-pod{host.n}", "ip": ip}
        _write_state(lab, pods)
        print(f"lab up in {time.monotonic() - started:.1f}s; ./scripts/lab netns down removes it")
    except BaseException:
        for agent in lab.agents.values():
            print(f"--- {agent.host.ns} log ---\n{agent.log()[-3000:]}", file=sys.stderr)
        lab.destroy()
        raise
    return 0 if _print_summary(lab, pods) else 1


def _is_ours(pid: int, marker: str) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def down() -> int:
    path = state_file()
    if not path.exists():
        print("no lab is up", file=sys.stderr)
        return 0
    state: dict[str, Any] = json.loads(path.read_text())
    for name, pid in state["pids"].items():
        marker = "etcd" if name == "etcd" else "pyflannel_runtime.agent.main"
        if _is_ours(pid, marker):
            os.kill(pid, signal.SIGKILL)
    for ns in reversed(state["namespaces"]):
        subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
    for directory in state["dirs"]:
        shutil.rmtree(directory, ignore_errors=True)
    path.unlink()
    print(f"lab {state['token']} removed")
    return 0


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``netns up`` and ``netns down`` under the lab's command line."""
    actions = commands.add_parser("netns", help="the agent-only lab in network namespaces")
    netns = actions.add_subparsers(required=True, metavar="ACTION")
    up_cmd = netns.add_parser("up", help="start the lab and print its state")
    up_cmd.add_argument("--backend", choices=specs.names(), default="vxlan")
    up_cmd.add_argument("--hosts", type=int, default=3)
    up_cmd.set_defaults(handler=lambda args: up(args.backend, args.hosts))
    netns.add_parser("down", help="remove the lab").set_defaults(handler=lambda args: down())
