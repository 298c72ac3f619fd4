"""The command line's tour (docs/cli.md) runs as written: every command of its `sh` block,
unchanged, one after the other in one shell, with what the tour says it needs: the repository
root as the working directory and an etcd answering at http://127.0.0.1:2379.

That etcd is a real one on the loopback of a network namespace of the test's own, and the
shell runs inside that namespace (so the tour's default endpoints reach it and nothing else)
with a private /tmp/pyflannel-tour, where the tour writes (so its files never meet another
run's). Only that directory: a private /tmp would hide a checkout that lives under /tmp.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyflannel_lab.etcd_server import EtcdServer, start_etcd

pytestmark = [pytest.mark.root, pytest.mark.etcd]

ROOT = Path(__file__).resolve().parents[2]
TOUR_PAGE = ROOT / "docs" / "cli.md"
TOUR_DIR = Path("/tmp/pyflannel-tour")  # the tour's own path


def tour_commands(page: str) -> list[str]:
    """The command lines of the first ``sh`` block under "## A short tour"."""
    section = page.split("\n## A short tour\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the tour has no sh block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_tour_is_a_list_of_commands_covering_the_cli() -> None:
    commands = tour_commands(TOUR_PAGE.read_text())
    words = [shlex.split(line, comments=True) for line in commands]
    assert all(words), "every line of the tour is a command"
    used = {" ".join(w[:3]) for w in words if w[0] == "pyflannel"}
    for expected in ("pyflannel config check", "pyflannel config publish", "pyflannel status"):
        assert any(u.startswith(expected) for u in used), expected
    assert any(w[:4] == ["python", "-m", "pyflannel_controller", "render"] for w in words)
    assert any(w[0] == "pyflanneld" for w in words)
    # Only the example files that ship with the repository are read.
    for path in re.findall(r"examples/\S+", "\n".join(commands)):
        assert (ROOT / path).is_file(), path


@pytest.fixture
def tour_etcd() -> Iterator[tuple[str, EtcdServer]]:
    """A namespace whose loopback holds an etcd at 127.0.0.1:2379."""
    netns = f"ptour-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        server = start_etcd(netns=netns, host="127.0.0.1", client_port=2379, peer_port=2380)
        try:
            yield netns, server
        finally:
            server.stop()
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)


@pytest.fixture
def tour_dir() -> Iterator[Path]:
    """Where the tour writes; each run mounts its own tmpfs on it (the directory itself is
    shared by concurrent runs, so it is removed only when empty and when this run made it)."""
    made = not TOUR_DIR.exists()
    TOUR_DIR.mkdir(exist_ok=True)
    try:
        yield TOUR_DIR
    finally:
        if made:
            with contextlib.suppress(OSError):
                TOUR_DIR.rmdir()


def test_every_tour_command_runs_as_written(
    tour_etcd: tuple[str, EtcdServer], tour_dir: Path
) -> None:
    netns, etcd = tour_etcd
    commands = tour_commands(TOUR_PAGE.read_text())
    script = "\n".join(
        [
            "set -euo pipefail",
            "trap 'echo \"tour command failed: $BASH_COMMAND\" >&2' ERR",
            # `ip netns exec` gives the shell a mount namespace of its own: this mount is too.
            f"mount -t tmpfs tour-tmp {tour_dir}",
            *commands,
        ]
    )
    done = subprocess.run(
        ["ip", "netns", "exec", netns, "bash", "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # What the tour's comments promise.
    assert '"Network": "10.233.64.0/18"' in out  # config check, normalized
    assert "/tmp/pyflannel-tour/node3/run/flannel/subnet.env: created" in out
    assert "/tmp/pyflannel-tour/node3/etc/kube-flannel/net-conf.json" not in out  # etcd mode
    assert "/tmp/pyflannel-tour/node1/etc/kube-flannel/net-conf.json: created" in out
    assert "/tmp/pyflannel-tour/cni-bin/flannel" in out
    assert "+++ /coreos.com/network/config\n" in out
    assert "/coreos.com/network/config: would publish\n" in out
    assert "/coreos.com/network/config: published\n" in out
    assert "\n0 leases, agent and datapath not checked\n" in out
    assert "[$FLANNELD_ETCD_ENDPOINTS]" in done.stderr  # pyflanneld --help, on stderr as Go's
    published = etcd.etcdctl("get", "--print-value-only", "/coreos.com/network/config")
    assert published == (ROOT / "examples/net-conf.json").read_text() + "\n"
