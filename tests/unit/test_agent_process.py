"""Finding the agent without its health server: pyflanneld's pid file, the process list of a
/proc tree (a fake one for the cases a test cannot stage with real processes, and the real one
with a process this test starts and kills), and the health that follows from them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pyflannel_runtime.agent.pidfile import (
    pid_file_for,
    read_pid_file,
    remove_pid_file,
    write_pid_file,
)
from pyflannel_runtime.ops.agent import AgentState, probe_agent, process_health
from pyflannel_runtime.ops.agent_process import AgentProcess, Presence, find_agent

BOOT = 1_700_000_000
TICKS = os.sysconf("SC_CLK_TCK")


def test_the_pid_file_sits_beside_the_subnet_file() -> None:
    assert pid_file_for("/run/flannel/subnet.env") == "/run/flannel/pyflanneld.pid"
    assert pid_file_for("subnet.env") == "./pyflanneld.pid"


def test_a_pid_file_is_a_pid_and_a_newline_and_only_its_writer_removes_it(tmp_path: Path) -> None:
    path = str(tmp_path / "pyflanneld.pid")
    write_pid_file(path, 4321)
    assert Path(path).read_bytes() == b"4321\n"
    assert Path(path).stat().st_mode & 0o777 == 0o644
    assert read_pid_file(path) == 4321
    remove_pid_file(path, 1234)  # another agent's: left alone
    assert read_pid_file(path) == 4321
    remove_pid_file(path, 4321)
    assert not Path(path).exists() and read_pid_file(path) is None


@pytest.mark.parametrize("content", [b"", b"\n", b"abc\n", b"-5\n", b"0\n", b"1" * 100, b"1 2\n"])
def test_a_pid_file_that_names_no_pid_reads_as_none(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "pyflanneld.pid"
    path.write_bytes(content)
    assert read_pid_file(str(path)) is None


class FakeProc:
    """A /proc tree: processes with a command line, a state and a start time, each in a
    network namespace (a file whose inode stands for it; ``here`` is the caller's)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "thread-self" / "ns").mkdir(parents=True)
        (root / "stat").write_text(f"cpu  1 2 3\nbtime {BOOT}\nprocesses 9\n")
        self.here = root / "thread-self" / "ns" / "net"
        self.here.write_text("")
        self.elsewhere = root / "other-netns"
        self.elsewhere.write_text("")

    def add(
        self, pid: int, argv: list[str], started: float, state: str = "S", here: bool = True
    ) -> None:
        directory = self.root / str(pid)
        (directory / "ns").mkdir(parents=True)
        (directory / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        ticks = round((started - BOOT) * TICKS)
        rest = " ".join(["0"] * 17 + [str(ticks)] + ["0"] * 10)  # starttime: field 22
        (directory / "stat").write_text(f"{pid} (odd) name) {state} 1 {rest}\n")
        os.link(self.here if here else self.elsewhere, directory / "ns" / "net")


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


def pid_file(tmp_path: Path, pid: int, written: float) -> str:
    path = str(tmp_path / "pyflanneld.pid")
    write_pid_file(path, pid)
    os.utime(path, (written, written))
    return path


def test_a_pid_file_whose_process_runs_finds_the_agent(tmp_path: Path, proc: FakeProc) -> None:
    proc.add(
        700, ["/opt/pyflannel/venv/bin/python", "/opt/pyflannel/venv/bin/pyflanneld"], BOOT + 50
    )
    path = pid_file(tmp_path, 700, BOOT + 51)
    found = find_agent(path, str(proc.root))
    assert found == AgentProcess(
        Presence.RUNNING, f"found by {path}", 700, "pyflanneld", BOOT + 50, BOOT + 51
    )


@pytest.mark.parametrize("state", ["Z", "X"])
def test_a_killed_agent_that_is_not_reaped_yet_is_gone(
    tmp_path: Path, proc: FakeProc, state: str
) -> None:
    proc.add(700, ["pyflanneld"], BOOT + 50, state=state)
    path = pid_file(tmp_path, 700, BOOT + 51)
    found = find_agent(path, str(proc.root))
    assert found.presence is Presence.GONE
    assert found.reason == f"pid 700 from {path} is not running (the agent did not exit cleanly)"


def test_a_pid_file_whose_process_is_gone(tmp_path: Path, proc: FakeProc) -> None:
    path = pid_file(tmp_path, 700, BOOT + 51)
    assert find_agent(path, str(proc.root)).presence is Presence.GONE


def test_a_reused_pid_is_not_the_agent(tmp_path: Path, proc: FakeProc) -> None:
    proc.add(700, ["sshd"], BOOT + 90)  # started well after the pid file was written
    path = pid_file(tmp_path, 700, BOOT + 51)
    found = find_agent(path, str(proc.root))
    assert found.presence is Presence.GONE
    assert found.reason == (
        f"pid 700 from {path} now belongs to a process started after the agent's"
    )


def test_without_a_pid_file_an_agent_in_this_namespace_is_found(
    tmp_path: Path, proc: FakeProc
) -> None:
    proc.add(300, ["/usr/sbin/sshd", "-D"], BOOT + 1)
    proc.add(400, ["/opt/bin/flanneld", "--ip-masq"], BOOT + 10, here=False)  # another host's
    proc.add(500, ["/opt/bin/flanneld", "--ip-masq", "--kube-subnet-mgr"], BOOT + 20)
    found = find_agent(str(tmp_path / "pyflanneld.pid"), str(proc.root))
    assert (found.presence, found.pid, found.name) == (Presence.RUNNING, 500, "flanneld")
    assert found.reason == "no pid file; found as flanneld in this network namespace"
    assert found.run_since is not None and found.run_since < BOOT + 20


def test_without_a_pid_file_or_an_agent_process_the_agent_is_gone(
    tmp_path: Path, proc: FakeProc
) -> None:
    proc.add(400, ["/opt/bin/flanneld"], BOOT + 10, here=False)
    proc.add(500, ["/opt/bin/flanneld"], BOOT + 10, state="Z")
    path = str(tmp_path / "pyflanneld.pid")
    found = find_agent(path, str(proc.root))
    assert found.presence is Presence.GONE
    assert found.reason == (
        f"no pid file at {path} and no flanneld or pyflanneld process in this network namespace"
    )


def test_an_unreadable_proc_leaves_the_agent_unknown(tmp_path: Path) -> None:
    found = find_agent(str(tmp_path / "pyflanneld.pid"), str(tmp_path / "no-proc"))
    assert found.presence is Presence.UNKNOWN
    health = process_health(found, str(tmp_path / "subnet.env"))
    assert health.state is AgentState.UNCHECKED and health.ok
    assert health.describe().startswith("Agent health not checked (healthz off; ")


def running(started: float, since: float) -> AgentProcess:
    return AgentProcess(
        Presence.RUNNING, "found by /x/pyflanneld.pid", 9, "pyflanneld", started, since
    )


def test_ready_once_subnet_env_is_written_after_the_run_began(tmp_path: Path) -> None:
    env = tmp_path / "subnet.env"
    env.write_text("FLANNEL_MTU=1450\n")
    os.utime(env, (BOOT + 60, BOOT + 60))
    ready = process_health(running(BOOT + 50, BOOT + 51), str(env), now=BOOT + 125)
    assert ready.state is AgentState.READY and ready.ok
    assert ready.describe() == (
        "Agent ready (pyflanneld (version not published), up 1m15s, pid 9, no health server, "
        "found by /x/pyflanneld.pid)"
    )
    assert ready.as_dict()["found_by"] == "found by /x/pyflanneld.pid"
    stale = process_health(running(BOOT + 70, BOOT + 71), str(env), now=BOOT + 125)
    assert stale.state is AgentState.NOT_READY and not stale.ok
    assert stale.reason == f"{env} not written since the agent started"
    absent = process_health(running(BOOT + 70, BOOT + 71), str(tmp_path / "nope"), now=BOOT + 80)
    assert absent.state is AgentState.NOT_READY


def test_a_gone_agent_is_down_and_a_failure() -> None:
    gone = AgentProcess(Presence.GONE, "pid 9 from /x/pyflanneld.pid is not running", 9)
    health = process_health(gone, "/x/subnet.env")
    assert health.state is AgentState.DOWN and not health.ok
    assert health.describe() == "Agent down: pid 9 from /x/pyflanneld.pid is not running"


def test_a_real_process_is_running_until_killed(tmp_path: Path) -> None:
    """The real /proc: a process that wrote the pid file and subnet.env is ready; killed with
    SIGKILL (and reaped), its pid file names a process that is gone."""
    subnet_file = tmp_path / "subnet.env"
    script = (
        "import os, sys, time\n"
        "from pyflannel_runtime.agent.pidfile import pid_file_for, write_pid_file\n"
        f"write_pid_file(pid_file_for({str(subnet_file)!r}), os.getpid())\n"
        f"open({str(subnet_file)!r}, 'w').write('FLANNEL_MTU=1450\\n')\n"
        "print('up', flush=True)\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        health = probe_agent(None, timeout=1, subnet_file=str(subnet_file))
        assert health.state is AgentState.READY, health.describe()
        assert health.facts.pid == child.pid
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        health = probe_agent(None, timeout=1, subnet_file=str(subnet_file))
        assert health.state is AgentState.DOWN and not health.ok
        assert health.reason.startswith(f"pid {child.pid} from ")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
