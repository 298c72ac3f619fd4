"""A broken path for the UDP checksum scenario: an underlay "NIC" that fills in the outer UDP
checksum of VXLAN packets but not the checksum of the UDP datagram inside, the fault flannel
#1279 works around by turning tx checksum offload off on flannel.1.

This kernel has neither tc's csum nor pedit action, so the fault is a userspace step on one
host's egress: an iptables rule queues the host's outgoing VXLAN packets that carry UDP
(NFQUEUE, u32 on the inner protocol byte) to this module, which reads them with
NFQA_CFG_F_GSO (so the kernel leaves checksums it was going to offload undone: NFQA_SKB_INFO
says CSUMNOTREADY), computes only the outer UDP checksum of those, and hands them back as
modified, which the kernel takes as checksummed. With offload on, the inner checksum was left
for the hardware and stays unfilled: the receiving pod counts UdpInCsumErrors and drops the
datagram. With offload off on flannel.1 the inner checksum was filled before encapsulation,
and the packet passes. Packets whose checksums are complete pass unchanged.

``python -m tests.integration.csum_fault QUEUE`` runs the queue reader (inside the host's
network namespace); ``fault_on_host`` installs the rule and the reader, and removes both.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from pyflannel_runtime.connectivity.probes import inet_checksum

ROOT = Path(__file__).resolve().parents[2]

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3 << 8
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_PAYLOAD, NFQA_SKB_INFO = 1, 2, 10, 14
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_PACKET = 2
NFQA_CFG_F_GSO = 1 << 2
NFQA_SKB_CSUMNOTREADY = 1 << 0
NF_ACCEPT = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
SO_RCVBUFFORCE = 33
VXLAN_PORT = 8472
COMMENT = "pyflannel test: VXLAN inner UDP checksums left undone"


def _attr(kind: int, data: bytes) -> bytes:
    size = 4 + len(data)
    return struct.pack("=HH", size, kind) + data + bytes(-size % 4)


def _message(kind: int, queue: int, attrs: list[bytes], flags: int = NLM_F_REQUEST) -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + b"".join(attrs)
    return struct.pack("=IHHII", 16 + len(body), NFNL_SUBSYS_QUEUE | kind, flags, 0, 0) + body


def _attrs(buf: bytes) -> dict[int, bytes]:
    found, offset = {}, 0
    while offset + 4 <= len(buf):
        size, kind = struct.unpack_from("=HH", buf, offset)
        if size < 4:
            break
        found[kind & 0x3FFF] = buf[offset + 4 : offset + size]
        offset += (size + 3) & ~3
    return found


def fill_outer_udp_checksum(packet: bytes) -> bytes:
    """The IPv4 packet with its (outer) UDP checksum computed over the bytes as they are."""
    header = (packet[0] & 0x0F) * 4
    udp = bytearray(packet[header:])
    udp[6:8] = b"\0\0"
    pseudo = packet[12:20] + struct.pack("!BBH", 0, socket.IPPROTO_UDP, len(udp))
    udp[6:8] = struct.pack("!H", inet_checksum(pseudo + bytes(udp)) or 0xFFFF)
    return packet[:header] + bytes(udp)


def serve(queue: int) -> None:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
    sock.bind((0, 0))
    config = [
        [_attr(NFQA_CFG_CMD, struct.pack("=BxH", NFQNL_CFG_CMD_BIND, 0))],
        [
            _attr(NFQA_CFG_PARAMS, struct.pack(">IB", 0xFFFF, NFQNL_COPY_PACKET)),
            _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", 4096)),
            _attr(NFQA_CFG_MASK, struct.pack(">I", NFQA_CFG_F_GSO)),
            _attr(NFQA_CFG_FLAGS, struct.pack(">I", NFQA_CFG_F_GSO)),
        ],
    ]
    for attrs in config:
        sock.send(_message(NFQNL_MSG_CONFIG, queue, attrs, NLM_F_REQUEST | NLM_F_ACK))
        error = struct.unpack_from("=i", sock.recv(4096), 16)[0]
        if error:
            raise OSError(-error, f"nfqueue config: {os.strerror(-error)}")
    print("ready", flush=True)
    while True:
        data = sock.recv(1 << 18)
        offset = 0
        while offset + 16 <= len(data):
            size, kind = struct.unpack_from("=IH", data, offset)
            if kind == NFNL_SUBSYS_QUEUE | NFQNL_MSG_PACKET:
                attrs = _attrs(data[offset + 20 : offset + size])
                packet_id = struct.unpack_from(">I", attrs[NFQA_PACKET_HDR])[0]
                info = struct.unpack(">I", attrs[NFQA_SKB_INFO])[0] if NFQA_SKB_INFO in attrs else 0
                verdict = [_attr(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, packet_id))]
                if info & NFQA_SKB_CSUMNOTREADY:
                    payload = fill_outer_udp_checksum(attrs[NFQA_PAYLOAD])
                    verdict.append(_attr(NFQA_PAYLOAD, payload))
                sock.send(_message(NFQNL_MSG_VERDICT, queue, verdict))
            offset += (max(size, 16) + 3) & ~3


def _rule(queue: int) -> list[str]:
    # The inner IPv4 header starts 50 bytes in (outer IPv4 20, UDP 8, VXLAN 8, Ethernet 14):
    # its protocol byte is byte 59, the last of the word u32 reads at 56.
    return ["POSTROUTING", "-p", "udp", "--dport", str(VXLAN_PORT), "-m", "u32", "--u32",
            "56&0xFF=17", "-m", "comment", "--comment", COMMENT, "-j", "NFQUEUE",
            "--queue-num", str(queue), "--queue-bypass"]  # fmt: skip


@contextlib.contextmanager
def fault_on_host(netns_pid: int, queue: int = 7) -> Iterator[None]:
    """The fault on the egress of the host whose network namespace process `netns_pid` is in;
    removed again on exit (the reader stopped, the rule deleted)."""
    enter = ["nsenter", f"--net=/proc/{netns_pid}/ns/net"]
    reader = subprocess.Popen(
        [*enter, sys.executable, "-m", "tests.integration.csum_fault", str(queue)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == b"ready", "the queue reader did not start"
        subprocess.run([*enter, "iptables", "-t", "mangle", "-A", *_rule(queue)], check=True)
        try:
            yield
        finally:
            subprocess.run([*enter, "iptables", "-t", "mangle", "-D", *_rule(queue)], check=True)
    finally:
        os.killpg(reader.pid, signal.SIGTERM)
        reader.wait(timeout=10)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
