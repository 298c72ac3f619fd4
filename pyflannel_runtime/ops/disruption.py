"""The disruption probe on one node: long-lived TCP connections opened before an operation (a
restart, a roll, a reboot) and checked after it. What the verify role's tasks and the lab
tests call, in four steps.

``setup`` wires two probe pods under the probe's own name and starts the connectivity suite's
responder in them (``ops.connectivity.setup``), for as long as the probe may live. ``open``
starts the probe's process (``python -m pyflannel_runtime.ops.disruption``), which opens this
node's connections (``connectivity.disruption.targets``: its pod to every other node's pod and
to its own second pod, to the outside stand-in, and its host to every other node's pod) and
holds them (``connectivity.streams``) after the call returns; its PID is recorded in
/run/NAME.disruption.pid and it answers on /run/NAME.disruption.sock. ``check`` reports each
connection's window since the opening or the last check, and starts the next. ``close`` ends
the process and removes the probe pods: its responder's connections go with them, so every
node's last check comes before any node's close.

A probe nobody closes (its play failed before the verify role) ends by itself when its
lifetime runs out, and removes its pods and responder on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pyflannel_runtime.connectivity import disruption, responder, streams
from pyflannel_runtime.ops import connectivity
from pyflannel_runtime.ops.probe import ProbeError

DEFAULT_NAME = "pyflannel-disrupt"
DEFAULT_LIFETIME = 3600.0
DEFAULT_SETTLE = 3.0
MODULE = "pyflannel_runtime.ops.disruption"  # how the probe's process is run, and found again
# The responder in the probe pods outlives the probe's process by this much: the process
# starts after every node's setup, and removes the responder when it ends.
_RESPONDER_MARGIN = 300.0
_START_TIMEOUT = 60.0


def pid_file(name: str) -> str:
    return f"/run/{name}.disruption.pid"


def control_socket(name: str) -> str:
    return f"/run/{name}.disruption.sock"


def setup(
    name: str,
    conflist: str,
    bin_dir: str,
    host_address: str,
    *,
    lifetime: float = DEFAULT_LIFETIME,
) -> dict[str, Any]:
    """The probe pods and their responder (what an earlier probe of this name left is removed
    first); where the other nodes reach them. Raises ProbeError."""
    stop(name)
    return connectivity.setup(
        name, conflist, bin_dir, host_address, lifetime=lifetime + _RESPONDER_MARGIN
    )


def open_probe(
    name: str,
    node: str,
    setups: Mapping[str, Mapping[str, Any]],
    outside: str = "",
    *,
    conflist: str,
    bin_dir: str,
    lifetime: float = DEFAULT_LIFETIME,
) -> list[dict[str, Any]]:
    """Start the probe's process on this node (`node` among `setups`, every node's setup);
    returns each connection's first row, once it is open or could not be opened in time.
    Raises ProbeError."""
    try:
        targets = disruption.targets(node, setups, disruption.parse_outside(outside))
    except KeyError as err:
        raise ProbeError(f"no probe pods of node {err} among the setups") from None
    except (ValueError, TypeError, IndexError) as err:
        raise ProbeError(f"cannot read the probe's setups: {err}") from None
    stop(name)
    spec = {
        "name": name,
        "conflist": conflist,
        "bin_dir": bin_dir,
        "lifetime": lifetime,
        "targets": [target.as_dict() for target in targets],
    }
    try:
        announced = responder.launch([json.dumps(spec)], module=MODULE, timeout=_START_TIMEOUT)
    except OSError as err:
        raise ProbeError(str(err)) from None
    with open(pid_file(name), "w") as handle:
        handle.write(f"{announced['pid']}\n")
    return list(announced["rows"])


def check(name: str, settle: float = DEFAULT_SETTLE) -> list[dict[str, Any]]:
    """Each connection's window so far (after up to `settle` seconds for the echoes of what
    was sent before); the next window starts. Raises ProbeError when the probe is not running."""
    try:
        return streams.request(control_socket(name), streams.CHECK, settle)
    except OSError as err:
        raise ProbeError(f"the disruption probe {name} does not answer: {err}") from None


def close(name: str, conflist: str, bin_dir: str) -> dict[str, Any]:
    """The process stopped (``running``: it still ran) and the probe pods removed, as
    ``ops.connectivity.teardown`` reports."""
    running = stop(name)
    return {"running": running, **connectivity.teardown(name, conflist, bin_dir)}


def stop(name: str) -> bool:
    """End the probe's process, if one runs; True when one did."""
    stopped = connectivity.stop_recorded(pid_file(name), MODULE)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(control_socket(name))
    return stopped


def main(argv: Sequence[str] | None = None) -> int:
    """The probe's process: one argument, the JSON spec ``open_probe`` passes."""
    args = sys.argv[1:] if argv is None else list(argv)
    spec = json.loads(args[0])
    name = str(spec["name"])
    targets = [disruption.Target.of(value) for value in spec["targets"]]

    def announce(rows: Sequence[disruption.Row]) -> None:
        print(json.dumps({"pid": os.getpid(), "rows": [r.as_dict() for r in rows]}), flush=True)
        responder.detach_stdout()

    expired = asyncio.run(
        streams.serve(targets, control_socket(name), float(spec["lifetime"]), announce)
    )
    if expired:
        # Nobody closed the probe (its play ended before the verify role): clean up.
        if _recorded_pid(name) == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(pid_file(name))
        connectivity.teardown(name, str(spec["conflist"]), str(spec["bin_dir"]))
    return 0


def _recorded_pid(name: str) -> int:
    try:
        with open(pid_file(name)) as handle:
            return int(handle.read().strip() or 0)
    except (OSError, ValueError):
        return 0


if __name__ == "__main__":
    sys.exit(main())
