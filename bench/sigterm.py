"""A benchmark stopped with SIGTERM (a timeout, `kill`) cleans up as on Ctrl-C: the signal
becomes KeyboardInterrupt, so the `finally` blocks and labs' context managers remove the
namespaces, links, processes and lab hosts they made instead of leaving them behind."""

from __future__ import annotations

import os
import signal
from types import FrameType


def interrupt_on_sigterm() -> None:
    benchmark = os.getpid()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != benchmark:
            # A forked child that never exec'd (pyroute2 forks to open a socket in a
            # namespace, and stops a slow child with SIGTERM): it must die, as by default,
            # not unwind its parent's stack.
            os._exit(128 + signum)
        # A second SIGTERM must not cut the cleanup short (SIGKILL still can).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
