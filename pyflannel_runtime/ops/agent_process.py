"""Find a host's agent without its health server: pyflanneld's pid file, else a flanneld or
pyflanneld process in the calling thread's network namespace (run it through
`netlink.netns.run_in_netns` for another host's).

A pid file whose process is gone (or now belongs to a process started after the file was
written, a reused PID) means the agent was killed: it removes the file whenever it exits in an
orderly way. Without a pid file, the process list decides. Only when neither can tell (the
processes cannot be inspected) is the answer unknown.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import TypeGuard

from pyflannel_runtime.agent.pidfile import read_pid_file
from pyflannel_runtime.fsutil import os_error_text

# The program names an agent runs under: Go's binary, and ours (a console script, so the
# process's argv[0] is the interpreter and argv[1] the script).
AGENT_PROGRAMS = frozenset({"flanneld", "pyflanneld"})
# /proc/<pid>/stat's start time has clock-tick precision and /proc/stat's boot time whole
# seconds: a process may look up to this much younger than it is.
_START_SLACK = 1.5


class Presence(enum.Enum):
    RUNNING = "running"
    GONE = "gone"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class AgentProcess:
    presence: Presence
    reason: str = ""  # how it was found, or why it is gone or unknown
    pid: int | None = None
    name: str | None = None  # the program, as far as it can be told
    started: float | None = None  # Unix time
    # A subnet.env written since then was written by this process (Unix time): the pid file's
    # time when there is one, else the process's start.
    run_since: float | None = None


@dataclass(frozen=True)
class _Stat:
    state: str
    started: float


def find_agent(pid_file: str, proc: str = "/proc") -> AgentProcess:
    """The agent process behind `pid_file`, else any flanneld or pyflanneld in this network
    namespace."""
    try:
        boot = _boot_time(proc)
    except OSError as err:
        return AgentProcess(Presence.UNKNOWN, f"cannot read {proc}/stat: {os_error_text(err)}")
    try:
        pid = read_pid_file(pid_file)
        written = os.stat(pid_file).st_mtime if pid is not None else 0.0
    except FileNotFoundError:  # removed between reading and stat: the agent just exited
        pid = None
    except OSError as err:
        return AgentProcess(Presence.UNKNOWN, f"cannot read {pid_file}: {os_error_text(err)}")
    if pid is not None:
        return _from_pid_file(pid_file, pid, written, _Proc(proc, boot))
    return _from_process_list(pid_file, _Proc(proc, boot))


@dataclass(frozen=True)
class _Proc:
    """A /proc file system and the boot time its start times count from."""

    root: str
    boot: float

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def stat(self, pid: int) -> _Stat | None:
        """The process's state letter and start time; None when there is no such process."""
        try:
            with open(self.path(str(pid), "stat"), "rb") as file:
                text = file.read(4096).decode(errors="replace")
        except OSError:
            return None
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ")"
        # ends it.
        fields = text[text.rfind(")") + 2 :].split()
        try:
            ticks = int(fields[19])
        except (IndexError, ValueError):
            return None
        return _Stat(fields[0], self.boot + ticks / os.sysconf("SC_CLK_TCK"))

    def program(self, pid: int) -> str | None:
        """The agent program a process runs, if any: argv[0]'s name, or argv[1]'s when
        argv[0] is an interpreter running a script."""
        try:
            with open(self.path(str(pid), "cmdline"), "rb") as file:
                argv = file.read(4096).split(b"\0")
        except OSError:
            return None
        names = (os.path.basename(arg.decode(errors="replace")) for arg in argv[:2])
        return next((name for name in names if name in AGENT_PROGRAMS), None)


def _alive(stat: _Stat | None) -> TypeGuard[_Stat]:
    return stat is not None and stat.state not in ("Z", "X")  # zombie or dead: not running


def _from_pid_file(pid_file: str, pid: int, written: float, proc: _Proc) -> AgentProcess:
    stat = proc.stat(pid)
    if not _alive(stat):
        return AgentProcess(
            Presence.GONE,
            f"pid {pid} from {pid_file} is not running (the agent did not exit cleanly)",
            pid,
        )
    if stat.started > written + _START_SLACK:
        return AgentProcess(
            Presence.GONE,
            f"pid {pid} from {pid_file} now belongs to a process started after the agent's",
            pid,
        )
    found = f"found by {pid_file}"
    return AgentProcess(Presence.RUNNING, found, pid, "pyflanneld", stat.started, written)


def _from_process_list(pid_file: str, proc: _Proc) -> AgentProcess:
    try:
        here = os.stat(proc.path("thread-self", "ns", "net")).st_ino
        pids = sorted(int(entry) for entry in os.listdir(proc.root) if entry.isdigit())
    except OSError as err:
        return AgentProcess(
            Presence.UNKNOWN, f"no pid file, and {proc.root} cannot be read: {os_error_text(err)}"
        )
    hidden = 0
    for pid in pids:
        name = proc.program(pid)
        if name is None:
            continue
        try:
            netns = os.stat(proc.path(str(pid), "ns", "net")).st_ino
        except PermissionError:
            hidden += 1
            continue
        except OSError:  # gone meanwhile
            continue
        stat = proc.stat(pid)
        if netns == here and _alive(stat):
            found = f"no pid file; found as {name} in this network namespace"
            since = stat.started - _START_SLACK
            return AgentProcess(Presence.RUNNING, found, pid, name, stat.started, since)
    if hidden:
        return AgentProcess(
            Presence.UNKNOWN,
            f"no pid file at {pid_file}, and the network namespace of {hidden} agent "
            "process(es) cannot be read (run as root)",
        )
    return AgentProcess(
        Presence.GONE,
        f"no pid file at {pid_file} and no flanneld or pyflanneld process in this network "
        "namespace",
    )


def _boot_time(proc: str) -> float:
    with open(os.path.join(proc, "stat"), "rb") as file:
        for line in file:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    raise OSError(f"{proc}/stat has no btime line")
