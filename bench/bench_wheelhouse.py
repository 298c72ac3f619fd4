"""The agent's wheelhouse built for each Debian release's Python, from an empty cache.

What a first site.yml run on a new controller pays before any node is touched: the runtime's
own wheel, then its dependencies' binary wheels downloaded for the node interpreter's tags
(pyflannel_controller.wheelhouse), once per distinct interpreter of the play. The reference is
a cached build of the same target, what every later run pays. Needs the package index.

Finishes with `metric: value` lines:
    python bench/bench_wheelhouse.py
"""

from __future__ import annotations

import argparse
import tarfile
import tempfile
import time
from pathlib import Path

from sigterm import interrupt_on_sigterm

from pyflannel_controller.wheelhouse import build_wheelhouse, target_of

ROOT = Path(__file__).resolve().parents[1]
# Debian 12 and 13 on x86_64, as node_facts reports their system Python.
INTERPRETERS = {
    "bookworm": {"python": "3.11", "libc": "glibc 2.36"},
    "trixie": {"python": "3.13", "libc": "glibc 2.41"},
}


def main() -> None:
    interrupt_on_sigterm()
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    with tempfile.TemporaryDirectory(prefix="pyflannel-bench-wheelhouse-") as cache:
        for release, interpreter in INTERPRETERS.items():
            target = target_of(
                {"implementation": "cpython", "abiflags": "", "machine": "x86_64", **interpreter}
            )
            started = time.monotonic()
            built = build_wheelhouse(ROOT, Path(cache), target)
            cold = time.monotonic() - started
            started = time.monotonic()
            build_wheelhouse(ROOT, Path(cache), target)
            cached = time.monotonic() - started
            with tarfile.open(built.archive) as tar:
                wheels = len(tar.getnames())
            size = built.archive.stat().st_size / 2**20
            print(f"wheelhouse {release} ({target.key}) build s: {cold:.1f}")
            print(f"wheelhouse {release} cached s: {cached:.2f}")
            print(f"wheelhouse {release} wheels: {wheels} ({size:.1f} MiB)")


if __name__ == "__main__":
    main()
