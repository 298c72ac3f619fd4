"""Ask a host's agent how it is: flanneld's /healthz and /readyz, and pyflanneld's /statusz.

The address is the agent's own ``--healthz-ip``/``--healthz-port``; an agent listening on every
address is asked on loopback. Port 0 means the agent runs no health server (flanneld's default):
then its process is looked for instead (`ops.agent_process`), and it counts as ready once it has
written subnet.env since it started, as its /readyz would say. `probe_agent` works in the calling
thread's network namespace (run it through `netlink.netns.run_in_netns` for another host's). A
Go flanneld answers /healthz and /readyz only: its state is known, its version and uptime are
not.
"""

from __future__ import annotations

import enum
import http.client
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, ip_address, ip_network
from typing import Any

from pyflannel_runtime.agent.pidfile import pid_file_for
from pyflannel_runtime.fsutil import os_error_text
from pyflannel_runtime.gojson.core import MAX_DOCUMENT_BYTES, GoJSONError, decode
from pyflannel_runtime.netlink.entries import IPAddress, IPNetwork
from pyflannel_runtime.ops.agent_process import AgentProcess, Presence, find_agent

# flanneld's answers (main.go mustRunHealthz).
HEALTHZ_BODY = "flanneld is running"
READYZ_BODY = "flanneld is ready"
# /statusz carries one route per peer, some 40 bytes each: the bounded decoder's 1 MiB holds
# tens of thousands.
_STATUSZ_LIMIT = MAX_DOCUMENT_BYTES
_BODY_LIMIT = 4096


class AgentState(enum.Enum):
    READY = "ready"
    NOT_READY = "not ready"
    DOWN = "down"
    UNCHECKED = "not checked"  # no health server to ask


@dataclass(frozen=True)
class AgentEndpoint:
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"


def agent_endpoint(healthz_ip: str, healthz_port: int) -> AgentEndpoint | None:
    """Where the agent's health server answers; None when it runs none (port 0). ValueError
    for an address or port the agent would refuse."""
    if not 0 <= healthz_port <= 65535:
        raise ValueError(f"port {healthz_port} is not in 0-65535")
    if healthz_port == 0:
        return None
    ip = ip_address(healthz_ip or "0.0.0.0")
    if ip.is_unspecified:  # listening everywhere: loopback is one of them
        ip = ip_address("::1" if ip.version == 6 else "127.0.0.1")
    return AgentEndpoint(str(ip), healthz_port)


@dataclass(frozen=True)
class UdpForwarder:
    """The udp datapath's userspace state, as the agent publishes it."""

    device: str
    routes: Mapping[IPNetwork, IPAddress]  # peer subnet -> the peer's public IP
    # What the forwarder counted since the agent started (e.g. foreign_source: datagrams from
    # an address that is no peer's, dropped); empty when the agent publishes none.
    counters: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentFacts:
    """What /statusz tells; None where the agent does not publish it (flanneld)."""

    name: str | None = None
    version: str | None = None
    pid: int | None = None
    uptime: int | None = None  # seconds
    backend: str | None = None
    forwarder: UdpForwarder | None = None


@dataclass(frozen=True)
class AgentHealth:
    endpoint: AgentEndpoint | None
    state: AgentState
    reason: str = ""  # why it is down, not ready or not checked
    facts: AgentFacts = AgentFacts()
    found_by: str = ""  # with no health server: how the agent's process was found

    @property
    def ok(self) -> bool:
        return self.state in (AgentState.READY, AgentState.UNCHECKED)

    def describe(self) -> str:
        """One line: the state, then what is known about the agent."""
        if self.state is AgentState.UNCHECKED:
            return f"Agent health not checked ({self.reason})"
        text = f"Agent {self.state.value}"
        if self.reason:
            text += f": {self.reason}"
        if self.state is AgentState.DOWN:
            return text
        facts = self.facts
        known = [f"{facts.name or 'flanneld'} {facts.version or '(version not published)'}"]
        if facts.uptime is not None:
            known.append(f"up {duration(facts.uptime)}")
        if facts.pid is not None:
            known.append(f"pid {facts.pid}")
        known.append(self.endpoint.url if self.endpoint else f"no health server, {self.found_by}")
        return f"{text} ({', '.join(known)})"

    def as_dict(self) -> dict[str, object]:
        """For ``--output json``."""
        facts = self.facts
        return {
            "state": self.state.value,
            "reason": self.reason or None,
            "endpoint": self.endpoint.url if self.endpoint else None,
            "name": facts.name,
            "version": facts.version,
            "pid": facts.pid,
            "uptime_seconds": facts.uptime,
            "backend": facts.backend,
            "found_by": self.found_by or None,
        }


def duration(seconds: int) -> str:
    """3d4h, 2h05m, 7m09s, 12s."""
    days, rest = divmod(max(seconds, 0), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def unchecked(reason: str) -> AgentHealth:
    return AgentHealth(None, AgentState.UNCHECKED, reason)


def probe_agent(
    endpoint: AgentEndpoint | None, timeout: float, subnet_file: str | None = None
) -> AgentHealth:
    """The agent's state from its health server (in this thread's network namespace); with no
    health server, from its process and the `subnet_file` it writes (None: not known, so the
    agent is not checked)."""
    if endpoint is None:
        if subnet_file is None:
            return unchecked("healthz off, and no subnet file to find the agent by")
        return process_health(find_agent(pid_file_for(subnet_file)), subnet_file)
    try:
        status, body = _get(endpoint, "/healthz", timeout, _BODY_LIMIT)
        if status != 200 or body.decode(errors="replace") != HEALTHZ_BODY:
            seen = body[:80].decode(errors="replace")
            return AgentHealth(
                endpoint,
                AgentState.DOWN,
                f"{endpoint.address}/healthz answered {status} {seen!r}, not flannel's agent",
            )
        ready, body = _get(endpoint, "/readyz", timeout, _BODY_LIMIT)
    except (OSError, http.client.HTTPException) as err:
        return AgentHealth(endpoint, AgentState.DOWN, f"nothing answers on {endpoint.address}: "
                           f"{_error_text(err)}")  # fmt: skip
    facts = _facts(endpoint, timeout)
    if ready == 200 and body.decode(errors="replace") == READYZ_BODY:
        return AgentHealth(endpoint, AgentState.READY, facts=facts)
    reason = "subnet.env not written yet" if ready == 503 else f"/readyz answered {ready}"
    return AgentHealth(endpoint, AgentState.NOT_READY, reason, facts)


def process_health(
    process: AgentProcess, subnet_file: str, now: float | None = None
) -> AgentHealth:
    """An agent without a health server: down when its process is gone; ready once subnet.env
    was written after the process started (what /readyz answers), else not ready."""
    if process.presence is Presence.UNKNOWN:
        return unchecked(f"healthz off; {process.reason}")
    if process.presence is Presence.GONE:
        return AgentHealth(None, AgentState.DOWN, process.reason)
    started = process.started
    uptime = None if started is None else max(0, int((now or time.time()) - started))
    facts = AgentFacts(name=process.name, pid=process.pid, uptime=uptime)
    try:
        written = os.stat(subnet_file).st_mtime
    except OSError:
        written = None
    if written is not None and written >= (process.run_since or 0.0):
        return AgentHealth(None, AgentState.READY, facts=facts, found_by=process.reason)
    reason = f"{subnet_file} not written since the agent started"
    return AgentHealth(None, AgentState.NOT_READY, reason, facts, process.reason)


def _facts(endpoint: AgentEndpoint, timeout: float) -> AgentFacts:
    """What /statusz tells; nothing when it cannot (flanneld, or a failed request)."""
    try:
        status, body = _get(endpoint, "/statusz", timeout, _STATUSZ_LIMIT)
    except (OSError, http.client.HTTPException):
        return AgentFacts()
    return parse_statusz(body) if status == 200 else AgentFacts()


def _error_text(err: Exception) -> str:
    if isinstance(err, TimeoutError):
        return "no answer in time"
    if isinstance(err, OSError):
        return os_error_text(err)
    return str(err) or type(err).__name__


def _get(endpoint: AgentEndpoint, path: str, timeout: float, limit: int) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read(limit + 1)
        if len(body) > limit:
            raise http.client.HTTPException(f"{path}: answer longer than {limit} bytes")
        return response.status, body
    finally:
        connection.close()


def parse_statusz(body: bytes) -> AgentFacts:
    """The facts /statusz gives; what is missing or malformed is left out (it is the agent's
    own report, never trusted further than its types)."""
    try:
        data = decode(body)
    except GoJSONError:
        return AgentFacts()
    if not isinstance(data, dict):
        return AgentFacts()

    def field(key: str, kind: type[str] | type[int]) -> Any:
        value = data.get(key)
        return value if isinstance(value, kind) and not isinstance(value, bool) else None

    return AgentFacts(
        name=field("name", str),
        version=field("version", str),
        pid=field("pid", int),
        uptime=field("uptime_seconds", int),
        backend=field("backend", str),
        forwarder=_forwarder(data.get("udp")),
    )


def _forwarder(data: object) -> UdpForwarder | None:
    if not isinstance(data, dict):
        return None
    device, routes = data.get("device"), data.get("routes")
    if not isinstance(device, str) or not isinstance(routes, dict):
        return None
    table: dict[IPNetwork, IPAddress] = {}
    for subnet, peer in routes.items():
        try:
            net, host = ip_network(subnet), ip_address(str(peer).rpartition(":")[0])
        except ValueError:
            continue
        if isinstance(net, IPv4Network) and isinstance(host, IPv4Address):
            table[net] = host
    counters = data.get("counters")
    counted = {
        str(name): count
        for name, count in (counters.items() if isinstance(counters, dict) else ())
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0
    }
    return UdpForwarder(device, table, counted)
