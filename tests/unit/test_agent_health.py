"""/healthz and /readyz answer as flanneld's do (flannel-io/flannel main.go: mustRunHealthz),
/statusz tells pyflanneld's version, uptime and datapath state; READY=1 reaches
$NOTIFY_SOCKET."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import tempfile
import urllib.error
import urllib.request

import pytest

from pyflannel_runtime import __version__
from pyflannel_runtime.agent import sdnotify
from pyflannel_runtime.agent.errors import StartupError
from pyflannel_runtime.agent.health import HealthServer


def _get(url: str, method: str = "GET") -> tuple[int, str, str]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


def test_health_endpoints() -> None:
    async def scenario() -> list[tuple[int, str, str]]:
        server = HealthServer("127.0.0.1", 0)
        await server.start()
        base = f"http://127.0.0.1:{server.port}"
        try:
            results = [await asyncio.to_thread(_get, f"{base}/healthz")]
            results.append(await asyncio.to_thread(_get, f"{base}/readyz"))
            server.ready = True
            results.append(await asyncio.to_thread(_get, f"{base}/readyz", "POST"))
            results.append(await asyncio.to_thread(_get, f"{base}/nope"))
            return results
        finally:
            await server.stop()

    healthz, not_ready, ready, missing = asyncio.run(scenario())
    assert healthz == (200, "text/plain; charset=utf-8", "flanneld is running")
    assert not_ready == (503, "text/plain; charset=utf-8", "flanneld is not ready yet")
    assert ready == (200, "text/plain; charset=utf-8", "flanneld is ready")
    assert missing[0] == 404


def test_statusz_is_json_beside_flanneld_s_endpoints() -> None:
    async def scenario() -> tuple[tuple[int, str, str], tuple[int, str, str]]:
        server = HealthServer("127.0.0.1", 0)
        await server.start()
        base = f"http://127.0.0.1:{server.port}"
        try:
            starting = await asyncio.to_thread(_get, f"{base}/statusz")
            server.ready, server.backend = True, "udp"
            server.datapath = lambda: {"udp": {"device": "flannel0", "routes": {}}}
            return starting, await asyncio.to_thread(_get, f"{base}/statusz")
        finally:
            await server.stop()

    starting, running = asyncio.run(scenario())
    assert starting[:2] == (200, "application/json")
    first = json.loads(starting[2])
    assert first["name"] == "pyflanneld" and first["version"] == __version__
    assert first["pid"] == os.getpid() and first["ready"] is False and first["backend"] is None
    assert isinstance(first["uptime_seconds"], int) and first["started"].endswith("Z")
    second = json.loads(running[2])
    assert second["ready"] is True and second["backend"] == "udp"
    assert second["udp"] == {"device": "flannel0", "routes": {}}


def test_sd_notify_sends_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "notify")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
            listener.bind(path)
            monkeypatch.setenv("NOTIFY_SOCKET", path)
            assert sdnotify.notify("READY=1")
            assert listener.recv(64) == b"READY=1"


def test_sd_notify_without_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not sdnotify.notify("READY=1")


@pytest.mark.parametrize(
    ("family", "host"), [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")]
)
def test_a_port_in_use_is_flanneld_s_one_line_error(
    family: socket.AddressFamily, host: str
) -> None:
    with socket.socket(family) as busy:
        busy.bind((host, 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = HealthServer(host, port)
        with pytest.raises(StartupError) as err:
            asyncio.run(server.start())
    shown = f"[{host}]" if ":" in host else host
    assert str(err.value) == (
        f"Start healthz server error. listen tcp {shown}:{port}: bind: address already in use"
    )
