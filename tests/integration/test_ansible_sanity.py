"""ansible-test sanity on the collection as it ships (scripts/sanity.py: the built tarball
unpacked at ansible_collections/pyflannel/network, and nothing added, Python 3.11): every sanity
test clean, or ignored with a reason in the tarball's tests/sanity/ignore-<ansible-core>.txt.
About 45 s once ansible-test's virtualenvs exist (~/.ansible/test); the first run installs their
requirements from the package index."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_ignore_entry_gives_its_reason() -> None:
    for ignore in (ROOT / "tests" / "sanity").glob("ignore-*.txt"):
        for line in ignore.read_text().splitlines():
            entry, _, reason = line.partition(" # ")
            assert len(entry.split()) == 2 and reason.strip(), f"{ignore.name}: {line!r}"


@pytest.mark.timeout(900)
def test_ansible_test_sanity_is_clean(collection_tarball: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sanity.py"), "--tarball", str(collection_tarball)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    output = done.stdout + done.stderr
    errors = [line for line in output.splitlines() if line.startswith(("ERROR", "FATAL"))]
    assert done.returncode == 0 and not errors, "\n".join(errors) or output[-4000:]
    assert 'Running sanity test "validate-modules"' in output
