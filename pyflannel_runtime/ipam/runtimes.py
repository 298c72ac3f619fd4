"""Which containers the node's container runtimes still know, as the CNI container IDs they use.

podman passes its container's full ID as CNI_CONTAINERID; a CRI runtime (containerd, cri-o)
passes the pod sandbox's ID, which ``crictl pods`` lists. Every runtime found on the PATH is
asked; when one of them cannot answer, nobody can say which containers are gone.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

QUERIES = {
    "podman": ["podman", "ps", "--all", "--no-trunc", "--format", "{{.ID}}"],
    "crictl": ["crictl", "pods", "--quiet", "--no-trunc"],
}
_TIMEOUT = 60.0


@dataclass(frozen=True)
class RuntimeView:
    """The containers the runtimes know; ``containers`` is None when that cannot be told."""

    sources: tuple[str, ...]  # what was asked, or "--valid-containers"
    containers: frozenset[str] | None
    problems: tuple[str, ...] = field(default=())

    @classmethod
    def given(cls, ids: frozenset[str]) -> RuntimeView:
        return cls(("--valid-containers",), ids)


def parse_ids(output: str) -> frozenset[str]:
    return frozenset(line.strip() for line in output.splitlines() if line.strip())


def ask_runtimes(environ: Mapping[str, str]) -> RuntimeView:
    sources: list[str] = []
    problems: list[str] = []
    known: set[str] = set()
    path = environ.get("PATH")
    for tool, argv in QUERIES.items():
        binary = shutil.which(tool, path=path)
        if binary is None:
            continue
        sources.append(tool)
        try:
            done = subprocess.run(
                [binary, *argv[1:]],
                capture_output=True,
                text=True,
                env=dict(environ),
                timeout=_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            problems.append(f"{tool}: {err}")
            continue
        if done.returncode != 0:
            problems.append(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
            continue
        known |= parse_ids(done.stdout)
    if not sources:
        problems.append("no container runtime to ask (neither podman nor crictl is on the PATH)")
    containers = frozenset(known) if sources and not problems else None
    return RuntimeView(tuple(sources), containers, tuple(problems))


def live_containers(given: Collection[str] | None, environ: Mapping[str, str]) -> RuntimeView:
    """The containers named by the caller, else the ones the runtimes know."""
    return ask_runtimes(environ) if given is None else RuntimeView.given(frozenset(given))
