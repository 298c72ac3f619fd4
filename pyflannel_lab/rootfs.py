"""The lab hosts' image: a Debian rootfs built with debootstrap, imported into podman.

What a minimal bare-metal node has, plus the Debian packages the roles install: lab hosts have
no route to the archive, so those are baked in and the roles' package tasks find them present
(installed, not started, as a package cache would leave them). An admin user with
passwordless sudo is the account Ansible logs in as; its key is the lab's, mounted at boot.
Each host makes its own SSH host keys and machine id on first boot, as an installed node would.

One image per Debian release (``RELEASES``; a lab may mix them, host by host), each tagged with
its release and a hash of its recipe (release, packages, added files and the code of
``build_rootfs``), built at most once per recipe and shared by every caller: a lock per release
serializes concurrent builders, and whoever comes second finds the image already there. The
cache's own lock is held only to import and prune, so a build of one release does not hold up
labs that use another.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import shutil
import subprocess
import time
from pathlib import Path
from typing import TextIO

from pyflannel_lab import paths
from pyflannel_lab.aptsources import debian_mirror
from pyflannel_lab.errors import LabError
from pyflannel_lab.locking import locked
from pyflannel_lab.podman import Podman

log = logging.getLogger(__name__)

# Debian 12 and 13: the releases the collection supports on its hosts.
RELEASES = ("bookworm", "trixie")
DEFAULT_RELEASE = "bookworm"
ADMIN_USER = "pyflannel"
IMAGE_NAME = "localhost/pyflannel-lab-host"
RECIPE_LABEL = "io.pyflannel.lab.recipe"
RELEASE_LABEL = "io.pyflannel.lab.release"
IMPORTED_LABEL = "io.pyflannel.lab.imported"  # ns since the epoch: the listing has whole seconds
KEEP_IMAGES = 3  # per release

PACKAGES = (
    # a minimal node
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "sudo",
    "python3",
    "python3-venv",
    "python3-apt",  # Ansible's apt module
    "iproute2",
    "iptables",
    "nftables",
    "iputils-ping",
    "procps",
    "ca-certificates",
    # what the roles install
    "etcd-server",
    "etcd-client",
    "containernetworking-plugins",
    "python3-pip",  # installs the runtime into the agent's virtualenv (pip --python)
)

# Installed but not running until a role configures them (Debian enables them on install).
DISABLED_UNITS = ("etcd.service",)
# Boot-time work a container has no use for: reaping e2scrub's LVM snapshots (no LVM here).
MASKED_UNITS = ("e2scrub_reap.service",)

FILES: dict[str, tuple[int, str]] = {
    # debootstrap copies the build machine's; the lab adds its hosts' names at boot.
    "/etc/hosts": (0o644, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"),
    "/etc/resolv.conf": (
        0o644,
        "# No name server: lab hosts have no route out; names are in /etc/hosts.\n",
    ),
    f"/etc/sudoers.d/{ADMIN_USER}": (0o440, f"{ADMIN_USER} ALL=(ALL) NOPASSWD:ALL\n"),
    "/etc/ssh/sshd_config.d/lab-host-key.conf": (0o644, "HostKey /etc/ssh/ssh_host_ed25519_key\n"),
    "/etc/systemd/system/ssh-host-keys.service": (
        0o644,
        "[Unit]\n"
        "Description=Generate this host's SSH host keys on first boot\n"
        "Before=ssh.service\n"
        "ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        # One ed25519 key, not `ssh-keygen -A`'s three: an RSA key costs up to a second of CPU
        # on each new host, and the lab's client takes ed25519.
        "ExecStart=/usr/bin/ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key\n"
        "\n"
        "[Install]\n"
        "RequiredBy=ssh.service\n",
    ),
}


def recipe_key(release: str = DEFAULT_RELEASE) -> str:
    recipe = {
        "suite": release,
        "packages": sorted(PACKAGES),
        "disabled": sorted(DISABLED_UNITS),
        "masked": sorted(MASKED_UNITS),
        "files": FILES,
        "builder": inspect.getsource(build_rootfs),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def image_tag(release: str = DEFAULT_RELEASE) -> str:
    return f"{IMAGE_NAME}:{release}-{recipe_key(release)[:16]}"


def check_release(release: str) -> str:
    if release not in RELEASES:
        raise LabError(f"no lab image for Debian {release!r}; the lab has {', '.join(RELEASES)}")
    return release


def ensure_image(cache_dir: Path | None = None, release: str = DEFAULT_RELEASE) -> str:
    """The image for the release's current recipe, built and imported first if the cache lacks
    it."""
    check_release(release)
    cache = cache_dir or paths.cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    podman = Podman(cache)
    tag = image_tag(release)
    with locked(cache / f".build-{release}.lock"):
        with locked(cache):
            podman.configure()
            if podman.image_exists(tag):
                return tag
        key = recipe_key(release)
        rootfs = cache / f"rootfs-{key[:16]}"
        try:
            _remove_tree(rootfs)
            started = time.monotonic()
            build_rootfs(rootfs, release, debian_mirror(release), cache)
            log.info("built the %s rootfs in %.1f s", release, time.monotonic() - started)
            started = time.monotonic()
            with locked(cache):
                _import(podman, rootfs, tag, release, key)
                log.info("imported %s in %.1f s", tag, time.monotonic() - started)
                _prune_images(podman, release)
        finally:
            _remove_tree(rootfs)
    return tag


def build_rootfs(target: Path, release: str, mirror: str, cache: Path) -> None:
    """debootstrap ``release`` into ``target``; the downloaded packages stay in ``cache`` for the
    next recipe (their file names carry their versions, so releases share the directory)."""
    log_file, debs = cache / f"build-{release}.log", cache / "debs"
    debs.mkdir(exist_ok=True)
    log.info("building the %s rootfs from %s (log: %s)", release, mirror, log_file)
    with log_file.open("w") as out:
        _logged(
            out,
            "debootstrap",
            "--variant=minbase",
            "--components=main",
            f"--cache-dir={debs}",
            f"--include={','.join(PACKAGES)}",
            release,
            str(target),
            mirror,
        )
        for path, (mode, text) in FILES.items():
            dest = target / path.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
            dest.chmod(mode)
        home = f"/home/{ADMIN_USER}"
        for argv in (
            ("useradd", "--create-home", "--shell", "/bin/bash", "--user-group", ADMIN_USER),
            # A password that matches nothing, not a locked account (which sshd would refuse).
            ("usermod", "--password", "*", ADMIN_USER),
            ("install", "-d", "-m", "0700", "-o", ADMIN_USER, "-g", ADMIN_USER, f"{home}/.ssh"),
            ("systemctl", "enable", "ssh-host-keys.service"),
            ("systemctl", "disable", *DISABLED_UNITS),
            ("systemctl", "mask", *MASKED_UNITS),
            ("apt-get", "clean"),
        ):
            _logged(out, "chroot", str(target), *argv)
    for key in (target / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    # Empty, with no copy for systemd to fall back to: each container gets its own id at boot.
    (target / "etc/machine-id").write_text("")
    dbus_id = target / "var/lib/dbus/machine-id"
    dbus_id.unlink(missing_ok=True)
    dbus_id.symlink_to("/etc/machine-id")


def _import(podman: Podman, rootfs: Path, tag: str, release: str, key: str) -> None:
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", str(rootfs), "-c", "."],
        stdout=subprocess.PIPE,
    )
    assert tar.stdout is not None
    try:
        podman.run(
            "import",
            "--change",
            'CMD ["/sbin/init"]',
            "--change",
            f"LABEL {RECIPE_LABEL}={key}",
            "--change",
            f"LABEL {RELEASE_LABEL}={release}",
            "--change",
            f"LABEL {IMPORTED_LABEL}={time.time_ns()}",
            "-",
            tag,
            stdin=tar.stdout.fileno(),
        )
    finally:
        tar.stdout.close()
        if tar.wait() != 0:
            raise LabError(f"tar of {rootfs} failed")


def _prune_images(podman: Podman, release: str) -> None:
    """Keeps the release's newest few: checkouts at other versions may share this cache. An image
    from before images had a release label is a bookworm one."""
    listing = podman.run("images", "--format", "json", "--filter", f"label={RECIPE_LABEL}")
    images = sorted(
        (
            image
            for image in json.loads(listing.stdout or "[]")
            if (image.get("Labels") or {}).get(RELEASE_LABEL, DEFAULT_RELEASE) == release
        ),
        key=lambda image: int((image.get("Labels") or {}).get(IMPORTED_LABEL, 0)),
        reverse=True,
    )
    for image in images[KEEP_IMAGES:]:
        # One still used by a lab's containers stays until a later build.
        podman.run("rmi", image["Id"], check=False)


def _logged(out: TextIO, *argv: str) -> None:
    out.flush()
    result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise LabError(f"{' '.join(argv)} failed with status {result.returncode}; see {out.name}")


def _remove_tree(path: Path) -> None:
    """Remove a rootfs, first unmounting what a failed debootstrap may have left mounted in it."""
    if not path.exists():
        return
    prefix = str(path.resolve()) + "/"
    mounts = [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(prefix)
    ]
    for mount_point in sorted(mounts, reverse=True):
        subprocess.run(["umount", "--lazy", mount_point], check=False)
    shutil.rmtree(path)
