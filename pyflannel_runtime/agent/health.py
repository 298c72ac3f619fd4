"""flanneld's /healthz and /readyz endpoints, on asyncio streams, plus pyflanneld's /statusz.

/healthz and /readyz answer exactly as flanneld's (flannel-io/flannel main.go: mustRunHealthz):
same paths, bodies, status codes and content type, so probes written for flanneld keep working.
What flanneld does not tell, the agent's version, uptime and what its datapath holds in
userspace, is on a path of its own: /statusz, a JSON object (the z-page name of /healthz and
/readyz, as Kubernetes components serve /statusz). flanneld answers 404 there, which is how
`pyflannel status` tells the two agents apart. Nothing on it is secret: the udp forwarder's
routes are the peers' subnets and public IPs, which every lease already publishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from pyflannel_runtime import __version__
from pyflannel_runtime.agent.errors import StartupError
from pyflannel_runtime.fsutil import os_error_text

log = logging.getLogger("pyflannel.health")

_REASONS = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}
_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"
AGENT_NAME = "pyflanneld"


class HealthServer:
    """Liveness is "the process answers"; readiness flips once subnet.env is written."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.ready = False
        self.backend: str | None = None
        # The datapath's own state for /statusz (the udp forwarder's routes), once it runs.
        self.datapath: Callable[[], Mapping[str, object]] | None = None
        self._started = time.monotonic()
        self._started_at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        self._server: asyncio.base_events.Server | None = None

    @property
    def address(self) -> str:
        """host:port as Go's net.JoinHostPort writes it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen; raises StartupError with flanneld's message (main.go mustRunHealthz) and
        Go's net.Listen wording, e.g. ``listen tcp 0.0.0.0:8081: bind: address already in use``."""
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as err:
            raise StartupError(
                f"Start healthz server error. listen tcp {self.address}: bind: {os_error_text(err)}"
            ) from None
        sockname = self._server.sockets[0].getsockname()
        self.port = sockname[1]
        log.info("Start healthz server on %s", self.address)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), timeout=3)

    def statusz(self) -> dict[str, object]:
        """What /statusz answers: who runs, since when, and the datapath's own state."""
        state: dict[str, object] = {
            "name": AGENT_NAME,
            "version": __version__,
            "pid": os.getpid(),
            "started": self._started_at,
            "uptime_seconds": int(time.monotonic() - self._started),
            "ready": self.ready,
            "backend": self.backend,
        }
        if self.datapath is not None:
            state.update(self.datapath())
        return state

    def _answer(self, path: str) -> tuple[int, str, str]:
        if path == "/healthz":
            return 200, _TEXT, "flanneld is running"
        if path == "/readyz":
            if self.ready:
                return 200, _TEXT, "flanneld is ready"
            return 503, _TEXT, "flanneld is not ready yet"
        if path == "/statusz":
            return 200, _JSON, json.dumps(self.statusz(), sort_keys=True) + "\n"
        return 404, _TEXT, "404 page not found\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), timeout=10)
            while (await asyncio.wait_for(reader.readline(), timeout=10)) not in (
                b"\r\n",
                b"\n",
                b"",
            ):
                pass
            parts = request_line.decode("latin-1").split()
            path = parts[1].split("?", 1)[0] if len(parts) >= 2 else "/"
            status, content_type, body = self._answer(path)
            payload = body.encode()
            writer.write(
                f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
                f"Content-Type: {content_type}\r\n"
                "X-Content-Type-Options: nosniff\r\n"
                f"Content-Length: {len(payload)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
