"""Where the lab keeps things.

The image cache (rootfs builds, private podman storage) survives ``hosts down``; the state
directory (the lab's record, SSH key, control sockets) and the generated inventory do not.
Defaults live under the project's ``.lab/`` and ``inventories/lab/``; environment variables
point them elsewhere, e.g. to share one image cache between several checkouts. The state
directory's path must be short (SSH control sockets live in it): about 70 bytes at most.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "PYFLANNEL_LAB_CACHE"
STATE_ENV = "PYFLANNEL_LAB_STATE"
INVENTORY_ENV = "PYFLANNEL_LAB_INVENTORY"


def project_root() -> Path:
    """The checkout this package runs from, else the working directory."""
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file():
        return checkout
    return Path.cwd()


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or project_root() / ".lab" / "cache").absolute()


@dataclass(frozen=True)
class LabPaths:
    """One lab's files: ``state_dir`` is removed by ``down``, and so is ``inventory``."""

    state_dir: Path
    inventory: Path

    @classmethod
    def default(cls) -> LabPaths:
        root = project_root()
        state = os.environ.get(STATE_ENV) or root / ".lab" / "hosts"
        inventory = os.environ.get(INVENTORY_ENV) or root / "inventories" / "lab" / "hosts.yml"
        return cls(Path(state).absolute(), Path(inventory).absolute())

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def ssh_key(self) -> Path:
        return self.state_dir / "id_ed25519"

    @property
    def authorized_keys(self) -> Path:
        return self.state_dir / "authorized_keys"

    @property
    def control_dir(self) -> Path:
        return self.state_dir / "cp"
