"""flanneld's /healthz and /readyz endpoints, on asyncio streams.

flannel-io/flannel main.go: mustRunHealthz; docs/compatibility.md, "Health endpoints".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from pyflannel_runtime.agent.errors import StartupError
from pyflannel_runtime.fsutil import os_error_text

log = logging.getLogger("pyflannel.health")

_REASONS = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}


class HealthServer:
    """Liveness is "the process answers"; readiness flips once subnet.env is written."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.ready = False
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

    def _answer(self, path: str) -> tuple[int, str]:
        if path == "/healthz":
            return 200, "flanneld is running"
        if path == "/readyz":
            return (200, "flanneld is ready") if self.ready else (503, "flanneld is not ready yet")
        return 404, "404 page not found\n"

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
            status, body = self._answer(path)
            payload = body.encode()
            writer.write(
                f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
                "Content-Type: text/plain; charset=utf-8\r\n"
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
