"""pyflanneld: flanneld's startup order, lifecycle and exit codes.

flannel-io/flannel main.go: main, shutdownHandler; docs/compatibility.md, "Flags, environment
and exit codes".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from typing import Any

from pyflannel_runtime import __version__
from pyflannel_runtime.agent import address_watch, sdnotify
from pyflannel_runtime.agent.datapath import DatapathLoop
from pyflannel_runtime.agent.errors import StartupError
from pyflannel_runtime.agent.flags import FlagError, Options, parse_flags, usage, validate
from pyflannel_runtime.agent.health import HealthServer
from pyflannel_runtime.agent.lease_note import clear_note, leave_note, note_file_for
from pyflannel_runtime.agent.metrics import AgentMetrics
from pyflannel_runtime.agent.pidfile import pid_file_for, remove_pid_file, write_pid_file
from pyflannel_runtime.agent.stores import build_subnet_manager, previous_subnets
from pyflannel_runtime.agent.traffic import install_traffic_rules
from pyflannel_runtime.backend import registry
from pyflannel_runtime.backend.base import BackendError, DeviceSettings, Network, PublishesState
from pyflannel_runtime.backend.registry import BackendRuntime
from pyflannel_runtime.backend_spec import specs
from pyflannel_runtime.fsutil import os_error_text, unlink_quietly, write_atomic, write_temp
from pyflannel_runtime.memory import tune_heap
from pyflannel_runtime.netdev.kernel import select_external_interface
from pyflannel_runtime.netdev.types import ExternalInterface, InterfaceError
from pyflannel_runtime.subnet.allocation import OutOfSubnets
from pyflannel_runtime.subnet.backoff import Backoff
from pyflannel_runtime.subnet.manager import LeaseRevoked, LeaseTaken, SubnetManager
from pyflannel_runtime.subnet.watcher import LeaseScope
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import ConfigError, NetworkConfig, ip_stack
from pyflannel_runtime.wire.subnet_env import PreviousSubnets, SubnetEnv

log = logging.getLogger("pyflannel.agent")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
CONFIG_RETRY_SECONDS = 1.0  # flanneld's getConfig: how often the network config is asked for
# Advertising a new external address is retried while the store cannot be reached: after a
# random time up to a second, the bound doubling after each failure in a row up to 30 s.
MOVE_RETRY_FIRST = 1.0
MOVE_RETRY_MAX = 30.0
MOVE_ATTEMPT_SECONDS = 5.0

_BR_NETFILTER = {
    4: "/proc/sys/net/bridge/bridge-nf-call-iptables",
    6: "/proc/sys/net/bridge/bridge-nf-call-ip6tables",
}


def setup_logging(verbosity: int) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if verbosity >= 2 else logging.INFO,
        format="%(levelname).1s%(asctime)s.%(msecs)03d %(process)7d %(name)s] %(message)s",
        datefmt="%m%d %H:%M:%S",
    )


def _redacted(opts: Options) -> dict[str, object]:
    shown = asdict(opts)
    if shown.get("etcd_password"):
        shown["etcd_password"] = "<redacted>"
    return shown


def write_subnet_file(
    path: str, config: NetworkConfig, lease: Lease, mtu: int, ipmasq: bool
) -> None:
    env = SubnetEnv(
        network=config.enabled_network,
        subnet=lease.subnet if config.enable_ipv4 else None,
        ipv6_network=config.enabled_ipv6_network,
        ipv6_subnet=lease.ipv6_subnet if config.enable_ipv6 else None,
        mtu=mtu,
        ipmasq=ipmasq,
    )
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
        write_atomic(path, env.render().encode(), 0o644)
    except OSError as err:
        raise StartupError(f"Failed to write subnet file: {path}: {os_error_text(err)}") from None


def check_subnet_file(path: str) -> None:
    """Fail before anything changes when subnet.env could not be written: flanneld finds out
    only after the lease is taken and the datapath set up (and then runs on, never ready)."""
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    except OSError as err:
        raise StartupError(f"Failed to write subnet file: {os_error_text(err, 'mkdir')}") from None
    try:
        kind = stat.S_IFMT(os.stat(path).st_mode)
    except OSError:
        kind = stat.S_IFREG  # absent (or unreadable, which the probe below reports)
    if kind == stat.S_IFDIR:
        raise StartupError(f"Failed to write subnet file: open {path}: is a directory")
    if kind != stat.S_IFREG:
        # The rename would replace it, e.g. /dev/null.
        raise StartupError(f"Failed to write subnet file: {path} is not a regular file")
    try:
        unlink_quietly(write_temp(path, b"", 0o644))
    except OSError as err:
        raise StartupError(
            f"Failed to write subnet file: open {path}: {os_error_text(err)}"
        ) from None


def no_lease_note(err: Exception) -> str:
    text = f"this node holds no lease: failed to acquire lease: {err}"
    if isinstance(err, OutOfSubnets):
        text += (
            " (every subnet between the network's SubnetMin and SubnetMax is leased; the agent "
            "exits, and its supervisor restarts it to take a subnet once one is released)"
        )
    return text


def renumbered_note(previous: PreviousSubnets, lease: Lease) -> str | None:
    """What to tell when the node holds other subnets than subnet.env named; None when it
    holds the same (or there was no subnet.env)."""
    pairs = [(previous.subnet, lease.subnet), (previous.ipv6_subnet, lease.ipv6_subnet)]
    changed = [(old, new) for old, new in pairs if old is not None and old != new]
    if not changed:
        return None
    olds = ", ".join(str(old) for old, _ in changed)
    news = ", ".join(str(new) for _, new in changed)
    return (
        f"this node's subnet changed from {olds} (its previous subnet.env) to {news} when the "
        f"agent started: the previous one was held by another node or did not fit the network "
        f"config; pods addressed from {olds} are unreachable until they are recreated"
    )


@contextlib.contextmanager
def startup_step(*errors: type[Exception], prefix: str = "") -> Iterator[None]:
    """A startup step whose `errors` end the agent: flanneld logs `prefix` and the error and
    exits 1."""
    try:
        yield
    except errors as err:
        raise StartupError(f"{prefix}{err}") from err


def resolve_backend(config: NetworkConfig) -> tuple[BackendRuntime, tuple[bool, bool]]:
    """The backend and the IP families (ipv4, ipv6) the network config asks for, with its
    options checked before anything is created or deleted: flannel finds a bad option only
    after it has replaced the existing device."""
    with startup_step(ConfigError):
        stack = ip_stack(config)
    with startup_step(ConfigError, prefix="Error fetching backend: "):
        spec = registry.get(config.backend_type)
    with startup_step(ConfigError, prefix="Error registering network: "):
        specs.validate(config)
    return spec, stack


class Agent:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._health: HealthServer | None = None
        self._metrics: AgentMetrics | None = None
        self._pid_file: str | None = None  # written once the subnet file's directory is known
        self._pick: Callable[[], ExternalInterface] | None = None  # the interface selection

    def _on_signal(self, signum: int) -> None:
        log.info("shutdownHandler sent cancel signal... (%s)", signal.Signals(signum).name)
        self._stop.set()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            # A second signal takes the default action, as with flanneld.
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_DFL)

    async def _get_config(self, sm: SubnetManager) -> NetworkConfig | None:
        """The network config, asked for until it comes: the agent's first request to the
        datastore. flanneld asks every second; here each wait is drawn from [0, 2 s] (full
        jitter, a second on average), so that agents started together while the datastore
        cannot be reached (a restart storm) do not ask together."""
        backoff = Backoff(2 * CONFIG_RETRY_SECONDS, 2 * CONFIG_RETRY_SECONDS)
        while not self._stop.is_set():
            try:
                return await sm.get_network_config()
            except Exception as err:
                log.error("Couldn't fetch network config: %s", err)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=backoff.next_delay())
        return None

    def _check_br_netfilter(self, config: NetworkConfig) -> None:
        if config.enable_nftables:
            return
        for version, enabled in ((4, config.enable_ipv4), (6, config.enable_ipv6)):
            path = _BR_NETFILTER[version]
            if enabled and not os.path.exists(path):
                raise StartupError(
                    f"Failed to check br_netfilter: stat {path}: no such file or directory"
                )

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            return await self._run()
        except StartupError as err:
            log.error("%s", err)
            return EXIT_FAILURE
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self._health is not None:
                await self._health.stop()
            if self._pid_file is not None:
                remove_pid_file(self._pid_file, os.getpid())

    def _note(self, message: str | None, *, problem: bool = True) -> None:
        """Leave `pyflannel status` a note on the lease beside the subnet file (None: none)."""
        path = note_file_for(self.opts.subnet_file)
        try:
            if message is None:
                clear_note(path)
            else:
                leave_note(path, message, problem=problem)
        except OSError as err:
            log.warning("Failed to write %s: %s", path, os_error_text(err))

    def _write_pid_file(self, path: str) -> None:
        try:
            write_pid_file(path, os.getpid())
        except OSError as err:
            raise StartupError(f"Failed to write pid file: {path}: {os_error_text(err)}") from None
        self._pid_file = path

    async def _run(self) -> int:
        opts = self.opts
        check_subnet_file(opts.subnet_file)
        self._write_pid_file(pid_file_for(opts.subnet_file))
        # Read once, before this run rewrites it: etcd re-acquisition and old-rule cleanup.
        previous = previous_subnets(opts.subnet_file)
        try:
            sm = await build_subnet_manager(opts, previous)
        except Exception as err:
            raise StartupError(f"Failed to create SubnetManager: {err}") from err
        try:
            return await self._run_with(sm, previous)
        finally:
            await sm.close()

    async def _run_with(self, sm: SubnetManager, previous: PreviousSubnets) -> int:
        opts = self.opts
        if opts.healthz_port > 0:
            self._health = HealthServer(opts.healthz_ip, opts.healthz_port)
            if opts.metrics:
                self._serve_metrics(self._health, sm)
            await self._health.start()
        config = await self._get_config(sm)
        if config is None:
            return EXIT_OK
        if self._metrics is not None:
            self._metrics.state.backend = config.backend_type
            self._metrics.state.config = config
        spec, stack = resolve_backend(config)
        self._check_br_netfilter(config)
        ext = await self._choose_interface(sm, stack)
        network = await self._register(sm, spec, config, ext, previous)
        return await self._supervise(sm, config, network, ext)

    def _serve_metrics(self, health: HealthServer, sm: SubnetManager) -> None:
        metrics = self._metrics = AgentMetrics()
        metrics.state.ready = lambda: health.ready
        metrics.state.store = sm.stats
        health.routes["/metrics"] = metrics.answer

    async def _choose_interface(
        self, sm: SubnetManager, stack: tuple[bool, bool]
    ) -> ExternalInterface:
        """The external interface from the flags, preferring the public IPs the store kept for
        this node over the flags' (flanneld's order)."""
        opts = self.opts
        try:
            stored_ip, stored_ipv6 = await sm.get_stored_public_ip()
        except Exception as err:
            log.warning("could not read the stored public IP: %s", err)
            stored_ip, stored_ipv6 = "", ""

        def pick() -> ExternalInterface:
            return select_external_interface(
                list(opts.iface),
                list(opts.iface_regex),
                opts.iface_can_reach,
                stored_ip or opts.public_ip,
                stored_ipv6 or opts.public_ipv6,
                *stack,
            )

        self._pick = pick
        with startup_step(InterfaceError):
            return await asyncio.to_thread(pick)

    async def _register(
        self,
        sm: SubnetManager,
        spec: BackendRuntime,
        config: NetworkConfig,
        ext: ExternalInterface,
        previous: PreviousSubnets,
    ) -> Network:
        """The lease and the datapath for it, the traffic rules and subnet.env; then ready."""
        opts = self.opts

        async def acquire(attrs: LeaseAttrs) -> Lease:
            try:
                return await sm.acquire_lease(attrs)
            except Exception as err:
                self._note(no_lease_note(err))
                raise BackendError(f"failed to acquire lease: {err}") from err

        registering = startup_step(
            BackendError, ConfigError, OSError, ValueError, prefix="Error registering network: "
        )
        with registering:
            settings = DeviceSettings(vxlan_tx_checksum_offload=opts.vxlan_tx_checksum_offload)
            backend = spec.create(None, settings)
            stored_macs = await sm.get_stored_mac_addresses()
            network = await backend.register_network(config, ext, acquire, stored_macs)
        lease = network.lease
        self._note(renumbered_note(previous, lease), problem=False)

        rules = await install_traffic_rules(opts, config, lease, previous)
        self._tasks += rules.keepers
        if self._metrics is not None:
            self._metrics.state.traffic = rules.manager
            self._metrics.state.network = network

        write_subnet_file(opts.subnet_file, config, lease, network.mtu, opts.ip_masq)
        if self._health is not None:
            self._health.backend = config.backend_type
            if isinstance(network, PublishesState):
                self._health.datapath = network.published
            self._health.ready = True
        log.info("Wrote subnet file to %s", opts.subnet_file)
        log.info("Running backend.")
        return network

    async def _supervise(
        self, sm: SubnetManager, config: NetworkConfig, network: Network, ext: ExternalInterface
    ) -> int:
        """Keep the datapath in step with the leases, the own lease renewed and advertised at
        the node's external address until a signal (exit 0), a revoked lease (0: the
        supervisor restarts the agent to re-acquire), a new address the datapath cannot take
        in place (0: likewise, to build it there) or a failure (1)."""
        opts = self.opts
        scope = LeaseScope.of(config, check_lengths=not opts.kube_subnet_mgr)
        metrics = self._metrics
        observe = None if metrics is None else metrics.event_to_kernel.observe
        loop = DatapathLoop(sm, network, scope, opts.reconcile_interval, observe)
        if metrics is not None:
            metrics.state.leases = loop.watcher
        datapath = asyncio.create_task(loop.run(), name="datapath")
        sdnotify.notify("READY=1")

        complete = asyncio.create_task(sm.complete_lease(network.lease), name="complete-lease")
        stop = asyncio.create_task(self._stop.wait(), name="stop")
        follow = self._follow(ext)
        self._tasks += [datapath, complete, stop]
        watched = {datapath, complete, stop, follow}
        while not stop.done():
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if follow in done:
                watched.discard(follow)
                if (moved := _moved_to(follow)) is not None:
                    renewing = complete in watched
                    if renewing:  # the renewals write the old address: none while it moves
                        watched.discard(complete)
                        complete.cancel()
                        await asyncio.gather(complete, return_exceptions=True)
                    # The datapath first: peers send to the new address once the lease says so.
                    in_place = await network.move(moved)
                    outcome = await self._move(sm, network, ext, moved)
                    if outcome == EXIT_FAILURE:
                        return outcome
                    if outcome == EXIT_OK:
                        break  # a signal came meanwhile
                    if not in_place:
                        log.info("Restarting to build the datapath on the new address")
                        break
                    ext = moved
                    if renewing:
                        complete = asyncio.create_task(
                            sm.complete_lease(network.lease), name="complete-lease"
                        )
                        self._tasks.append(complete)
                        watched.add(complete)
                follow = self._follow(ext)
                watched.add(follow)
            if datapath in done:
                log.error("Lease watch ended: %s", datapath.exception() or "no more events")
                return EXIT_FAILURE
            if complete in done:
                error = complete.exception()
                if isinstance(error, LeaseTaken):
                    self._note(str(error))
                if isinstance(error, LeaseRevoked):
                    break  # flanneld exits 0 and its supervisor restarts it to re-acquire
                if error is not None:
                    log.error("Lease handling failed: %s", error)
                    return EXIT_FAILURE
                watched.discard(complete)  # kube mode: the condition is set; run on
        await network.close()
        log.info("Exiting cleanly...")
        return EXIT_OK

    def _follow(self, ext: ExternalInterface) -> asyncio.Task[ExternalInterface]:
        assert self._pick is not None
        task = asyncio.create_task(address_watch.next_move(ext, self._pick), name="address")
        self._tasks.append(task)
        return task

    async def _move(
        self, sm: SubnetManager, network: Network, ext: ExternalInterface, moved: ExternalInterface
    ) -> int | None:
        """Advertise the own lease at the new address, retrying while the store cannot be
        reached (the node's connections to it went with the old address); an exit status when
        the agent is to end instead (a signal, or the lease is another node's now)."""
        log.info(
            "%s: advertising it on %s", address_watch.describe(ext, moved), network.lease.key()
        )
        attrs = address_watch.moved_attrs(network.lease.attrs, moved)
        backoff = Backoff(MOVE_RETRY_FIRST, MOVE_RETRY_MAX)
        while not self._stop.is_set():
            try:
                # A request on a connection made from the old address waits for an answer
                # that cannot come: cut it short, and the next attempt connects afresh.
                network.lease = await asyncio.wait_for(
                    sm.move_lease(network.lease, attrs), MOVE_ATTEMPT_SECONDS
                )
                return None
            except LeaseTaken as err:
                log.error("%s", err)
                self._note(str(err))
                return EXIT_FAILURE
            except Exception as err:
                why = str(err) or f"no answer in {MOVE_ATTEMPT_SECONDS:g}s"
                delay = backoff.next_delay()
                log.warning(
                    "Cannot advertise the new address yet (retrying in %.1fs): %s", delay, why
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=delay)
        return EXIT_OK


def _moved_to(follow: asyncio.Task[ExternalInterface]) -> ExternalInterface | None:
    """Where the external address moved, or None when watching it failed (logged: the agent
    runs on without following it)."""
    error = follow.exception()
    if error is not None:
        log.error("Stopped following the external address: %s", error)
        return None
    return follow.result()


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    program = os.path.basename(sys.argv[0]) or "pyflanneld"
    try:
        opts = parse_flags(args)
    except FlagError as err:
        sys.stderr.write(f"{err}\n{usage(program)}")
        return EXIT_USAGE
    if opts.help:
        sys.stderr.write(usage(program))
        return EXIT_OK
    if opts.version:
        sys.stderr.write(f"{__version__}\n")
        return EXIT_OK
    setup_logging(opts.v)
    log.info("CLI flags config: %s", _redacted(opts))
    try:
        validate(opts)
    except FlagError as err:
        log.error("%s", err)
        return EXIT_FAILURE
    tune_heap()
    return asyncio.run(Agent(opts).run())


if __name__ == "__main__":
    sys.exit(main())
