"""numpy version of `superpacket.frame`: the same datagrams, laid out in one buffer by two
array copies instead of a vector of ~90 pieces built in Python (and taken apart again by
sendmsg). Only imported when numpy is installed."""

from __future__ import annotations

from typing import Any

import numpy as np  # type: ignore[import-not-found, unused-ignore]

from pyflannel_runtime.backend.udp.offload import Buffer
from pyflannel_runtime.backend.udp.superpacket import (
    HEADER_LEN,
    MAX_SEGMENTS,
    SEQUENCES,
    header,
)


class Framer:
    """Frames super-packets for datagrams of one size into a buffer it reuses: the vector
    returned is valid until the next call."""

    def __init__(self, datagram_size: int) -> None:
        self.datagram_size = datagram_size
        self._chunk = datagram_size - HEADER_LEN
        self._rows: Any = np.zeros((MAX_SEGMENTS, datagram_size), dtype=np.uint8)
        self._flat = memoryview(self._rows.reshape(-1).data)
        # Every header word for each sequence number: [sequence][index], then the last chunk's.
        self._headers = [
            np.frombuffer(b"".join(header(i, s, False) for i in range(MAX_SEGMENTS)), np.uint8)
            .reshape(MAX_SEGMENTS, HEADER_LEN)
            .copy()
            for s in range(SEQUENCES)
        ]
        self._last_headers = [
            np.frombuffer(b"".join(header(i, s, True) for i in range(MAX_SEGMENTS)), np.uint8)
            .reshape(MAX_SEGMENTS, HEADER_LEN)
            .copy()
            for s in range(SEQUENCES)
        ]

    def frame(self, parts: list[Buffer], sequence: int) -> list[Buffer]:
        body: Any = np.frombuffer(parts[0] if len(parts) == 1 else b"".join(parts), np.uint8)
        chunk, size = self._chunk, len(body)
        count = -(-size // chunk)
        rows = self._rows
        tag = sequence % SEQUENCES
        rows[:count, :HEADER_LEN] = self._headers[tag][:count]
        rows[count - 1, :HEADER_LEN] = self._last_headers[tag][count - 1]
        full = size // chunk
        rows[:full, HEADER_LEN:] = body[: full * chunk].reshape(full, chunk)
        rest = size - full * chunk
        if rest:
            rows[full, HEADER_LEN : HEADER_LEN + rest] = body[full * chunk :]
        length = (count - 1) * self.datagram_size + HEADER_LEN + (size - (count - 1) * chunk)
        return [self._flat[:length]]
