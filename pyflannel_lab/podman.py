"""podman with the lab's private configuration.

The lab keeps podman's storage, run state and temp files under its cache directory, so the
system's own podman state is untouched and the image cache outlives every lab. The engine
settings are the ones a systemd container needs on a host without systemd as PID 1: runc (crun
refuses a hybrid cgroup layout with controllers on cgroup v2), cgroupfs, file-based events and
logs, and default ulimits that a root lacking CAP_SYS_RESOURCE may set (podman's own nofile
default of 1048576 cannot be raised to, and podman itself lowers its nproc to 32768).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from pyflannel_lab.errors import LabError


class Podman:
    def __init__(self, cache_dir: Path) -> None:
        self.home = cache_dir / "podman"
        self.containers_conf = self.home / "containers.conf"
        self.storage_conf = self.home / "storage.conf"

    def env(self) -> dict[str, str]:
        """The environment that points podman (or molecule's podman driver) at this storage."""
        return {
            "CONTAINERS_CONF": str(self.containers_conf),
            "CONTAINERS_STORAGE_CONF": str(self.storage_conf),
        }

    def configure(self) -> None:
        home = self.home
        for sub in ("storage", "run", "libpod", "tmp"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        _write_if_changed(
            self.containers_conf,
            "[containers]\n"
            'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
            'log_driver = "k8s-file"\n'
            # /etc/hosts from the image plus --add-host, not the build machine's names.
            'base_hosts_file = "image"\n'
            'host_containers_internal_ip = "none"\n'
            "[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'events_logfile_path = "{home}/libpod/events.log"\n'
            f'tmp_dir = "{home}/libpod"\n'
            f'image_copy_tmp_dir = "{home}/tmp"\n',
        )
        _write_if_changed(
            self.storage_conf,
            f'[storage]\ndriver = "overlay"\ngraphroot = "{home}/storage"\nrunroot = "{home}/run"\n',
        )

    def run(
        self, *args: str, stdin: int | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["podman", *args],
            env={**os.environ, **self.env()},
            stdin=stdin,
            capture_output=True,
            text=True,
        )
        if check and result.returncode != 0:
            raise LabError(f"podman {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def image_exists(self, tag: str) -> bool:
        return self.run("image", "exists", tag, check=False).returncode == 0

    def container_pid(self, container: str) -> int:
        pid = int(self.run("container", "inspect", "--format", "{{.State.Pid}}", container).stdout)
        if pid <= 0:
            status = self.run(
                "container",
                "inspect",
                "--format",
                "{{.State.Status}} {{.State.ExitCode}}",
                container,
            ).stdout.split()
            raise LabError(f"container {container} is not running ({' '.join(status)}){_hint()}")
        return pid


# A systemd host takes about six inotify instances as it boots, and exits at once when it
# gets none: the usual reason a host of a large lab (or of several labs) stops right away.
_INOTIFY_PER_HOST = 6


def _hint() -> str:
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    return inotify_hint(inotify_instances(), limit)


def inotify_hint(used: int, limit: int) -> str:
    """What to add to "not running" when too few inotify instances are left for a host."""
    if used + _INOTIFY_PER_HOST <= limit:
        return ""
    return (
        f"; {used} of the {limit} inotify instances fs.inotify.max_user_instances allows are in "
        "use: take other labs down, or raise the limit (sysctl fs.inotify.max_user_instances)"
    )


def inotify_instances() -> int:
    """Inotify instances open on this machine (all users: the lab runs as root)."""
    count = 0
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        with contextlib.suppress(OSError):  # gone meanwhile
            count += os.readlink(fd) == "anon_inode:inotify"
    return count


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
