"""etcd's authentication for flannel's agents (the ``pyflannel.network.etcd_auth`` module, run
by the etcd role from the controller): a role that may read and write flannel's prefix and
nothing else, the agents' user with that role, a user of that role for each node's client
certificate (etcd takes a certificate's common name as the user of a client that presents no
token), the operator's ``root``, and authentication switched on. Read, compare, write: only
what differs is written, and check mode writes nothing.

etcd 3.4's JSON gateway answers each call (``/v3/auth/...``); passwords cannot be read back, so
a user's password is checked by authenticating with it and changed only when that fails. Until
authentication is on, the calls need no credentials; once it is, they are made as ``root``.
"""

from __future__ import annotations

import asyncio
from base64 import b64encode
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyflannel_runtime.ops.publish import PublishError
from pyflannel_runtime.subnet.etcd.client import (
    EtcdClient,
    EtcdStatusError,
    EtcdUnavailable,
    prefix_range_end,
)
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings, client_tls, parse_endpoint

# EtcdSettings too: the action plugin builds the connection from its arguments.
__all__ = [
    "ROLE",
    "ROOT",
    "AuthSetup",
    "EtcdAuthError",
    "EtcdSettings",
    "certificate_users",
    "ensure_auth",
]

ROOT = "root"
ROLE = "pyflannel"
_READWRITE = "READWRITE"


class EtcdAuthError(PublishError):
    """etcd refused what the operator's credentials should allow."""


@dataclass(frozen=True)
class AuthSetup:
    """Who may do what: flannel's prefix, the agents' user, the certificates' users, root."""

    prefix: str
    agent_user: str
    agent_password: str
    root_password: str
    certificate_users: tuple[str, ...] = ()

    @property
    def key_range(self) -> tuple[bytes, bytes]:
        """Everything below the prefix (its config and its subnets), nothing beside it."""
        start = self.prefix.rstrip("/").encode() + b"/"
        return start, prefix_range_end(start)


def _b64(data: bytes) -> str:
    return b64encode(data).decode()


def _missing(err: EtcdStatusError) -> bool:
    return "not found" in str(err)


async def _authenticates(client: EtcdClient, user: str, password: str) -> bool | None:
    """True when the password is right, False when not; None when authentication is off."""
    try:
        await client.call("/v3/auth/authenticate", {"name": user, "password": password})
    except EtcdStatusError as err:
        if "authentication is not enabled" in str(err):
            return None
        if "authentication failed" in str(err):
            return False
        raise
    return True


class _Auth:
    """The calls, each writing only when not in check mode; `changes` says what was (or would
    be) done."""

    def __init__(self, client: EtcdClient, check: bool) -> None:
        self.client = client
        self.check = check
        self.changes: list[str] = []

    async def call(self, what: str, path: str, request: dict[str, Any]) -> None:
        self.changes.append(what)
        if not self.check:
            await self.client.call(path, request)

    async def user_roles(self, name: str) -> list[str] | None:
        """The user's roles; None when there is no such user."""
        try:
            reply = await self.client.call("/v3/auth/user/get", {"name": name})
        except EtcdStatusError as err:
            if _missing(err):
                return None
            raise
        return list(reply.get("roles") or [])

    async def ensure_user(
        self, name: str, password: str, role: str, *, check_password: bool
    ) -> None:
        roles = await self.user_roles(name)
        if roles is None:
            await self.call(
                f"add user {name}", "/v3/auth/user/add", {"name": name, "password": password}
            )
            roles = []
        elif check_password and await _authenticates(self.client, name, password) is False:
            await self.call(
                f"change the password of {name}",
                "/v3/auth/user/changepw",
                {"name": name, "password": password},
            )
        if role not in roles:
            await self.call(
                f"grant role {role} to {name}", "/v3/auth/user/grant", {"user": name, "role": role}
            )

    async def ensure_role(self, key: bytes, range_end: bytes) -> None:
        try:
            reply = await self.client.call("/v3/auth/role/get", {"role": ROLE})
        except EtcdStatusError as err:
            if not _missing(err):
                raise
            await self.call(f"add role {ROLE}", "/v3/auth/role/add", {"name": ROLE})
            reply = {}
        wanted = {"permType": _READWRITE, "key": _b64(key), "range_end": _b64(range_end)}
        perms = reply.get("perm") or []
        held = [p for p in perms if p.get("key") == wanted["key"]]
        if not any(
            p.get("range_end") == wanted["range_end"] and p.get("permType") == _READWRITE
            for p in held
        ):
            shown = f"{key.decode()}..{range_end.decode()}"
            await self.call(
                f"grant role {ROLE} read and write on {shown}",
                "/v3/auth/role/grant",
                {"name": ROLE, "perm": wanted},
            )
        for other in perms:
            if other.get("key") != wanted["key"] or other.get("range_end") != wanted["range_end"]:
                await self.call(
                    f"revoke from role {ROLE} a permission beyond flannel's prefix",
                    "/v3/auth/role/revoke",
                    {
                        "role": ROLE,
                        "key": other.get("key", ""),
                        "range_end": other.get("range_end", ""),
                    },
                )


async def _setup(
    endpoint_client: EtcdClient, root: EtcdClient, setup: AuthSetup, check: bool
) -> list[str]:
    enabled = await _authenticates(endpoint_client, ROOT, setup.root_password)
    if enabled is False:
        raise EtcdAuthError(
            "etcd authentication is on and refuses root's password: the controller's "
            "etcd credentials are not the ones this cluster was set up with"
        )
    auth = _Auth(root if enabled else endpoint_client, check)
    await auth.ensure_user(ROOT, setup.root_password, ROOT, check_password=False)
    key, range_end = setup.key_range
    await auth.ensure_role(key, range_end)
    await auth.ensure_user(setup.agent_user, setup.agent_password, ROLE, check_password=True)
    for user in setup.certificate_users:
        # Certificates authenticate on their own: this password is never used.
        await auth.ensure_user(user, setup.agent_password, ROLE, check_password=False)
    if not enabled:
        await auth.call("enable authentication", "/v3/auth/enable", {})
    return auth.changes


async def _with_endpoint(settings: EtcdSettings, setup: AuthSetup, check: bool) -> list[str]:
    tls = client_tls(settings)
    endpoints = [parse_endpoint(e, tls) for e in settings.endpoints]
    if not endpoints:
        raise EtcdAuthError("no etcd endpoints given")
    for index, endpoint in enumerate(endpoints):
        bare = EtcdClient(endpoint, timeout=settings.request_timeout)
        root = EtcdClient(
            endpoint, username=ROOT, password=setup.root_password, timeout=settings.request_timeout
        )
        try:
            return await _setup(bare, root, setup, check)
        except EtcdUnavailable:
            if index == len(endpoints) - 1:
                raise
        finally:
            await bare.close()
            await root.close()
    raise EtcdAuthError("no etcd endpoint answered")


def ensure_auth(settings: EtcdSettings, setup: AuthSetup, *, check: bool) -> list[str]:
    """Make etcd's users, role and authentication as `setup` says; what changed (or would)."""
    return asyncio.run(_with_endpoint(settings, setup, check))


def certificate_users(names: Sequence[str]) -> tuple[str, ...]:
    """The users etcd sees for the nodes' client certificates (the etcd role's common names)."""
    return tuple(f"pyflannel-{name}" for name in names)
