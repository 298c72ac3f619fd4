"""Boot, restart and tear down the lab hosts.

Each host is a podman container running systemd as PID 1 (``--systemd=always``, privileged
with a private cgroup namespace, so systemd in it leaves the host's cgroup mounts alone) with
``--network none``: the lab gives its netns an ``eth0`` on the lab's own bridge instead of a
podman network, so netavark never touches the root namespace. A host answers when
``systemctl is-system-running`` says running (or degraded) over SSH as the admin user.

A state file records everything ``up`` created, written as it goes, so ``down`` works from
another process and after a failed ``up``; the image cache is left in place.

A running lab can grow (``add``, or ``up`` with more hosts) and shrink (``remove``), and a host
can be powered off and on again (``stop``, ``start``), as machines of a real cluster are; the
inventory follows. Each host runs one Debian release (``rootfs.RELEASES``), so a lab can be a
fleet of mixed releases, as clusters being upgraded are.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

from pydantic import BaseModel

from pyflannel_lab import inventory, rootns, underlay
from pyflannel_lab import outside as stand_in
from pyflannel_lab.errors import LabError
from pyflannel_lab.locking import locked, locked_dir
from pyflannel_lab.paths import LabPaths, cache_dir
from pyflannel_lab.podman import Podman
from pyflannel_lab.rootfs import ADMIN_USER, DEFAULT_RELEASE, check_release, ensure_image
from pyflannel_lab.ssh import SSH_FAILED, SshTarget, check_control_dir, generate_key
from pyflannel_runtime.fsutil import write_atomic

log = logging.getLogger(__name__)

DEFAULT_HOSTS = 3
# Serializes picking an underlay range and taking it, across every lab on this machine.
UNDERLAY_LOCK = Path("/run/lock/pyflannel-lab-underlay.lock")
READY_TIMEOUT = 300.0
STOP_TIMEOUT = "10"
LAB_LABEL = "io.pyflannel.lab"  # its value: the lab's token
TOOLS = ("podman", "runc", "conmon", "debootstrap", "ssh", "ssh-keygen", "ip", "nsenter", "nft")


class Host(BaseModel):
    name: str
    address: IPv4Address
    veth: str  # its root-namespace end, on the bridge
    container: str = ""  # podman's ID, once created
    release: str = DEFAULT_RELEASE  # its Debian release
    image: str = ""  # the image it boots from, once known


class LabState(BaseModel):
    token: str
    cache_dir: Path
    network: IPv4Network
    bridge: str
    user: str
    ssh_key: Path
    control_dir: Path
    inventory: Path
    root_before: rootns.RootSnapshot
    hosts: list[Host]
    # An address outside the cluster for the verify role's pods to reach (None: not yet up).
    outside: stand_in.Outside | None = None
    etcd_members: int = 1  # the first hosts form the etcd group

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise LabError(f"no host {name!r} in the lab (hosts: {', '.join(self.names())})")

    def names(self) -> list[str]:
        return [host.name for host in self.hosts]

    def ssh(self, host: Host) -> SshTarget:
        return SshTarget(host.address, self.user, self.ssh_key, self.control_dir)

    def podman(self) -> Podman:
        return Podman(self.cache_dir)


# --- the commands -------------------------------------------------------------------------------


def host_releases(releases: Sequence[str], hosts: int) -> list[str]:
    """Each host's release, in host order: none (bookworm) or one for every host, or one per
    host."""
    checked = [check_release(release) for release in releases] or [DEFAULT_RELEASE]
    if len(checked) == 1:
        return checked * hosts
    if hosts != len(checked):
        raise LabError(f"{len(checked)} releases for {hosts} hosts: give one, or one per host")
    return checked


def up(
    hosts: int = DEFAULT_HOSTS,
    paths: LabPaths | None = None,
    etcd_members: int = 1,
    releases: Sequence[str] = (),
) -> LabState:
    """Boot ``hosts`` hosts and write the inventory, the first ``etcd_members`` of them in the
    etcd group; host N runs ``releases[N-1]`` (default: bookworm, or one release for all). A lab
    already up is reused, and grown when it has fewer hosts."""
    if not 1 <= hosts <= underlay.MAX_HOSTS:
        raise LabError(f"--hosts must be 1 to {underlay.MAX_HOSTS}, not {hosts}")
    if not 1 <= etcd_members <= hosts:
        raise LabError(f"--etcd-members must be 1 to {hosts} (the hosts), not {etcd_members}")
    wanted = host_releases(releases, hosts)
    paths = paths or LabPaths.default()
    check_control_dir(paths.control_dir)
    with locked_dir(paths.state_dir):
        current = load(paths)
        if current is not None:
            return _reuse(current, wanted, paths, etcd_members)
        _require_tools()
        images = _images(wanted)
        try:
            state = _create(paths, images, wanted, etcd_members)
            _boot(state, paths)
        except BaseException:
            _clean_up_failed_start(paths)
            raise
        return state


def down(paths: LabPaths | None = None) -> bool:
    """Remove everything ``up`` made except the image cache; False if no lab was up."""
    paths = paths or LabPaths.default()
    with locked_dir(paths.state_dir):
        state = load(paths)
        if state is None:
            shutil.rmtree(paths.state_dir)
            return False
        problems = _teardown(state, paths)
    if problems:
        raise LabError("teardown incomplete: " + "; ".join(problems))
    return True


def add(
    count: int = 1, paths: LabPaths | None = None, release: str = DEFAULT_RELEASE
) -> list[Host]:
    """Boot ``count`` more hosts of ``release`` into the running lab (the next free numbers);
    the inventory gets them."""
    paths = paths or LabPaths.default()
    with locked_dir(paths.state_dir):
        state = load(paths)
        if state is None:
            raise LabError("no lab is up")
        if not 1 <= count <= underlay.MAX_HOSTS - len(state.hosts):
            raise LabError(
                f"the lab has {len(state.hosts)} hosts: 1 to "
                f"{underlay.MAX_HOSTS - len(state.hosts)} more fit, not {count}"
            )
        _require_all_running(state)
        return _grow(state, paths, [release] * count)


def remove_host(name: str, paths: LabPaths | None = None) -> Host:
    """Throw one host away (container and NIC) and drop it from the record and the inventory."""
    with _locked_host(name, paths) as (state, host, paths):
        state.ssh(host).close_master()
        state.podman().run("rm", "--force", "--ignore", "--time", "0", host.container)
        underlay.delete_link(host.veth)
        state.hosts.remove(host)
        _save(state, paths)
        inventory.write(state.inventory, _inventory_text(state))
        return host


def stop_host(name: str, paths: LabPaths | None = None) -> Host:
    """Power one host off, as a power cut does (no orderly shutdown); address and record stay."""
    with _locked_host(name, paths) as (state, host, _):
        _power_off(state, host, "0")
        return host


def start_host(name: str, paths: LabPaths | None = None) -> Host:
    """Power a stopped host on again, with the same NIC; returns once it answers."""
    with _locked_host(name, paths) as (state, host, _):
        _power_on(state, host)
        return host


def load(paths: LabPaths | None = None) -> LabState | None:
    paths = paths or LabPaths.default()
    try:
        return LabState.model_validate_json(paths.state_file.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError as err:
        raise LabError(f"{paths.state_file} is not a lab's record: {err}") from None


def restart_host(name: str, paths: LabPaths | None = None) -> Host:
    """Reboot one host: stop and start its container, give the new netns the same NIC back."""
    with _locked_host(name, paths) as (state, host, _):
        _power_off(state, host, STOP_TIMEOUT)
        _power_on(state, host)
        return host


@contextlib.contextmanager
def _locked_host(name: str, paths: LabPaths | None) -> Iterator[tuple[LabState, Host, LabPaths]]:
    """The lab's record and one of its hosts, with the lab locked meanwhile."""
    paths = paths or LabPaths.default()
    with locked_dir(paths.state_dir):
        state = load(paths)
        if state is None:
            raise LabError("no lab is up")
        yield state, state.host(name), paths


def _power_off(state: LabState, host: Host, grace: str) -> None:
    """Stop the host's container, killing it after ``grace`` seconds."""
    state.ssh(host).close_master()
    state.podman().run("stop", "--time", grace, host.container)


def _power_on(state: LabState, host: Host) -> None:
    state.podman().run("start", host.container)
    _attach(state, host)
    _wait_ready(state, [host])
    _check_hosts(state, [host])


def container_states(state: LabState, hosts: Sequence[Host] = ()) -> dict[str, str]:
    """podman's view of each host's container (``running``, ``exited``, ``missing``)."""
    states = {}
    for host in hosts or state.hosts:
        result = state.podman().run(
            "container", "inspect", "--format", "{{.State.Status}}", host.container, check=False
        )
        states[host.name] = result.stdout.strip() if result.returncode == 0 else "missing"
    return states


# --- up -----------------------------------------------------------------------------------------


def _require_tools() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise LabError(f"missing tools: {', '.join(missing)} (./scripts/bootstrap installs them)")


def _images(releases: Sequence[str]) -> dict[str, str]:
    """The image of each release, built first where the cache lacks it."""
    return {release: ensure_image(release=release) for release in dict.fromkeys(releases)}


def _create(
    paths: LabPaths, images: dict[str, str], releases: Sequence[str], etcd_members: int
) -> LabState:
    """The key pair, the record, the bridge: the state file is saved before the bridge exists."""
    paths.control_dir.mkdir(mode=0o700)
    public_key = generate_key(paths.ssh_key)
    write_atomic(paths.authorized_keys, public_key.encode(), 0o644)
    token = secrets.token_hex(3)
    root_before = rootns.snapshot()
    with locked(UNDERLAY_LOCK):
        slot = underlay.pick_slot()
        state = LabState(
            token=token,
            cache_dir=cache_dir(),
            network=slot,
            bridge=f"plab{token}",
            user=ADMIN_USER,
            ssh_key=paths.ssh_key,
            control_dir=paths.control_dir,
            inventory=paths.inventory,
            root_before=root_before,
            hosts=[
                _new_host(slot, token, n, release, images[release])
                for n, release in enumerate(releases, start=1)
            ],
            etcd_members=etcd_members,
        )
        _save(state, paths)
        underlay.create_bridge(state.bridge, slot)
    log.info("underlay %s on bridge %s", slot, state.bridge)
    return state


def _new_host(slot: IPv4Network, token: str, n: int, release: str, image: str) -> Host:
    return Host(
        name=f"node{n}",
        address=underlay.host_address(slot, n),
        veth=f"plab{token}n{n}",
        release=release,
        image=image,
    )


def _grow(state: LabState, paths: LabPaths, releases: Sequence[str]) -> list[Host]:
    """A host of each release after the highest number in use, booted and put in the
    inventory."""
    images = _images(releases)
    last = max((underlay.host_number(state.network, h.address) for h in state.hosts), default=0)
    new = [
        _new_host(state.network, state.token, last + n, release, images[release])
        for n, release in enumerate(releases, start=1)
    ]
    state.hosts.extend(new)
    _save(state, paths)
    _boot(state, paths, new)
    return new


def _boot(state: LabState, paths: LabPaths, booting: Sequence[Host] = ()) -> None:
    """Start ``booting`` (every host when empty), then write the inventory of all of them."""
    booting = booting or state.hosts
    started = time.monotonic()
    add_hosts = [f"--add-host={host.name}:{host.address}" for host in state.hosts]
    for host in booting:
        host.container = (
            state.podman()
            .run(
                "run",
                "--detach",
                f"--name=plab-{state.token}-{host.name}",
                f"--hostname={host.name}",
                f"--label={LAB_LABEL}={state.token}",
                "--network=none",
                "--systemd=always",
                "--privileged",
                "--cgroupns=private",
                *add_hosts,
                f"--mount=type=bind,source={paths.authorized_keys},"
                f"destination=/home/{state.user}/.ssh/authorized_keys,readonly",
                host.image,
            )
            .stdout.strip()
        )
        _save(state, paths)
        _attach(state, host)
    _wait_ready(state, booting)
    log.info("%d hosts answer over SSH after %.1f s", len(booting), time.monotonic() - started)
    _check_hosts(state, booting)
    _start_outside(state, paths)
    inventory.write(state.inventory, _inventory_text(state))


def _start_outside(state: LabState, paths: LabPaths) -> None:
    planned = state.outside or stand_in.plan(state.token, state.network)
    state.outside = stand_in.start(planned, state.bridge, state.network)
    _save(state, paths)


def _attach(state: LabState, host: Host) -> None:
    pid = state.podman().container_pid(host.container)
    underlay.attach_host(state.bridge, host.veth, pid, host.address, state.network)


def _wait_ready(state: LabState, hosts: Sequence[Host]) -> None:
    for host in hosts:
        target = state.ssh(host)
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            result = target.run("systemctl is-system-running --wait", timeout=READY_TIMEOUT)
            if result.returncode != SSH_FAILED:
                break
            _require_running(state, host)
            if time.monotonic() > deadline:
                raise LabError(
                    f"{host.name}: no SSH at {host.address} after {READY_TIMEOUT:.0f} s: "
                    f"{result.stderr.strip()}"
                )
            time.sleep(0.25)
        status = result.stdout.strip()
        if status == "degraded":
            failed = target.run("systemctl --failed --no-legend --plain").stdout.strip()
            log.warning("%s: systemd is degraded; failed units: %s", host.name, failed)
        elif status != "running":
            raise LabError(f"{host.name}: systemd is {status or 'unreachable'}: {result.stderr}")


def _require_running(state: LabState, host: Host) -> None:
    """Fails at once, with the console's last words, when a host's container has stopped."""
    if container_states(state, [host])[host.name] != "running":
        console = state.podman().run("logs", "--tail", "20", host.container, check=False)
        raise LabError(f"{host.name}'s container stopped while booting:\n{console.stdout}")


def _check_hosts(state: LabState, hosts: Sequence[Host]) -> None:
    """The kernel features the backends need, and the underlay between every pair of hosts."""
    for host in hosts:
        peers = " ".join(str(peer.address) for peer in state.hosts if peer != host)
        result = state.ssh(host).run("sudo sh -s", stdin=_CHECK_SCRIPT.format(peers=peers))
        if result.returncode != 0:
            raise LabError(
                f"{host.name} lacks what the lab needs: "
                + "; ".join((result.stdout + result.stderr).strip().splitlines())
            )


_CHECK_SCRIPT = """\
fail=0
if ip link add plabcheck0 type vxlan id 4242 dstport 4789 dev eth0 nolearning; then
    ip link del plabcheck0
else echo "cannot create a vxlan device"; fail=1; fi
if ip tuntap add dev plabcheck1 mode tun; then
    ip link del plabcheck1
else echo "cannot create a TUN device"; fail=1; fi
if nft add table inet plabcheck; then
    nft delete table inet plabcheck
else echo "nftables does not work"; fail=1; fi
if ! printf '*nat\\n:POSTROUTING ACCEPT [0:0]\\n-A POSTROUTING -s 10.244.0.0/16 -j MASQUERADE\\nCOMMIT\\n' \\
    | iptables-restore --test; then echo "iptables does not work"; fail=1; fi
for peer in {peers}; do
    ping -c 1 -W 5 -q "$peer" >/dev/null || {{ echo "no reply from $peer over eth0"; fail=1; }}
done
exit $fail
"""


def _clean_up_failed_start(paths: LabPaths) -> None:
    """Undo what the record (saved at each step) says was made; the key pair goes anyway."""
    recorded = load(paths)
    problems = _teardown(recorded, paths) if recorded else []
    shutil.rmtree(paths.state_dir, ignore_errors=True)
    for problem in problems:
        log.error("cleaning up after the failed start: %s", problem)


def _inventory_text(state: LabState) -> str:
    return inventory.render(
        [(host.name, host.address) for host in state.hosts],
        state.user,
        state.ssh_key,
        state.control_dir,
        state.outside.target if state.outside else "",
        state.etcd_members,
    )


def _reuse(
    state: LabState, releases: Sequence[str], paths: LabPaths, etcd_members: int
) -> LabState:
    hosts = len(releases)
    if len(state.hosts) > hosts:
        raise LabError(
            f"a lab with {len(state.hosts)} hosts is already up; "
            "run `hosts remove NAME` or `hosts down` first"
        )
    running = [host.release for host in state.hosts]
    if running != list(releases[: len(running)]):
        raise LabError(f"a lab of {', '.join(running)} hosts is already up; run `hosts down` first")
    if state.etcd_members != etcd_members:
        raise LabError(
            f"a lab with {state.etcd_members} etcd members is already up; run `hosts down` first"
        )
    _require_all_running(state)
    # A lab whose links were removed under it (a killed run, a reboot) cannot be reached again.
    lost = [
        link
        for link in (state.bridge, *(h.veth for h in state.hosts))
        if not underlay.link_exists(link)
    ]
    if lost:
        raise LabError(
            f"the lab is up but its links {', '.join(lost)} are gone; run `hosts down` first"
        )
    _wait_ready(state, state.hosts)
    _start_outside(state, paths)
    inventory.write(state.inventory, _inventory_text(state))
    log.info("the lab is already up; reusing it")
    if len(state.hosts) < hosts:
        _grow(state, paths, releases[len(state.hosts) :])
    return state


def _require_all_running(state: LabState) -> None:
    down_hosts = [name for name, status in container_states(state).items() if status != "running"]
    if down_hosts:
        raise LabError(
            f"the lab is up but {', '.join(down_hosts)} not running; "
            "run `hosts start NAME` or `hosts down` first"
        )


def _save(state: LabState, paths: LabPaths) -> None:
    write_atomic(paths.state_file, state.model_dump_json(indent=2).encode(), 0o600)


# --- down ---------------------------------------------------------------------------------------


def _teardown(state: LabState, paths: LabPaths) -> list[str]:
    """Every step is tried even when an earlier one fails; returns what failed."""
    problems: list[str] = []

    def attempt(what: str, step: Callable[[], object]) -> None:
        try:
            step()
        except (LabError, OSError, subprocess.SubprocessError) as err:
            problems.append(f"{what}: {err}")

    for host in state.hosts:
        attempt(f"closing the SSH connection to {host.name}", state.ssh(host).close_master)
    attempt("removing the containers", lambda: _remove_containers(state))
    if state.outside is not None:
        attempt("removing the outside stand-in", functools.partial(stand_in.stop, state.outside))
    for link in [*(host.veth for host in state.hosts), state.bridge]:
        attempt(f"deleting {link}", functools.partial(underlay.delete_link, link))
    attempt("restoring the root namespace", lambda: _restore_root(state.root_before))
    attempt("removing the inventory", lambda: inventory.remove(state.inventory))
    attempt("removing the state directory", lambda: shutil.rmtree(paths.state_dir))
    return problems


def _remove_containers(state: LabState) -> None:
    """The recorded ones, and any the lab's label finds (created, but not yet recorded)."""
    podman = state.podman()
    labelled = podman.run(
        "ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={LAB_LABEL}={state.token}"
    )
    containers = {host.container for host in state.hosts if host.container}
    containers.update(labelled.stdout.split())
    if containers:
        # The hosts are thrown away with everything on them: no orderly shutdown to wait for.
        podman.run("rm", "--force", "--ignore", "--time", "0", *sorted(containers))


def _restore_root(before: rootns.RootSnapshot) -> None:
    for change in rootns.restore(before):
        log.warning("root namespace: %s", change)
