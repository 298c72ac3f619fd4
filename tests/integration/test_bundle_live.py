"""`pyflannel bundle` on a node of the agent lab in network namespaces (real etcd, pyflanneld,
the real kernel and the CNI plugin): its file list and what each file holds, no secret the
node holds (an etcd client key, the etcd password in the agent's settings, a kubeconfig's token
and client key), and a bundle still written, with the missing parts named, when etcd does not
answer."""

from __future__ import annotations

import base64
import io
import ipaddress
import json
import stat
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from pyflannel_lab.netns_agents import ETCD_IP, HEALTHZ_PORT, AgentLab
from pyflannel_lab.netns_lab import LabHost
from pyflannel_runtime import __version__
from tests.integration.etcd_tls import make_tls_material

pytestmark = [pytest.mark.root, pytest.mark.etcd]

RUN_CLI = "import sys; from pyflannel_runtime.cli.main import main; sys.exit(main(sys.argv[1:]))"
PASSWORD = "etcd-pa55word-Zq81"
TOKEN = "kube-token-4fT9xQ2mL7"
TOKEN_IN_FILE = "file-token-8Hc3vN0pW5"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentLab]:
    """Two nodes whose agents reach etcd over TLS with a client certificate."""
    tls = make_tls_material(tmp_path_factory.mktemp("etcd-tls"), host=ETCD_IP)
    with AgentLab(
        {"Type": "vxlan"}, hosts=2, prefix="pbd", lab_pods=False, etcd_tls=tls
    ) as running:
        running.start_all()
        running.add_cni_pod(running.net.hosts[0], "pod1")
        yield running


def private_key(path: Path) -> str:
    text = (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )
    path.write_text(text)
    path.chmod(0o600)
    return text


def node_secrets(lab: AgentLab, host: LabHost) -> tuple[Path, list[str]]:
    """The agent's environment file of a node holding real secrets (its etcd client key, the
    etcd password, a kubeconfig with a token, a token file and a client key), and the
    secrets."""
    here = lab.workdir / host.ns
    assert lab.etcd is not None and lab.etcd_tls is not None
    tls = lab.etcd_tls
    etcd_key = Path(tls.client_key).read_text()
    client_key = private_key(here / "kube-client.key")
    (here / "token").write_text(TOKEN_IN_FILE + "\n")
    key_data = base64.b64encode(client_key.encode()).decode()
    (here / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: flannel\n"
        "clusters:\n- name: lab\n  cluster:\n    server: https://192.0.2.100:6443\n"
        "contexts:\n- name: flannel\n  context: {cluster: lab, user: flannel}\n"
        f"users:\n- name: flannel\n  user:\n    token: {TOKEN}\n"
        f"    client-key-data: {key_data}\n    tokenFile: token\n"
    )
    env = here / "pyflanneld.env"
    env.write_text(
        f"FLANNELD_ETCD_ENDPOINTS={lab.etcd.endpoint}\n"
        f"FLANNELD_ETCD_CAFILE={tls.ca_file}\n"
        f"FLANNELD_ETCD_CERTFILE={tls.client_cert}\n"
        f"FLANNELD_ETCD_KEYFILE={tls.client_key}\n"
        f'FLANNELD_ETCD_PASSWORD="{PASSWORD}"\n'
        f"FLANNELD_KUBECONFIG_FILE={here / 'kubeconfig'}\n"
        f"FLANNELD_SUBNET_FILE={lab.subnet_file(host)}\n"
        f"FLANNELD_HEALTHZ_PORT={HEALTHZ_PORT}\n"
    )
    env.chmod(0o600)
    key_lines = [
        line for key in (etcd_key, client_key) for line in key.splitlines() if "-----" not in line
    ]
    return env, [PASSWORD, TOKEN, TOKEN_IN_FILE, key_data, *key_lines]


def bundle(
    lab: AgentLab, host: LabHost, out: Path, *extra: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, bytes]]:
    """`pyflannel bundle` run on the host, as root on a node runs it, in the directory `out`
    (the bundle written there under its default name), or with ``--output out``; and the
    files of the archive it wrote, by their path inside the bundle's directory."""
    where = ["--output", str(out)] if not out.is_dir() else []
    done = subprocess.run(
        [*on_host(lab, host), "bundle", f"--conflist={lab.write_conflist(host)}", *where, *extra],
        cwd=out if out.is_dir() else None,
        capture_output=True,
        text=True,
        check=False,
    )
    written = [out] if out.is_file() else sorted(out.glob("*.tar.gz"))
    return done, archive_files(written[0].read_bytes(), host) if written else {}


def on_host(lab: AgentLab, host: LabHost) -> list[str]:
    """`pyflannel` in the host's namespace, its node named as the agent's is (the lab's hosts
    share one hostname)."""
    return ["ip", "netns", "exec", host.ns, "env", f"NODE_NAME={host.ns}", sys.executable,
            "-c", RUN_CLI]  # fmt: skip


def archive_files(data: bytes, host: LabHost) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        (top,) = {m.name.split("/")[0] for m in tar.getmembers()}
        assert top.startswith(f"pyflannel-bundle-{host.ns}-"), top
        for member in tar.getmembers():
            handle = tar.extractfile(member) if member.isfile() else None
            if handle is not None:
                files[member.name.split("/", 1)[1]] = handle.read()
    return files


def leased(lab: AgentLab, host: LabHost) -> ipaddress.IPv4Network:
    """The subnet etcd gave the host's agent, from its subnet.env."""
    env = dict(
        line.split("=", 1) for line in lab.subnet_file(host).read_text().splitlines() if "=" in line
    )
    return ipaddress.IPv4Network(env["FLANNEL_SUBNET"], strict=False)


def parts(files: dict[str, bytes]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in json.loads(files["manifest.json"])["collectors"]}


def test_a_nodes_bundle_holds_its_status_leases_files_kernel_firewall_and_cni_state(
    lab: AgentLab,
) -> None:
    host, peer = lab.net.hosts
    env, secrets = node_secrets(lab, host)
    out = lab.workdir / "node1.tar.gz"
    done, files = bundle(lab, host, out, f"--agent-env={env}")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    found = parts(files)
    failed = {name for name, part in found.items() if part["status"] in ("failed", "timeout")}
    # No systemd here: its unit cannot be shown (the journal may answer with no entries).
    assert failed in ({"unit"}, {"unit", "journal"}), files["errors.txt"]
    assert done.returncode == 1, done.stderr
    assert done.stderr.endswith("(see errors.txt)\n") and f"wrote {out} (" in done.stderr
    pod_id, pod_ip = f"{lab.net.token}-pod1", None
    expected = {
        "manifest.json", "errors.txt", "status.json", "ipam.json", "leases.json",
        "network-config.json", "files/subnet.env", "files/10-flannel.conflist",
        "files/pyflanneld.env", "kernel/scope.json", "kernel/devices.json",
        "kernel/addresses.json", "kernel/routes.json", "kernel/neighbours.json",
        "kernel/fdb.json", "firewall/iptables-save.txt", "firewall/ip6tables-save.txt",
        f"cni/flannel/{pod_id}", "versions.json",
    }  # fmt: skip
    hostlocal = {p for p in files if p.startswith("cni/networks/cbr0/")}
    pod_ip = next(p.rsplit("/", 1)[1] for p in hostlocal if p.rsplit("/", 1)[1][0].isdigit())
    assert set(files) - hostlocal - {"systemd/journal.txt"} == expected, sorted(files)
    assert found["nft"]["status"] == "skipped"  # iptables mode: flannel has no nft table

    status = json.loads(files["status.json"])
    assert status["ok"] is True and status["agent"]["state"] == "ready"
    assert status["summary"] == {**status["summary"], "leases": 2, "programmed": 1, "missing": 0}
    assert json.loads(files["ipam.json"])["usage"][0]["used"] == 1
    leases = json.loads(files["leases.json"])
    assert leases["store"] == "etcd"
    assert sorted(lease["subnet"] for lease in leases["leases"]) == sorted(
        str(leased(lab, h)) for h in lab.net.hosts
    )
    assert all(lease["value"]["BackendType"] == "vxlan" for lease in leases["leases"])
    config = json.loads(files["network-config.json"])
    assert config["Network"] == "10.244.0.0/16" and config["Backend"]["Type"] == "vxlan"
    assert files["files/subnet.env"] == lab.subnet_file(host).read_bytes()
    assert files["files/10-flannel.conflist"] == lab.write_conflist(host).read_bytes()
    assert lab.etcd_tls is not None
    assert (
        f"FLANNELD_ETCD_KEYFILE={lab.etcd_tls.client_key}\n"
        in files["files/pyflanneld.env"].decode()
    )

    devices = {d["IFLA_IFNAME"] for d in json.loads(files["kernel/devices.json"])}
    assert devices == {"flannel.1", "cni0"}
    peer_subnet = leased(lab, peer)
    routes = json.loads(files["kernel/routes.json"])
    assert any(
        r.get("RTA_DST") == str(peer_subnet.network_address) and r["dst_len"] == 24 for r in routes
    ), routes
    neighbours = json.loads(files["kernel/neighbours.json"])
    assert str(peer_subnet.network_address) in {n.get("NDA_DST") for n in neighbours}
    fdb = json.loads(files["kernel/fdb.json"])
    assert str(peer.underlay_ip) in {f.get("NDA_DST") for f in fdb}
    saved = files["firewall/iptables-save.txt"].decode()
    assert ":FLANNEL-POSTRTG - " in saved and ":FLANNEL-FWD - " in saved, saved
    assert json.loads(files[f"cni/flannel/{pod_id}"])["type"] == "bridge"
    assert pod_id in files[f"cni/networks/cbr0/{pod_ip}"].decode()
    assert json.loads(files["versions.json"])["pyflannel"] == __version__

    everything = b"\n".join(files.values())
    for secret in secrets:
        assert secret.encode() not in everything, f"{secret[:12]}... is in the bundle"
    assert b"<redacted>" in files["files/pyflanneld.env"]


def test_a_bundle_is_written_when_etcd_does_not_answer(lab: AgentLab) -> None:
    host = lab.net.hosts[1]
    out = lab.workdir / "cut"
    out.mkdir()
    assert lab.etcd is not None
    store = [*lab.store_args(), f"--subnet-file={lab.subnet_file(host)}"]
    with lab.cut_from_store(host, abort=True):
        done, files = bundle(lab, host, out, *store, "--agent-env=", "--timeout=1")
    assert done.returncode == 1, done.stderr
    (written,) = out.iterdir()
    assert written.name.startswith(f"pyflannel-bundle-{host.ns}-") and written.suffix == ".gz"
    found = parts(files)
    assert {found[name]["status"] for name in ("status", "leases")} == {"failed"}
    assert "no answer in 1s" in found["leases"]["error"], found["leases"]
    assert (
        f"leases (the leases and the network config, from etcd {lab.etcd.endpoint}): failed: "
        in (files["errors.txt"].decode())
    )
    assert found["kernel"]["status"] == "ok" and "kernel/routes.json" in files
    assert json.loads(files["manifest.json"])["complete"] is False


def test_a_bundle_goes_to_standard_output_with_dash(lab: AgentLab) -> None:
    host = lab.net.hosts[1]
    settings = [
        *lab.store_args(),
        f"--subnet-file={lab.subnet_file(host)}",
        f"--healthz-port={HEALTHZ_PORT}",
        f"--conflist={lab.write_conflist(host)}",
        "--agent-env=",
    ]
    done = subprocess.run(
        [*on_host(lab, host), "bundle", "-o", "-", *settings], capture_output=True, check=False
    )
    assert b"pyflannel bundle: wrote standard output (" in done.stderr, done.stderr
    files = archive_files(done.stdout, host)
    failed = {name for name, part in parts(files).items() if part["status"] == "failed"}
    assert failed in ({"unit"}, {"unit", "journal"}) and done.returncode == 1, files["errors.txt"]
    assert json.loads(files["status.json"])["agent"]["state"] == "ready"
    assert json.loads(files["manifest.json"])["node"] == host.ns
