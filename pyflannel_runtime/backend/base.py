"""What the agent needs from a backend (flannel's backend.Backend / backend.Network)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.backend_spec.tx_offload import AUTO_VERDICT_FILE, DEFAULT_MODE
from pyflannel_runtime.netdev.types import ExternalInterface
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs, LeaseEvent
from pyflannel_runtime.wire.netconf import NetworkConfig

if TYPE_CHECKING:
    from pyflannel_runtime.backend.drift import KernelSurvey

AcquireLease = Callable[[LeaseAttrs], Awaitable[Lease]]


@dataclass(frozen=True)
class DeviceSettings:
    """The agent's own settings for the devices a backend creates: pyflanneld flags, not
    net-conf options (flanneld nodes in the same cluster know nothing of them)."""

    vxlan_tx_checksum_offload: str = DEFAULT_MODE  # tx_offload.MODES
    auto_verdict_file: str = AUTO_VERDICT_FILE


class BackendError(PyflannelError):
    """Registering or running the network failed; str(err) is flannel's message."""


class Network(Protocol):
    lease: Lease
    mtu: int

    async def handle_events(self, events: Sequence[LeaseEvent]) -> None:
        """Program added peers and withdraw removed ones (the own lease is never among them)."""

    async def reconcile(self, peers: Sequence[Lease]) -> int:
        """Make the kernel hold exactly these peers' entries; returns the netlink writes made."""

    async def survey(self) -> KernelSurvey | None:
        """What the next recheck reads from the kernel, read while lease events go on being
        programmed; None when it needs nothing read ahead."""

    async def recheck(self, peers: Sequence[Lease], survey: KernelSurvey | None = None) -> int:
        """The periodic check against drift: a reconcile (on `survey`, when given), or less
        where the datapath knows the kernel is as it left it; returns the writes made."""

    async def close(self) -> None:
        """Stop watchers. The datapath stays in place, as flannel leaves it on shutdown."""

    def programmed_peers(self) -> int:
        """How many peers the datapath carries traffic to now, as far as it knows."""

    def repairs(self) -> Mapping[str, int]:
        """What the datapath put back after someone else deleted or changed it, by kind
        (route, neighbour, fdb, device): each kind it can repair, from 0."""


@runtime_checkable
class CountsDrops(Protocol):
    """A network whose datapath forwards in userspace (the udp forwarder) and counts what it
    drops."""

    def counters(self) -> Mapping[str, int]:
        """What was dropped since the datapath started, by reason."""


@runtime_checkable
class PublishesState(Protocol):
    """A network whose datapath keeps state outside the kernel (the udp forwarder's routes)
    and shows it on the agent's /statusz."""

    def published(self) -> Mapping[str, object]:
        """JSON-ready state, merged into /statusz."""


class Backend(Protocol):
    backend_type: str

    async def register_network(
        self,
        config: NetworkConfig,
        ext: ExternalInterface,
        acquire: AcquireLease,
        stored_macs: tuple[str, str] = ("", ""),
    ) -> Network:
        """Create the devices, acquire the lease and configure the devices from it."""
