"""The record of the wheelhouse installed in the agent's virtualenv: the digest the runtime role
writes there once it has installed it (pyflannel.network.runtime_install), and node_facts
reports, so that the controller installs only where it differs.

Runs on the node with any Python (the stdlib only).
"""

from __future__ import annotations

import os

RECORD_NAME = ".pyflannel-wheelhouse"


def installed_wheelhouse(venv):
    """The digest recorded in `venv`, or None (no virtualenv, no record, an empty one)."""
    try:
        with open(os.path.join(venv, RECORD_NAME), encoding="utf-8") as record:
            return record.read().strip() or None
    except OSError:
        return None
