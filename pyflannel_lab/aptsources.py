"""The Debian mirror this machine already uses, read from its apt sources.

apt reads ``/etc/apt/sources.list`` and then ``sources.list.d/*.list`` (one-line format) and
``*.sources`` (deb822 format) in name order; other file names there are ignored, as apt does.
The first ``deb`` entry for the wanted suite with the ``main`` component is the mirror. A
release the machine has no entry for (Debian 13 hosts built on a Debian 12 machine) comes from
the mirror of the machine's own release (``VERSION_CODENAME`` in os-release): a Debian mirror
serves every release.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pyflannel_lab.errors import LabError

MIRROR_ENV = "PYFLANNEL_LAB_MIRROR"


@dataclass(frozen=True)
class Source:
    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]


def parse_one_line(text: str) -> Iterator[Source]:
    """``deb [opt=val ...] uri suite component...`` lines."""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        rest = rest.strip()
        if rest.startswith("["):
            _, _, rest = rest.partition("]")
        fields = rest.split()
        if len(fields) < 2:
            continue
        yield Source((kind,), (fields[0],), (fields[1],), tuple(fields[2:]))


def parse_deb822(text: str) -> Iterator[Source]:
    """Stanzas of ``Field: value`` lines (values may continue on indented lines)."""
    for stanza in _stanzas(text):
        if stanza.get("enabled", "yes").strip().lower() == "no":
            continue
        yield Source(
            *(
                tuple(stanza.get(name, "").split())
                for name in ("types", "uris", "suites", "components")
            )
        )


def _stanzas(text: str) -> Iterator[dict[str, str]]:
    fields: dict[str, str] = {}
    last = ""
    for raw in [*text.splitlines(), ""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if fields:
                yield fields
            fields, last = {}, ""
        elif raw[0] in " \t" and last:
            fields[last] += " " + raw.strip()
        elif ":" in raw:
            name, _, value = raw.partition(":")
            last = name.strip().lower()
            fields[last] = value.strip()


def pick_mirror(sources: Iterable[Source], suite: str) -> str | None:
    for source in sources:
        if "deb" in source.types and suite in source.suites and "main" in source.components:
            for uri in source.uris:
                if uri.split(":", 1)[0] in ("http", "https", "file"):
                    return uri
    return None


def read_sources(apt_dir: Path = Path("/etc/apt")) -> Iterator[Source]:
    main = apt_dir / "sources.list"
    if main.is_file():
        yield from parse_one_line(main.read_text())
    parts = apt_dir / "sources.list.d"
    for path in sorted(parts.iterdir()) if parts.is_dir() else ():
        if path.suffix == ".list":
            yield from parse_one_line(path.read_text())
        elif path.suffix == ".sources":
            yield from parse_deb822(path.read_text())


def own_release(os_release: Path) -> str | None:
    """The machine's release codename (``bookworm``), from os-release's key=value lines."""
    try:
        text = os_release.read_text()
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "VERSION_CODENAME":
            return value.strip().strip("\"'") or None
    return None


def debian_mirror(
    suite: str, apt_dir: Path = Path("/etc/apt"), os_release: Path = Path("/etc/os-release")
) -> str:
    """``$PYFLANNEL_LAB_MIRROR`` if set, else the machine's own mirror for ``suite``, else the
    one for the machine's own release."""
    override = os.environ.get(MIRROR_ENV)
    if override:
        return override
    sources = list(read_sources(apt_dir))
    mirror = pick_mirror(sources, suite)
    own = own_release(os_release)
    if mirror is None and own is not None:
        mirror = pick_mirror(sources, own)
    if mirror is None:
        raise LabError(
            f"no Debian mirror for {suite!r} (component main) in {apt_dir}/sources.list or "
            f"{apt_dir}/sources.list.d/; set {MIRROR_ENV} to one"
        )
    return mirror
