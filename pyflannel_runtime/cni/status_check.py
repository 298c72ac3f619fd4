"""CNI STATUS for the flannel plugin: would an ADD on this node get an address that routes?

STATUS fails with code 50 ("plugin not available") when subnet.env is missing, unreadable or
incomplete (the agent has not written it yet), or when the node's pod subnet has no free
address left; and with code 51 ("not available, existing containers may have limited
connectivity") when subnet.env names another subnet than the agent's current lease: the node's
subnet changed, so new pods would get addresses that route nowhere, and the pods already
addressed from that subnet are cut off too.

The agent's current lease, per backend, as the kernel holds it:

* vxlan: ``flannel.<VNI>`` carries the lease's network address as a /32, and
  ``flannel-v6.<VNI>`` as a /128 (flannel's ``backend/vxlan/vxlan.go``, ``RegisterNetwork``;
  ``pyflannel_runtime/backend/vxlan/vxlan.py``). The agent sets it when it acquires the lease, before
  it writes subnet.env, so an agent that re-leased and then failed leaves exactly this mismatch.
* udp: ``flannel0`` carries the lease's network address as a /32
  (``pyflannel_runtime/backend/udp/udp.py``), set at the same point.
* host-gw: the agent creates no device and no kernel object names its own subnet (its routes
  are the peers'), so subnet.env, written by the agent as soon as it holds the lease, is the
  only record of it and is taken as it is.

That costs one ``if_nameindex`` and, only when a flannel device exists, one rtnetlink address
dump over a raw socket: nothing is imported beyond ``_socket``.
"""

from __future__ import annotations

import sys
from _socket import AF_INET, AF_INET6, SOCK_RAW, if_nameindex, inet_ntop, socket

from pyflannel_runtime.cni.skel import CniError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import BinaryIO

    from pyflannel_runtime.cni.plugin_config import FlannelNetConf
    from pyflannel_runtime.wire.subnet_env import CniSubnetEnv

ERR_NOT_AVAILABLE = 50
ERR_LIMITED_CONNECTIVITY = 51

_AF_NETLINK = 16
_NETLINK_ROUTE = 0
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_RTM_NEWADDR = 20
_RTM_GETADDR = 22
_NLM_F_REQUEST_DUMP = 0x301
_IFA_ADDRESS = 1
_IFA_LOCAL = 2
_RT_SCOPE_UNIVERSE = 0
_VERSIONS = {AF_INET: 4, AF_INET6: 6}


def is_flannel_device(name: str) -> bool:
    """flannel's own devices: ``flannel.<VNI>``, ``flannel-v6.<VNI>`` and ``flannel<N>`` (udp)."""
    for prefix in ("flannel-v6.", "flannel.", "flannel"):
        if name.startswith(prefix):
            number = name[len(prefix) :]
            return number.isascii() and number.isdigit()
    return False


def _u16(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset : offset + 2], sys.byteorder)


def _u32(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset : offset + 4], sys.byteorder)


def parse_address_dump(data: bytes) -> tuple[list[tuple[int, int, str]], bool]:
    """RTM_NEWADDR messages as (ifindex, IP version, address) with global scope, and whether
    the dump is done."""
    found: list[tuple[int, int, str]] = []
    offset = 0
    while offset + 16 <= len(data):
        length, kind = _u32(data, offset), _u16(data, offset + 4)
        if length < 16:
            break
        if kind == _NLMSG_DONE:
            return found, True
        if kind == _NLMSG_ERROR:
            raise OSError(
                -int.from_bytes(data[offset + 16 : offset + 20], sys.byteorder, signed=True),
                "address dump failed",
            )
        if kind == _RTM_NEWADDR and length >= 24:
            family, scope = data[offset + 16], data[offset + 19]
            index = _u32(data, offset + 20)
            attrs = _attributes(data, offset + 24, offset + length)
            address = attrs.get(_IFA_LOCAL) or attrs.get(_IFA_ADDRESS)
            if family in _VERSIONS and scope == _RT_SCOPE_UNIVERSE and address:
                found.append((index, _VERSIONS[family], inet_ntop(family, address)))
        offset += (length + 3) & ~3
    return found, False


def _attributes(data: bytes, start: int, end: int) -> dict[int, bytes]:
    attrs: dict[int, bytes] = {}
    while start + 4 <= end:
        length, kind = _u16(data, start), _u16(data, start + 2)
        if length < 4:
            break
        attrs[kind] = data[start + 4 : start + length]
        start += (length + 3) & ~3
    return attrs


def flannel_device_addresses() -> list[tuple[str, int, str]]:
    """(device, IP version, address) for every global address on a flannel device here."""
    devices = {index: name for index, name in if_nameindex() if is_flannel_device(name)}
    if not devices:
        return []
    request = (24).to_bytes(4, sys.byteorder) + _RTM_GETADDR.to_bytes(2, sys.byteorder)
    request += _NLM_F_REQUEST_DUMP.to_bytes(2, sys.byteorder) + (1).to_bytes(4, sys.byteorder)
    request += bytes(12)  # the sender's port id, then an all-families ifaddrmsg
    found: list[tuple[str, int, str]] = []
    sock = socket(_AF_NETLINK, SOCK_RAW, _NETLINK_ROUTE)
    try:
        sock.send(request)
        done = False
        while not done:
            addresses, done = parse_address_dump(sock.recv(1 << 16))
            found += [(devices[i], v, a) for i, v, a in addresses if i in devices]
    finally:
        sock.close()
    return found


def lease_mismatch(env: CniSubnetEnv, addresses: list[tuple[str, int, str]]) -> str | None:
    """Which flannel device contradicts subnet.env, or None.

    A family is in line when one of its flannel devices carries the network address of
    subnet.env's subnet (a device left over from an earlier VNI may carry another).
    """
    for version, subnet in ((4, env.subnet), (6, env.ipv6_subnet)):
        carried = [(device, address) for device, v, address in addresses if v == version]
        wanted = subnet.partition("/")[0] if subnet is not None else None
        if carried and all(address != wanted for _, address in carried):
            device, address = carried[0]
            return f"{device} carries {address}, the agent's current IPv{version} lease"
    return None


def _pools_exhausted(conf: FlannelNetConf, network: str, env: CniSubnetEnv) -> str | None:
    from pyflannel_runtime.cni.hostlocal_store import address_pool, count_in_pool, store_dir

    ipam = conf.ipam or {}
    if ipam.get("type", "host-local") != "host-local":
        return None  # another IPAM plugin keeps its own books
    data_dir = ipam.get("dataDir")
    directory = store_dir(data_dir if isinstance(data_dir, str) else None, network)
    for subnet in (env.subnet, env.ipv6_subnet):
        if subnet is None:
            continue
        pool = address_pool(subnet)
        used = count_in_pool(directory, pool)
        if used >= pool.capacity:
            return (
                f"no free pod address in {subnet}: {used} of {pool.capacity} are allocated"
                f" in {directory}; `pyflannel ipam` shows which look leaked"
            )
    return None


def cmd_status(environ: Mapping[str, str], stdin: bytes, stderr: BinaryIO) -> None:
    """Return when an ADD can succeed; raise CniError 50 or 51 saying why not."""
    from pyflannel_runtime.cni.commands import load_subnet_env
    from pyflannel_runtime.cni.forward import forward_to_delegate
    from pyflannel_runtime.cni.plugin_config import NetConfError, parse_netconf

    try:
        conf = parse_netconf(stdin)
    except NetConfError as err:
        raise CniError(ERR_NOT_AVAILABLE, f"failed to load flannel netconf file: {err}") from None
    try:
        env = load_subnet_env(conf.subnet_file)
    except ValueError as err:
        raise CniError(
            ERR_NOT_AVAILABLE,
            f"flannel is not ready on this node: failed to load flannel 'subnet.env' file: {err}."
            " The flannel agent writes it once it holds a lease: check its log.",
        ) from None
    try:
        mismatch = lease_mismatch(env, flannel_device_addresses())
    except OSError as err:  # cannot tell: subnet.env is all there is, as with host-gw
        stderr.write(f"cannot read the flannel devices' addresses: {err}\n".encode())
        mismatch = None
    if mismatch is not None:
        subnets = ", ".join(s for s in (env.subnet, env.ipv6_subnet) if s is not None)
        raise CniError(
            ERR_LIMITED_CONNECTIVITY,
            f"{conf.subnet_file} names subnet {subnets}, but {mismatch}: the node's subnet"
            " changed and pods would get addresses that route nowhere. Check the flannel"
            " agent's log; it rewrites subnet.env once it runs with its lease.",
        )
    exhausted = _pools_exhausted(conf, conf.name, env)
    if exhausted is not None:
        raise CniError(ERR_NOT_AVAILABLE, exhausted)
    try:
        forward_to_delegate("STATUS", conf, env, environ, {})
    except CniError as err:
        if err.code != 0:
            raise  # the delegate's own STATUS error
        raise CniError(ERR_NOT_AVAILABLE, f"delegate STATUS: {err.msg}") from None
