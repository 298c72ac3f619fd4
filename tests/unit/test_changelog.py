"""The changelog is antsibull-changelog's: the fragments and changelogs/changelog.yaml lint
clean, and CHANGELOG.rst is what ``antsibull-changelog generate`` writes from them (nobody edits
it by hand)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = str(Path(sys.executable).with_name("antsibull-changelog"))


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TOOL, *args], cwd=cwd, capture_output=True, text=True, check=False)


def test_the_fragments_lint_clean() -> None:
    done = run("lint")
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_the_released_changes_lint_clean() -> None:
    done = run("lint-changelog-yaml", "changelogs/changelog.yaml")
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_the_changelog_is_generated(tmp_path: Path) -> None:
    shutil.copy(ROOT / "galaxy.yml", tmp_path)
    shutil.copytree(ROOT / "changelogs", tmp_path / "changelogs")
    done = run("generate", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    generated = (tmp_path / "CHANGELOG.rst").read_text()
    assert (ROOT / "CHANGELOG.rst").read_text() == generated, "run: antsibull-changelog generate"
