"""The kernel monitor's multicast groups: left for a while and joined again."""

from __future__ import annotations

import socket

import pytest

from pyflannel_runtime.netlink.monitor import (
    NETLINK_ADD_MEMBERSHIP,
    NETLINK_ROUTE,
    RTMGRP_IPV4_ROUTE,
    RTMGRP_IPV6_ROUTE,
    RTMGRP_LINK,
    RTMGRP_NEIGH,
    RTNLGRP_IPV4_ROUTE,
    RTNLGRP_IPV6_ROUTE,
    RTNLGRP_NEIGH,
    SOL_NETLINK,
    deafened,
)

NETLINK_LIST_MEMBERSHIPS = 9


def joined(sock: socket.socket) -> int:
    """The groups `sock` is in, as the mask `bind` takes (the kernel's own word)."""
    # The kernel says how long the whole mask is even where the buffer is shorter: room for all.
    return int.from_bytes(sock.getsockopt(SOL_NETLINK, NETLINK_LIST_MEMBERSHIPS, 64), "little")


def monitor(groups: int) -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
    sock.bind((0, groups))
    return sock


@pytest.mark.parametrize(
    ("number", "mask"),
    [
        (RTNLGRP_NEIGH, RTMGRP_NEIGH),
        (RTNLGRP_IPV4_ROUTE, RTMGRP_IPV4_ROUTE),
        (RTNLGRP_IPV6_ROUTE, RTMGRP_IPV6_ROUTE),
    ],
)
def test_a_group_number_names_its_bit_in_the_mask(number: int, mask: int) -> None:
    with monitor(0) as sock:
        sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, number)
        assert joined(sock) == mask


def test_deafened_leaves_only_the_groups_named_and_joins_them_again() -> None:
    groups = RTMGRP_LINK | RTMGRP_NEIGH | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE
    with monitor(groups) as sock:
        with deafened(sock, (RTNLGRP_NEIGH, RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE)):
            assert joined(sock) == RTMGRP_LINK
        assert joined(sock) == groups


def test_deafened_joins_the_groups_again_when_the_body_fails() -> None:
    with monitor(RTMGRP_LINK | RTMGRP_NEIGH) as sock:
        with pytest.raises(OSError), deafened(sock, (RTNLGRP_NEIGH,)):
            assert joined(sock) == RTMGRP_LINK
            raise OSError("the batch failed")
        assert joined(sock) == RTMGRP_LINK | RTMGRP_NEIGH


def test_deafened_leaves_a_socket_closed_meanwhile_alone() -> None:
    sock = monitor(RTMGRP_LINK | RTMGRP_NEIGH)
    with deafened(sock, (RTNLGRP_NEIGH,)):
        sock.close()
