"""A network namespace's protocol counters (``/proc/net/snmp``): the checksum errors its
receivers counted.

``/proc/net`` shows the namespace of the thread that reads it through ``/proc/thread-self``,
so the read runs in a helper thread that has entered the namespace (``netns.run_in_netns``).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyflannel_runtime.netlink.netns import run_in_netns

# The counters the suite reports, as "<protocol>:<field>".
UDP_CSUM_ERRORS = "Udp:InCsumErrors"
UDP_IN_ERRORS = "Udp:InErrors"
UDP_IN = "Udp:InDatagrams"
UDP_BUFFER_ERRORS = "Udp:RcvbufErrors"
TCP_CSUM_ERRORS = "Tcp:InCsumErrors"
WATCHED = (UDP_CSUM_ERRORS, UDP_IN_ERRORS, UDP_IN, UDP_BUFFER_ERRORS, TCP_CSUM_ERRORS)

Counters = Mapping[str, int]


def parse_snmp(text: str) -> dict[str, int]:
    """Every counter of /proc/net/snmp as "<protocol>:<field>" (each protocol is a header line
    of field names followed by a line of values)."""
    counters: dict[str, int] = {}
    lines = [line.split() for line in text.splitlines() if ":" in line]
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if not names or names[0] != values[0]:
            continue
        protocol = names[0].rstrip(":")
        for name, value in zip(names[1:], values[1:], strict=False):
            try:
                counters[f"{protocol}:{name}"] = int(value)
            except ValueError:
                continue
    return counters


def delta(before: Counters, after: Counters) -> dict[str, int]:
    """How much each watched counter grew (a counter that is missing did not grow)."""
    return {name: after.get(name, 0) - before.get(name, 0) for name in WATCHED}


def read_counters(netns: str | None = None) -> dict[str, int]:
    """The counters of the named namespace (None: the calling thread's)."""

    def read() -> str:
        with open("/proc/thread-self/net/snmp") as handle:
            return handle.read()

    return parse_snmp(run_in_netns(netns, read))
