"""The diagnostics bundle's archive: collectors run one after the other, each within its time
and size limits, every file redacted, all of it in one ``.tar.gz`` with a manifest.

A collector returns files by their path in the bundle. One that fails, or does not answer in
time, is recorded with its error (in ``manifest.json`` and ``errors.txt``) and the next one
runs; one that does not apply on this node (nft on an iptables node) is recorded as skipped.
A file over its collector's size limit keeps its first lines (its last, for a log) up to the
limit, whole lines only, so that a cut never leaves part of a secret; then every file goes
through `ops.redact` with the node's known secrets. The bundle is complete when no collector
failed.

`collect` runs the collectors; `manifest`, `errors_text` and `archive` are pure; `write_bundle`
writes the archive atomically with mode 0600 (it holds the node's internals).
"""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyflannel_runtime import PyflannelError, __version__
from pyflannel_runtime.fsutil import write_atomic
from pyflannel_runtime.ops.redact import redact

BUNDLE_FORMAT = 1
ARCHIVE_MODE = 0o600
MEMBER_MODE = 0o600
DIRECTORY_MODE = 0o700
DEFAULT_TIMEOUT = 30.0
DEFAULT_LIMIT = 256 * 1024  # bytes per file: a file of the node's, a command's output
LARGE_LIMIT = 16 << 20  # a report of the whole cluster (status, leases) or of the kernel
MANIFEST = "manifest.json"
ERRORS = "errors.txt"


class CollectorFailed(PyflannelError):
    """What a collector could not collect, and why; the bundle records it."""


class Skipped(PyflannelError):
    """The collector does not apply on this node (not a failure); ``str()`` says why."""


Files = Mapping[str, bytes]


@dataclass(frozen=True)
class Collector:
    name: str  # short and unique: "journal"
    source: str  # the command it runs or what it reads, for the manifest
    run: Callable[[], Files]  # the files it collected, by their path in the bundle
    timeout: float = DEFAULT_TIMEOUT
    limit: int = DEFAULT_LIMIT  # bytes per file, after redaction
    keep_tail: bool = False  # over the limit, keep the last lines (a log) instead of the first


@dataclass(frozen=True)
class FileRecord:
    path: str
    size: int
    truncated: bool = False  # cut to the collector's limit
    redacted: int = 0  # secrets replaced


@dataclass(frozen=True)
class Record:
    """What one collector did: ``ok``, ``skipped`` (with why, in `error`), ``failed`` or
    ``timeout``."""

    name: str
    source: str
    status: str
    seconds: float
    files: tuple[FileRecord, ...] = ()
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "timeout")


@dataclass(frozen=True)
class Bundle:
    records: tuple[Record, ...]
    files: dict[str, bytes] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return not any(record.failed for record in self.records)


# --- limits and redaction (pure) --------------------------------------------------------------


def cut_lines(data: bytes, limit: int, keep_tail: bool) -> bytes:
    """At most `limit` bytes of whole lines: the first ones, or the last with `keep_tail`."""
    if len(data) <= limit:
        return data
    if keep_tail:
        kept = data[len(data) - limit :]
        newline = kept.find(b"\n")
        return kept[newline + 1 :] if newline >= 0 else b""
    kept = data[:limit]
    newline = kept.rfind(b"\n")
    return kept[: newline + 1] if newline >= 0 else b""


@dataclass(frozen=True)
class Cleaned:
    data: bytes
    truncated: bool
    redacted: int


def clean(data: bytes, limit: int, keep_tail: bool, secrets: Sequence[str]) -> Cleaned:
    """A collected file as the bundle holds it: cut to whole lines within `limit`, redacted
    (then cut again, should the marks have made it longer)."""
    cut = cut_lines(data, limit, keep_tail)
    redacted = redact(cut.decode("utf-8", errors="surrogateescape"), secrets)
    text = redacted.text.encode("utf-8", errors="surrogateescape")
    final = cut_lines(text, limit, keep_tail)
    return Cleaned(final, cut != data or final != text, redacted.count)


def member_path(path: str) -> str:
    """A collector's file name as a safe relative path: no leading slash, no empty, ``.`` or
    ``..`` parts (a CNI state file is named by its container ID)."""
    parts = [part for part in path.split("/") if part not in ("", ".", "..")]
    if not parts:
        raise ValueError(f"not a file name: {path!r}")
    return "/".join(parts)


# --- running the collectors -------------------------------------------------------------------


def _call(collector: Collector) -> Files:
    """The collector's files, or its exception; TimeoutError past its timeout (the thread is
    left behind: it can only end, and the process ends when the bundle is written)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["files"] = collector.run()
        except BaseException as err:  # handed to the caller as it is
            outcome["error"] = err

    thread = threading.Thread(target=target, name=f"bundle-{collector.name}", daemon=True)
    thread.start()
    thread.join(collector.timeout)
    if thread.is_alive():
        raise TimeoutError(f"no result in {collector.timeout:g}s")
    if "error" in outcome:
        raise outcome["error"]
    files: Files = outcome["files"]
    return files


def run_collector(
    collector: Collector, secrets: Sequence[str], clock: Callable[[], float] = time.monotonic
) -> tuple[Record, dict[str, bytes]]:
    start = clock()
    files: dict[str, bytes] = {}
    records: list[FileRecord] = []
    status, error = "ok", None
    try:
        collected = _call(collector)
    except Skipped as why:
        status, error = "skipped", str(why)
    except TimeoutError as err:
        status, error = "timeout", str(err)
    except Exception as err:  # a collector's bug is its own failure, not the bundle's
        status, error = "failed", str(err) or type(err).__name__
    else:
        for path, data in collected.items():
            name = member_path(path)
            cleaned = clean(data, collector.limit, collector.keep_tail, secrets)
            files[name] = cleaned.data
            records.append(FileRecord(name, len(cleaned.data), cleaned.truncated, cleaned.redacted))
    if error is not None:  # one line, as errors.txt lists it
        lines = redact(error, secrets).text.splitlines()
        error = "; ".join(line.strip() for line in lines if line.strip())
    seconds = round(clock() - start, 3)
    return Record(collector.name, collector.source, status, seconds, tuple(records), error), files


def collect(
    collectors: Iterable[Collector],
    secrets: Sequence[str],
    clock: Callable[[], float] = time.monotonic,
    progress: Callable[[Record], None] | None = None,
) -> Bundle:
    """Every collector in turn; a file two collectors name is the first one's."""
    records: list[Record] = []
    files: dict[str, bytes] = {}
    for collector in collectors:
        record, collected = run_collector(collector, secrets, clock)
        for path, data in collected.items():
            files.setdefault(path, data)
        records.append(record)
        if progress is not None:
            progress(record)
    return Bundle(tuple(records), files)


# --- the manifest and the archive (pure) ------------------------------------------------------


def utc_text(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def manifest(bundle: Bundle, node: str, created: float) -> dict[str, Any]:
    """What the bundle holds: each collector's source, status, error and files."""
    return {
        "format": BUNDLE_FORMAT,
        "node": node,
        "created": utc_text(created),
        "pyflannel": __version__,
        "complete": bundle.complete,
        "collectors": [
            {
                "name": record.name,
                "source": record.source,
                "status": record.status,
                "error": record.error,
                "seconds": record.seconds,
                "files": [
                    {
                        "path": f.path,
                        "bytes": f.size,
                        "truncated": f.truncated,
                        "redacted": f.redacted,
                    }
                    for f in record.files
                ],
            }
            for record in bundle.records
        ],
    }


def errors_text(records: Iterable[Record]) -> str:
    """One line per collector that failed or was skipped, or a line saying none did."""
    lines = [
        f"{record.name} ({record.source}): {record.status}: {record.error}"
        for record in records
        if record.status != "ok"
    ]
    return "\n".join(lines or ["every collector succeeded"]) + "\n"


def archive(bundle: Bundle, stem: str, node: str, created: float) -> bytes:
    """The bundle as a gzipped tar: everything under the directory `stem`, the manifest and
    errors.txt first, files mode 0600 and directories 0700, owned by root."""
    members = {
        MANIFEST: (json.dumps(manifest(bundle, node, created), indent=2) + "\n").encode(),
        ERRORS: errors_text(bundle.records).encode(),
        **{path: data for path, data in bundle.files.items() if path not in (MANIFEST, ERRORS)},
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        directories: set[str] = set()
        for path, data in members.items():
            parts = path.split("/")
            for depth in range(len(parts)):
                directory = "/".join([stem, *parts[:depth]])
                if directory not in directories:
                    directories.add(directory)
                    tar.addfile(_info(directory, tarfile.DIRTYPE, DIRECTORY_MODE, 0, created))
            info = _info(f"{stem}/{path}", tarfile.REGTYPE, MEMBER_MODE, len(data), created)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _info(name: str, kind: bytes, mode: int, size: int, created: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.mtime = kind, mode, size, int(created)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def write_bundle(path: str, data: bytes) -> None:
    """The archive at `path`, whole or not at all, mode 0600 whatever the umask."""
    write_atomic(path, data, ARCHIVE_MODE)
