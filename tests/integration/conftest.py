"""Shared integration fixtures: real etcd servers, and the collection tarball.

* ``etcd_server``: one plain etcd for the whole session. Share it through ``etcd_prefix``
  (a unique key prefix per test); never change server-wide state on it (auth, compaction).
* ``etcd_factory``: start private servers (TLS, auth, a netns, compaction); all are stopped when
  the test ends. See ``pyflannel_lab.etcd_server.start_etcd`` for the options.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pyflannel_lab.etcd_server import EtcdServer, start_etcd
from tests.integration.collection_tarball import build


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    server = start_etcd()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def etcd_factory() -> Iterator[Callable[..., EtcdServer]]:
    started: list[EtcdServer] = []

    def start(**options: Any) -> EtcdServer:
        server = start_etcd(**options)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def etcd_prefix() -> str:
    """A flannel prefix no other test uses (the layout below it is flannel's)."""
    return f"/pyft-{secrets.token_hex(4)}/network"


@pytest.fixture(scope="session")
def collection_tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The collection as it ships, built once for every test that looks into it or installs it."""
    return build(tmp_path_factory.mktemp("tarball"))
