"""Agent restarts one batch at a time (the agent role's roll): how many hosts a batch holds
(``flannel_agent_restart_batch``, a number of hosts or a percentage of the play's hosts, as
Ansible's ``serial`` takes them) and which hosts go in which batch.

Pure: the role asks each host whether its agent runs and whether it runs what it is to run,
and this orders the restarts.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping

from pyflannel_runtime import PyflannelError

VARIABLE = "flannel_agent_restart_batch"
_PERCENT = re.compile(r"([0-9]+)%")
_COUNT = re.compile(r"[0-9]+")


class BatchSizeError(PyflannelError, ValueError):
    """``str()`` says what the value should be."""


class AgentState(enum.Enum):
    DOWN = "down"  # not running (never started, stopped, or failing): started at once
    OUTDATED = "outdated"  # runs another runtime, settings or network config: restarted in turn
    CURRENT = "current"  # runs what it is to run: left alone


def batch_size(value: object, hosts: int) -> int:
    """Hosts per batch: a whole number of hosts (an int, or its digits as ``-e`` passes it), or
    a percentage of ``hosts`` such as ``"25%"``, rounded down as Ansible's ``serial`` rounds
    it, but at least one host."""
    text = value.strip() if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif text is not None and _COUNT.fullmatch(text):
        count = int(text)
    elif text is not None and (percent := _PERCENT.fullmatch(text)):
        share = int(percent[1])
        if not 1 <= share <= 100:
            raise BatchSizeError(f"{value!r}: a percentage must be 1% to 100%")
        return max(1, hosts * share // 100)
    else:
        raise BatchSizeError(
            f"{value!r}: expected a number of hosts (1 or more) or a percentage of them, like 25%"
        )
    if count < 1:
        raise BatchSizeError(f"{value!r}: a batch holds at least one host")
    return count


def restart_batches(states: Mapping[str, AgentState], size: int) -> list[list[str]]:
    """The batches, in the hosts' order: first every host whose agent is down, all at once
    (restarting those stops nothing that runs), then the outdated ones ``size`` at a time."""
    down = [host for host, state in states.items() if state is AgentState.DOWN]
    outdated = [host for host, state in states.items() if state is AgentState.OUTDATED]
    rolling = [outdated[i : i + size] for i in range(0, len(outdated), size)]
    return [down, *rolling] if down else rolling
