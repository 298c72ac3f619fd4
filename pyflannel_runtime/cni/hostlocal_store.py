"""host-local's disk store, read-only: who holds which pod address, and how many are left.

host-local (containernetworking/plugins, ``plugins/ipam/host-local/backend/disk/backend.go``)
keeps one file per allocated address in ``<dataDir>/<network name>/``, named by the address as
Go prints it and holding ``<container ID>\\r\\n<ifname>`` (older versions: the container ID
alone), next to its ``lock`` and ``last_reserved_ip.<range>`` files. Releasing an address
goes through host-local's own DEL, under its own lock; nothing here writes to the store.

The range a flannel delegate gets is a bare ``subnet`` (flannel's ``doCmdAdd``), so host-local
fills in the rest (``allocator/range.go``, ``Canonicalize``): the gateway is the subnet's first
address and never handed out, and the range ends before the IPv4 broadcast address (IPv6 has
none). The CNI plugin's STATUS counts free addresses with this, so only ``_socket`` is imported.
"""

from __future__ import annotations

import os
from _socket import AF_INET, AF_INET6, inet_ntop, inet_pton

from pyflannel_runtime.wire.subnet_env import _Record

DEFAULT_DATA_DIR = "/var/lib/cni/networks"
LINE_BREAK = "\r\n"
# A container ID and an interface name; anything larger is not host-local's
MAX_ENTRY_SIZE = 4096
_BITS = {4: 32, 6: 128}
_FAMILY = {4: AF_INET, 6: AF_INET6}


class Allocation(_Record):
    """One address file: the address (as its file is named), and who holds it.

    ``ifname`` is empty for a file written before host-local recorded interface names.
    """

    __slots__ = ("address", "container_id", "ifname", "version")
    address: str
    version: int
    container_id: str
    ifname: str

    def __init__(self, address: str, version: int, container_id: str, ifname: str) -> None:
        self._init(address=address, version=version, container_id=container_id, ifname=ifname)


class AddressPool:
    """The addresses host-local hands out from one flannel subnet: ``first`` to ``last``."""

    __slots__ = ("first", "last", "subnet", "version")

    def __init__(self, subnet: str, version: int, first: int, last: int) -> None:
        self.subnet, self.version, self.first, self.last = subnet, version, first, last

    @property
    def capacity(self) -> int:
        return max(0, self.last - self.first + 1)

    def contains(self, address: str) -> bool:
        parsed = parse_address(address)
        return (
            parsed is not None
            and parsed[0] == self.version
            and self.first <= parsed[1] <= self.last
        )


def store_dir(data_dir: str | None, network: str) -> str:
    """host-local's ``disk.New``: the directory of one network's allocations."""
    return os.path.join(data_dir or DEFAULT_DATA_DIR, network)


def parse_address(text: str) -> tuple[int, int] | None:
    """(IP version, the address as an integer), or None when ``text`` is no IP address."""
    version = 6 if ":" in text else 4
    try:
        packed = inet_pton(_FAMILY[version], text)
    except (OSError, ValueError):
        return None
    return version, int.from_bytes(packed, "big")


def address_text(version: int, value: int) -> str:
    return inet_ntop(_FAMILY[version], value.to_bytes(_BITS[version] // 8, "big"))


def address_pool(subnet: str) -> AddressPool:
    """The pool of a masked subnet in CIDR form, e.g. ``10.244.3.0/29``: 5 addresses, .2-.6.

    host-local refuses a subnet too small to allocate from (an IPv4 /31, an IPv6 /127): its
    pool is empty here.
    """
    address, _, length = subnet.partition("/")
    parsed = parse_address(address)
    if parsed is None or not length.isdigit() or int(length) > _BITS[parsed[0]]:
        raise ValueError(f"invalid CIDR address: {subnet}")
    version, network = parsed
    size = 1 << (_BITS[version] - int(length))
    if size < 4:
        return AddressPool(subnet, version, network + 1, network)
    last = network + size - (2 if version == 4 else 1)
    return AddressPool(subnet, version, network + 2, last)


def parse_entry(name: str, content: bytes) -> Allocation | None:
    """One file of the store; None for host-local's other files (``lock``, ``last_reserved_ip.0``)."""
    parsed = parse_address(name)
    if parsed is None:
        return None
    text = content.decode("utf-8", errors="replace").strip()
    container_id, _, ifname = text.partition(LINE_BREAK)
    return Allocation(name, parsed[0], container_id, ifname.strip())


def read_allocations(directory: str) -> tuple[list[Allocation], list[str]]:
    """Every allocation in one network's directory, ordered by address, and what could not be
    read. A missing directory holds no allocation."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return [], []
    except OSError as err:
        return [], [f"cannot list {directory}: {err.strerror or err}"]
    allocations: list[Allocation] = []
    problems: list[str] = []
    for name in names:
        if parse_address(name) is None:
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as handle:
                content = handle.read(MAX_ENTRY_SIZE + 1)
        except FileNotFoundError:
            continue  # released meanwhile
        except OSError as err:
            problems.append(f"cannot read {path}: {err.strerror or err}")
            continue
        if len(content) > MAX_ENTRY_SIZE:
            problems.append(f"{path} is larger than {MAX_ENTRY_SIZE} bytes: not host-local's")
            continue
        allocation = parse_entry(name, content)
        if allocation is not None:
            allocations.append(allocation)
    allocations.sort(key=_address_order)
    return allocations, problems


def count_in_pool(directory: str, pool: AddressPool) -> int:
    """How many addresses of ``pool`` host-local has handed out, from the file names alone."""
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    return sum(1 for name in names if pool.contains(name))


def _address_order(allocation: Allocation) -> tuple[int, int]:
    parsed = parse_address(allocation.address)
    assert parsed is not None
    return parsed
