"""Running iptables/nft binaries from asyncio, optionally inside another network namespace."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from pyflannel_runtime import PyflannelError


class FirewallError(PyflannelError, RuntimeError):
    """A firewall command failed or its output could not be understood."""


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (
            f"{' '.join(self.argv)}: exit status {self.returncode}"
            f" (stdout: {self.stdout.strip()!r}, stderr: {self.stderr.strip()!r})"
        )


class CommandRunner:
    """Runs commands, each prefixed by ``prefix`` (e.g. ``ip netns exec <name>`` in tests)."""

    def __init__(self, prefix: Sequence[str] = ()) -> None:
        self._prefix = tuple(prefix)

    @classmethod
    def in_netns(cls, name: str) -> CommandRunner:
        return cls(("ip", "netns", "exec", name))

    async def run(self, *argv: str, stdin: str | None = None) -> CommandResult:
        try:
            process = await asyncio.create_subprocess_exec(
                *self._prefix,
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except FileNotFoundError as err:
            raise FirewallError(f"{argv[0]} binary was not found: {err}") from err
        out, err_out = await process.communicate(stdin.encode() if stdin is not None else None)
        assert process.returncode is not None
        return CommandResult(
            tuple(argv),
            process.returncode,
            out.decode(errors="replace"),
            err_out.decode(errors="replace"),
        )

    async def check(self, *argv: str, stdin: str | None = None) -> CommandResult:
        """Like ``run`` but a non-zero exit is a FirewallError."""
        result = await self.run(*argv, stdin=stdin)
        if result.returncode != 0:
            raise FirewallError(f"unable to run {result.describe()}")
        return result
