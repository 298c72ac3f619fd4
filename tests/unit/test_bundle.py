"""The diagnostics bundle's archive (pyflannel_runtime/ops/bundle.py): its layout and modes,
the manifest and errors.txt, limits that cut at whole lines, redaction of every file, a failing,
skipped or hanging part recorded while the rest is written; and the node's pure parts
(pyflannel_runtime/ops/bundle_node.py): flannel's lines of iptables-save, a kubeconfig's
credentials."""

from __future__ import annotations

import base64
import io
import ipaddress
import json
import os
import re
import stat
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.agent.flags import Options
from pyflannel_runtime.ops.bundle import (
    ARCHIVE_MODE,
    DEFAULT_LIMIT,
    Bundle,
    Collector,
    CollectorFailed,
    Files,
    Skipped,
    archive,
    collect,
    cut_lines,
    errors_text,
    manifest,
    member_path,
    write_bundle,
)
from pyflannel_runtime.ops.bundle_node import (
    NodeSettings,
    flannel_iptables,
    node_collectors,
    run_bounded,
)
from pyflannel_runtime.ops.flannel_kernel import plain, route_to_network
from pyflannel_runtime.ops.node_secrets import known_secrets, kubeconfig_secrets, pem_lines
from pyflannel_runtime.ops.redact import MARK

CREATED = 1_700_000_000.0  # 2023-11-14T22:13:20Z
STEM = "pyflannel-bundle-node1-20231114T221320Z"


def ticking() -> Iterator[float]:
    now = 100.0
    while True:
        yield now
        now += 0.25


@pytest.fixture
def released() -> Iterator[threading.Event]:
    """An event a hanging collector waits for, set when the test ends."""
    event = threading.Event()
    yield event
    event.set()


def members(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return tar.getmembers()


def read_member(data: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        handle = tar.extractfile(f"{STEM}/{name}")
        assert handle is not None
        return handle.read()


def sample(released: threading.Event) -> list[Collector]:
    def failing() -> Files:
        raise CollectorFailed("journalctl -u pyflanneld exited 1: No journal files were found.")

    def skipped() -> Files:
        raise Skipped("nft is not installed")

    def hanging() -> Files:
        released.wait()
        return {"never.txt": b"late\n"}

    def buggy() -> Files:
        return {"x": b""}["y"]  # type: ignore[return-value]  # a KeyError, as a bug would raise

    return [
        Collector("status", "pyflannel status -o json", lambda: {"status.json": b'{"ok": true}\n'}),
        Collector(
            "files",
            "read the agent's files",
            lambda: {
                "files/pyflanneld.env": b"FLANNELD_ETCD_PASSWORD=hunter22\nFLANNELD_IFACE=eth0\n",
                "files/../../etc/passwd": b"root:x:0:0\n",
            },
        ),
        Collector("journal", "journalctl -u pyflanneld", failing),
        Collector("nft", "nft list table", skipped),
        Collector("slow", "a command that never ends", hanging, timeout=0.01),
        Collector("buggy", "a collector with a bug", buggy),
        Collector(
            "log",
            "a long log",
            lambda: {"log.txt": b"".join(b"line %d token=s3cr3t%d\n" % (i, i) for i in range(100))},
            limit=200,
            keep_tail=True,
        ),
    ]


def test_the_archive_holds_every_file_under_one_directory_with_exact_modes(
    released: threading.Event,
) -> None:
    clock = ticking()
    bundle = collect(sample(released), ["hunter22"], clock=lambda: next(clock))
    data = archive(bundle, STEM, "node1", CREATED)
    listed = members(data)
    names = [m.name for m in listed if m.isfile()]
    assert names == [
        f"{STEM}/manifest.json",
        f"{STEM}/errors.txt",
        f"{STEM}/status.json",
        f"{STEM}/files/pyflanneld.env",
        f"{STEM}/files/etc/passwd",
        f"{STEM}/log.txt",
    ]
    assert [m.name for m in listed if m.isdir()] == [STEM, f"{STEM}/files", f"{STEM}/files/etc"]
    assert {(m.mode, m.uid, m.gid, m.uname) for m in listed if m.isfile()} == {
        (0o600, 0, 0, "root")
    }
    assert {m.mode for m in listed if m.isdir()} == {0o700}
    assert {m.mtime for m in listed} == {int(CREATED)}
    assert read_member(data, "files/pyflanneld.env") == (
        f"FLANNELD_ETCD_PASSWORD={MARK}\nFLANNELD_IFACE=eth0\n".encode()
    )
    log = read_member(data, "log.txt").decode()
    assert len(log) <= 200 and log.endswith("line 99 token=<redacted>\n")
    assert log.startswith("line ") and "s3cr3t" not in log


def test_the_manifest_names_each_parts_source_status_and_files(released: threading.Event) -> None:
    clock = ticking()
    bundle = collect(sample(released), ["hunter22"], clock=lambda: next(clock))
    assert not bundle.complete
    found = json.loads(read_member(archive(bundle, STEM, "node1", CREATED), "manifest.json"))
    assert found == manifest(bundle, "node1", CREATED)
    assert {k: found[k] for k in ("format", "node", "created", "complete")} == {
        "format": 1, "node": "node1", "created": "2023-11-14T22:13:20Z", "complete": False,
    }  # fmt: skip
    parts = {c["name"]: c for c in found["collectors"]}
    assert {name: c["status"] for name, c in parts.items()} == {
        "status": "ok", "files": "ok", "journal": "failed", "nft": "skipped",
        "slow": "timeout", "buggy": "failed", "log": "ok",
    }  # fmt: skip
    assert parts["journal"]["source"] == "journalctl -u pyflanneld"
    assert parts["journal"]["error"] == (
        "journalctl -u pyflanneld exited 1: No journal files were found."
    )
    assert parts["slow"]["error"] == "no result in 0.01s"
    assert parts["buggy"]["error"] == "'y'"
    assert parts["status"]["seconds"] == 0.25
    env = f"FLANNELD_ETCD_PASSWORD={MARK}\nFLANNELD_IFACE=eth0\n"
    assert parts["files"]["files"] == [
        {"path": "files/pyflanneld.env", "bytes": len(env), "truncated": False, "redacted": 1},
        {"path": "files/etc/passwd", "bytes": 11, "truncated": False, "redacted": 0},
    ]
    (log,) = parts["log"]["files"]
    assert log["truncated"] is True and log["redacted"] > 0


def test_errors_txt_lists_what_is_missing_and_says_so_when_nothing_is() -> None:
    bundle = collect(
        [
            Collector("one", "cmd one", lambda: {"a": b"1"}),
            Collector("two", "cmd two", _raises(CollectorFailed("line one\nline two"))),
        ],
        [],
    )
    assert errors_text(bundle.records) == "two (cmd two): failed: line one; line two\n"
    whole = collect([Collector("one", "cmd one", lambda: {"a": b"1"})], [])
    assert whole.complete and errors_text(whole.records) == "every collector succeeded\n"


def _raises(error: Exception) -> Callable[[], Files]:
    def run() -> Files:
        raise error

    return run


def test_an_error_message_is_redacted_too() -> None:
    leaky = Collector(
        "leases", "etcd", _raises(CollectorFailed("login as flannel:pa55word failed: pa55word"))
    )
    (record,) = collect([leaky], ["pa55word"]).records
    assert record.error == f"login as flannel:{MARK} failed: {MARK}"


@given(st.binary(max_size=400), st.integers(min_value=0, max_value=500), st.booleans())
def test_a_cut_keeps_whole_lines_within_the_limit(data: bytes, limit: int, tail: bool) -> None:
    cut = cut_lines(data, limit, tail)
    assert len(cut) <= limit
    if len(data) <= limit:
        assert cut == data
    elif tail:
        assert data.endswith(cut) and (
            not cut or data[len(data) - len(cut) - 1 : -len(cut)] == b"\n"
        )
    else:
        assert data.startswith(cut) and (not cut or cut.endswith(b"\n"))


@given(st.text(max_size=60))
def test_a_member_path_stays_inside_the_bundle(path: str) -> None:
    try:
        safe = member_path(path)
    except ValueError:
        assert not [p for p in path.split("/") if p not in ("", ".", "..")]
        return
    parts = safe.split("/")
    assert not safe.startswith("/") and ".." not in parts and "." not in parts and "" not in parts


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_the_archive_is_written_whole_with_mode_0600(tmp_path: Path, umask: int) -> None:
    target = tmp_path / "b.tar.gz"
    target.write_bytes(b"old")
    target.chmod(0o644)
    old = os.umask(umask)
    try:
        write_bundle(str(target), archive(Bundle(()), STEM, "node1", CREATED))
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == ARCHIVE_MODE
    assert [p.name for p in tmp_path.iterdir()] == ["b.tar.gz"]
    assert [m.name for m in members(target.read_bytes()) if m.isfile()] == [
        f"{STEM}/manifest.json",
        f"{STEM}/errors.txt",
    ]


# --- the node's parts -------------------------------------------------------------------------

IPTABLES_SAVE = """\
# Generated by iptables-save v1.8.9 (nf_tables) on Sat Nov 29 02:00:00 2026
*mangle
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -p udp -m comment --comment "csum" -j CHECKSUM --checksum-fill
COMMIT
# Completed on Sat Nov 29 02:00:00 2026
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:FLANNEL-FWD - [0:0]
:KUBE-FORWARD - [0:0]
-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD
-A FORWARD -j KUBE-FORWARD
-A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT
-A FLANNEL-FWD -d 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:FLANNEL-POSTRTG - [0:0]
-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG
-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN
COMMIT
"""


def test_iptables_save_is_cut_to_flannels_chains_and_the_forward_policy() -> None:
    assert flannel_iptables(IPTABLES_SAVE) == (
        "*mangle\n"
        ":POSTROUTING ACCEPT [0:0]\n"
        "COMMIT\n"
        "*filter\n"
        ":FORWARD DROP [0:0]\n"
        ":FLANNEL-FWD - [0:0]\n"
        '-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD\n'
        '-A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT\n'
        '-A FLANNEL-FWD -d 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT\n'
        "COMMIT\n"
        "*nat\n"
        ":POSTROUTING ACCEPT [0:0]\n"
        ":FLANNEL-POSTRTG - [0:0]\n"
        '-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG\n'
        '-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN\n'
        "COMMIT\n"
    )
    assert flannel_iptables("*raw\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n") == ""


KEY = (
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VwBCIEIOkWz2bVqWZ8yH0cR5eQpRkzVd7ZyB2PXbJmQ0KE9s1s\n"
    "-----END PRIVATE KEY-----\n"
)


def test_a_kubeconfigs_credentials_and_the_files_it_names_are_secrets(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("file-token-0123456789\n")
    (tmp_path / "client.key").write_text(KEY)
    kubeconfig = (
        "apiVersion: v1\nkind: Config\n"
        "users:\n- name: flannel\n  user:\n"
        "    token: inline-token-abcdef\n"
        '    password: "basic-pass"\n'
        f"    client-key-data: {base64.b64encode(KEY.encode()).decode()}\n"
        "    tokenFile: token\n"
        "    client-key: client.key\n"
    )
    found = set(kubeconfig_secrets(kubeconfig, str(tmp_path)))
    body = "MC4CAQAwBQYDK2VwBCIEIOkWz2bVqWZ8yH0cR5eQpRkzVd7ZyB2PXbJmQ0KE9s1s"
    assert {
        "inline-token-abcdef",
        "basic-pass",
        "file-token-0123456789",
        body,
        KEY.strip(),
    } <= found
    assert base64.b64encode(KEY.encode()).decode() in found
    assert pem_lines(KEY) == [KEY.strip(), body]


def test_known_secrets_follow_the_agents_settings(tmp_path: Path) -> None:
    key = tmp_path / "etcd.key"
    key.write_text(KEY)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("users:\n- user:\n    token: tok-123456\n")
    opts = Options(etcd_password="pw-98765", etcd_keyfile=str(key), kubeconfig_file=str(kubeconfig))
    found = known_secrets(NodeSettings(opts, "/nonexistent"))
    assert found == sorted({"pw-98765", "tok-123456", KEY.strip(), KEY.splitlines()[1]})
    assert known_secrets(NodeSettings(Options(etcd_keyfile="/nonexistent"), "x")) == []


def test_a_command_is_bounded_in_output_and_named_when_absent() -> None:
    done = run_bounded(["seq", "1", "1000000"], limit=1000)
    assert done.cut and done.stdout.startswith(b"1\n2\n") and len(done.stdout) < 200_000
    tail = run_bounded(["seq", "1", "100000"], limit=1000, keep_tail=True)
    assert not tail.cut and tail.returncode == 0 and tail.stdout.endswith(b"99999\n100000\n")
    with pytest.raises(Skipped, match="no-such-program-here is not installed"):
        run_bounded(["no-such-program-here"])
    with pytest.raises(CollectorFailed, match=re.escape("still running after 0.2s")):
        run_bounded(["sleep", "30"], timeout=0.2)


def test_a_netlink_message_becomes_plain_json() -> None:
    dumped = {
        "attrs": [
            ["IFLA_IFNAME", "flannel.1"],
            ["UNKNOWN", {"header": {"length": 5, "type": 67}}],
            ["IFLA_AF_SPEC", {"attrs": [["AF_INET6", {"attrs": []}]]}],
            [
                "IFLA_LINKINFO",
                {
                    "attrs": [
                        ["IFLA_INFO_KIND", "vxlan"],
                        [
                            "IFLA_INFO_DATA",
                            {"attrs": [["IFLA_VXLAN_ID", 1], ["IFLA_VXLAN_PORT", 8472]]},
                        ],
                    ]
                },
            ],
            ["IFLA_STATS64", {"rx_packets": 3, "tx_dropped": 0}],
        ],
        "header": {"length": 1, "stats": object()},
        "event": "RTM_NEWLINK",
        "index": 4,
        "flags": 69699,
        "ifi_type": (1, 2),
        "odd": frozenset(),
    }
    found = plain(dumped)
    assert found == {
        "index": 4,
        "flags": 69699,
        "ifi_type": [1, 2],
        "odd": "frozenset()",
        "IFLA_IFNAME": "flannel.1",
        "IFLA_LINKINFO": {
            "IFLA_INFO_KIND": "vxlan",
            "IFLA_INFO_DATA": {"IFLA_VXLAN_ID": 1, "IFLA_VXLAN_PORT": 8472},
        },
        "IFLA_STATS64": {"rx_packets": 3, "tx_dropped": 0},
    }
    assert json.loads(json.dumps(found)) == found


@pytest.mark.parametrize(
    ("dst", "dst_len", "inside"),
    [
        ("10.244.3.0", 24, True),
        ("10.244.0.0", 16, True),
        ("10.0.0.0", 8, False),  # wider than the network
        ("192.0.2.0", 24, False),
        (None, 0, False),  # the default route
        ("fd00:10:244:3::", 64, True),
        ("fd00:99::", 64, False),
    ],
)
def test_a_route_to_the_pod_network_is_one_inside_it(
    dst: str | None, dst_len: int, inside: bool
) -> None:
    networks = [ipaddress.ip_network("10.244.0.0/16"), ipaddress.ip_network("fd00:10:244::/56")]
    route = {"dst_len": dst_len, "attrs": [["RTA_DST", dst]] if dst else []}
    assert route_to_network(route, networks) is inside


def test_a_node_file_over_the_limit_is_cut_at_a_line_and_said_to_be(tmp_path: Path) -> None:
    big = tmp_path / "subnet.env"
    big.write_bytes(b"".join(b"FLANNEL_X_%06d=1\n" % i for i in range(DEFAULT_LIMIT // 10)))
    settings = NodeSettings(Options(subnet_file=str(big)), str(tmp_path / "none.conflist"))
    (part,) = [c for c in node_collectors(settings) if c.name == "subnet.env"]
    found = collect([part], [])
    (record,) = found.records[0].files
    data = found.files["files/subnet.env"]
    assert record.truncated and len(data) <= DEFAULT_LIMIT and data.endswith(b"=1\n")
    assert big.read_bytes().startswith(data)
