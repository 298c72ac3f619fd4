"""Every decoder of outside input, fed deep, huge and malformed documents.

For each decoder only its documented error may escape (ConfigError, LeaseError, ...), the
commands a user runs answer with an exit status and a message, never a traceback, and a
failure writes nothing. Documents are built around what each decoder expects, so that the
hostile part is reached: a deep value under ``Backend``, a huge ``BackendData``, a truncated
CNI state file.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyflannel_controller.cli import main as controller_main
from pyflannel_controller.model.cluster import ClusterModelError, load_model
from pyflannel_controller.model.model_file import ModelFileError, parse_model_text
from pyflannel_runtime.backend_spec import specs
from pyflannel_runtime.cli.main import main
from pyflannel_runtime.cni import plugin
from pyflannel_runtime.cni.install import isolated_prelude
from pyflannel_runtime.gojson.core import MAX_DEPTH, MAX_DOCUMENT_BYTES
from pyflannel_runtime.subnet.kube.annotations import (
    AnnotationPrefixError,
    Annotations,
    normalize_prefix,
)
from pyflannel_runtime.subnet.kube.nodes import NodeLeaseError, NodeLeaseTracker, node_to_lease
from pyflannel_runtime.wire.lease import LeaseAttrs, LeaseError, parse_subnet_key
from pyflannel_runtime.wire.netconf import (
    ConfigError,
    check_network_config,
    ip_stack,
    parse_config,
)
from pyflannel_runtime.wire.subnet_env import (
    SubnetEnvError,
    parse_cni_subnet_env,
    read_previous_subnets,
)
from pyflannel_runtime.wire.vxlan_data import advertised_vtep_mac, parse_vxlan_backend_data

FUZZ = settings(max_examples=120)
KEYS = Annotations.for_prefix()

# --- documents ----------------------------------------------------------------------------------

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def deep(draw: st.DrawFn) -> str:
    """Nesting around the limit and far beyond it, closed or not."""
    depth = draw(st.integers(MAX_DEPTH - 2, MAX_DEPTH + 2) | st.integers(1, 3000))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}"), ('["x",{"k":', "}]")]))
    inner = draw(st.sampled_from(["", "1", '"[{"', "null"]))
    closing = closer * depth if draw(st.booleans()) else closer * draw(st.integers(0, depth))
    return opener * depth + inner + closing


@st.composite
def huge(draw: st.DrawFn) -> str:
    """Just under and just over the size limit, as one string, many items or much space."""
    size = MAX_DOCUMENT_BYTES + draw(st.integers(-8, 8))
    kind = draw(st.sampled_from(["string", "items", "space"]))
    if kind == "string":
        return '"' + "a" * (size - 2) + '"'
    if kind == "items":
        return "[" + "0," * ((size - 2) // 2) + "0]"
    return " " * (size - 2) + "{}"


@st.composite
def malformed(draw: st.DrawFn) -> str:
    """A valid document cut short, or with a byte replaced or inserted."""
    text = json.dumps(draw(json_values))
    at = draw(st.integers(0, len(text)))
    change = draw(st.sampled_from(["cut", "replace", "insert"]))
    if change == "cut":
        return text[:at]
    noise = draw(st.sampled_from([*list('[]{}",:\\x0-.eE'), "\x00", "�", "NaN", "\n"]))
    return text[:at] + noise + text[at + (change == "replace") :]


documents = st.one_of(
    json_values.map(json.dumps),
    deep(),
    malformed(),
    st.text(max_size=100),
    huge(),
)


# long runs of digits: what a backtracking pattern or an int() conversion chokes on
digit_runs = (st.sampled_from([1, 4301, 20_000]) | st.integers(0, 20_000)).map(lambda n: "1" * n)


def utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def embed(template: str, document: str) -> str:
    return template.replace("DOC", document)


# --- flannel's own documents ------------------------------------------------------------------

NET_CONF_PLACES = [
    "DOC",
    '{"Network":"10.244.0.0/16","Backend":DOC}',
    '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":DOC,"X":DOC}}',
    '{"Network":"10.244.0.0/16","Backend":{"Type":"udp","Port":DOC}}',
    '{"Network":DOC,"SubnetLen":DOC}',
]


@FUZZ
@given(st.sampled_from(NET_CONF_PLACES), documents)
def test_net_conf(place: str, document: str) -> None:
    data = utf8(embed(place, document))
    try:
        cfg = parse_config(data)
        specs.validate(cfg)  # the backend and its options, as the agent checks them
        cfg = check_network_config(cfg)
        ip_stack(cfg)
    except ConfigError:
        pass


LEASE_PLACES = [
    "DOC",
    '{"PublicIP":"192.0.2.16","X":DOC}',
    '{"PublicIP":"192.0.2.16","BackendType":"vxlan","BackendData":DOC}',
    '{"PublicIP":DOC,"PublicIPv6":DOC}',
]


@FUZZ
@given(st.sampled_from(LEASE_PLACES), documents, st.booleans())
def test_lease_values_and_backend_data(place: str, document: str, as_bytes: bool) -> None:
    text = embed(place, document)
    try:
        attrs = LeaseAttrs.from_json(utf8(text) if as_bytes else text)
    except LeaseError:
        return
    assert LeaseAttrs.from_json(attrs.to_json()) == attrs
    if attrs.backend_data is not None:
        with contextlib.suppress(LeaseError):
            parse_vxlan_backend_data(attrs.backend_data)
    assert isinstance(advertised_vtep_mac(attrs.backend_data), str)


KEY_PLACES = [
    "DOC",
    "/coreos.com/network/subnets/DOC",
    "10.5.52.0-24&DOC",
    "10.DOC.0.0-24",
    "1.DOC-24x",
    "10.0.0.0-DOC&fd00::-DOC",
]


@FUZZ
@given(st.sampled_from(KEY_PLACES), documents | digit_runs | st.from_regex(r"[0-9.&:a-f/-]{0,300}"))
def test_lease_keys(place: str, document: str) -> None:
    try:
        subnet, ipv6_subnet = parse_subnet_key(embed(place, document))
    except LeaseError:
        return
    assert subnet.prefixlen <= 32 and (ipv6_subnet is None or ipv6_subnet.prefixlen <= 128)


@FUZZ
@given(documents, documents, st.sampled_from(["192.0.2.16", "x", ""]), st.text(max_size=40))
def test_node_annotations(backend_data: str, v6_data: str, public_ip: str, prefix: str) -> None:
    annotations = {
        KEYS.subnet_kube_managed: "true",
        KEYS.public_ip: public_ip,
        KEYS.public_ipv6: "fd00::16",
        KEYS.backend_type: "vxlan",
        KEYS.backend_data: backend_data,
        KEYS.backend_v6_data: v6_data,
    }
    node: dict[str, Any] = {
        "metadata": {"name": "n1", "annotations": annotations},
        "spec": {"podCIDR": "10.244.15.0/24", "podCIDRs": ["10.244.15.0/24", "fd00:15::/64"]},
    }
    for v4, v6 in ((True, False), (False, True), (True, True)):
        with contextlib.suppress(NodeLeaseError):
            node_to_lease(node, KEYS, v4, v6)
        tracker = NodeLeaseTracker(KEYS, v4, v6)
        tracker.update("n1", node)
        tracker.reset([node])
    try:
        Annotations.for_prefix(prefix)
        normalize_prefix(prefix)
    except AnnotationPrefixError:
        pass


SUBNET_ENV_PLACES = [
    "DOC",
    "FLANNEL_NETWORK=DOC\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n",
    "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=DOC\nFLANNEL_IPMASQ=x\n",
]


@FUZZ
@given(st.sampled_from(SUBNET_ENV_PLACES), documents | digit_runs)
def test_subnet_env_readers(place: str, document: str) -> None:
    text = embed(place, document)
    read_previous_subnets(text)
    with contextlib.suppress(SubnetEnvError):
        parse_cni_subnet_env(text, "/run/flannel/subnet.env")


# --- the CNI plugin: stdin and state files, through its entry point ---------------------------

FAKE_BRIDGE = '#!/bin/sh\ncat > /dev/null\necho \'{"cniVersion":"0.3.1","ips":[]}\'\n'
SUBNET_ENV = "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n"


@pytest.fixture(scope="module")
def cni_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cni-decoders")
    (root / "bin").mkdir()
    (root / "bin" / "bridge").write_text(FAKE_BRIDGE)
    (root / "bin" / "bridge").chmod(0o755)
    (root / "subnet.env").write_text(SUBNET_ENV)
    return root


def run_plugin(root: Path, command: str, stdin: bytes) -> int:
    """The plugin's exit status; its stdout is a CNI result or a CNI error, never a bug's."""
    environ = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": "ctr1",
        "CNI_NETNS": "/var/run/netns/nonexistent",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(root / "bin"),
        "PATH": "/usr/bin:/bin",
    }
    stdout = io.BytesIO()
    status = plugin.run(environ, io.BytesIO(stdin), stdout, io.BytesIO())
    assert status in (0, 1)
    if status == 1:
        error = json.loads(stdout.getvalue())
        # run() reports an exception other than CniError as code 999 "<ExceptionType>: ..."
        assert not re.match(r"\w+(Error|Exception): ", error["msg"]), error
        assert "[Errno" not in error["msg"], error
    return status


def plugin_conf(root: Path, **extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "0.3.1",
        "name": "cbr0",
        "type": "flannel",
        "subnetFile": str(root / "subnet.env"),
        "dataDir": str(root / "data"),
        **extra,
    }


CNI_PLACES = [
    "DOC",
    '{"cniVersion":"0.3.1","name":"cbr0","type":"flannel","prevResult":DOC}',
    '{"cniVersion":"0.3.1","name":"cbr0","delegate":{"type":"bridge","x":DOC},"ipam":DOC}',
]


@FUZZ
@given(st.sampled_from(CNI_PLACES), documents, st.sampled_from(["ADD", "DEL", "CHECK"]))
def test_cni_stdin(cni_root: Path, place: str, document: str, command: str) -> None:
    stdin = embed(place, document)
    if place != "DOC":  # keep the plugin's files in the test's directory
        stdin = stdin.replace('"name":"cbr0"', f'"name":"cbr0","dataDir":"{cni_root}/data"', 1)
    run_plugin(cni_root, command, utf8(stdin))
    data = cni_root / "data"
    for entry in data.iterdir() if data.exists() else ():
        assert not entry.name.startswith("."), f"a stray temp file: {entry.name}"
        entry.unlink()


LEAN_PLUGIN = """
import io
from pyflannel_runtime.cni.plugin import run
env = dict(arg.split("=", 1) for arg in sys.argv[1].split(";"))
for path in sys.argv[2:]:
    with open(path, "rb") as handle:
        stdin = handle.read()
    out = io.BytesIO()
    print(run(env, io.BytesIO(stdin), out, io.BytesIO()), out.getvalue().hex())
print("json" in sys.modules)
"""


@settings(max_examples=20)
@given(st.lists(st.tuples(st.sampled_from(CNI_PLACES), documents), min_size=1, max_size=8))
def test_cni_stdin_in_the_plugins_own_process(
    cni_root: Path, stdins: list[tuple[str, str]]
) -> None:
    """As the runtime runs it: a fresh interpreter that never loads the json package."""
    paths = []
    for index, (place, document) in enumerate(stdins):
        path = cni_root / f"stdin-{index}"
        path.write_bytes(utf8(embed(place, document)))
        paths.append(str(path))
    env = f"CNI_COMMAND=ADD;CNI_CONTAINERID=c1;CNI_NETNS=/x;CNI_IFNAME=eth0;CNI_PATH={cni_root}/b"
    done = subprocess.run(
        [sys.executable, "-IS", "-c", isolated_prelude() + LEAN_PLUGIN, env, *paths],
        capture_output=True,
        text=True,
        check=True,
    )
    *results, json_loaded = done.stdout.splitlines()
    assert json_loaded == "False"
    assert len(results) == len(paths)
    for line in results:
        status, stdout = line.split(" ")
        assert status in ("0", "1")
        if status == "1":
            error = json.loads(bytes.fromhex(stdout))
            assert not re.match(r"\w+(Error|Exception): ", error["msg"]), error
            assert "[Errno" not in error["msg"], error


@FUZZ
@given(documents)
def test_cni_state_files(cni_root: Path, document: str) -> None:
    """DEL with any saved state: the state is gone afterwards, whatever it held."""
    state = cni_root / "data" / "ctr1"
    state.parent.mkdir(exist_ok=True)
    state.write_bytes(utf8(document))
    run_plugin(cni_root, "DEL", json.dumps(plugin_conf(cni_root)).encode())
    assert not state.exists()


# --- the cluster model and the commands a user runs -------------------------------------------


@st.composite
def yaml_documents(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["flow", "block", "aliases", "text"]))
    if kind == "flow":
        return "flannel_cni_delegate_extra: {a: " + draw(deep()) + "}\n"
    if kind == "block":
        depth = draw(st.integers(1, 300))
        return "".join("  " * level + f"k{level}:\n" for level in range(depth)) + "  " * depth + "1"
    if kind == "aliases":
        levels, width = draw(st.integers(1, 12)), draw(st.integers(1, 12))
        lines = ["flannel_cni_delegate_extra:", "  l0: &l0 x"]
        for level in range(1, levels):
            lines.append(f"  l{level}: &l{level} [" + f"*l{level - 1}," * width + "]")
        return "\n".join(lines) + "\n"
    return draw(st.text(max_size=200))


# PyYAML's pure-Python loader (the one that can be held to the limits) takes seconds for a
# megabyte, so huge documents go to the JSON reader only.
model_documents = st.one_of(
    st.tuples(st.booleans(), yaml_documents() | deep() | malformed() | st.text(max_size=100)),
    st.tuples(st.just(True), documents),
)


@FUZZ
@given(model_documents)
def test_cluster_model(document: tuple[bool, str]) -> None:
    is_json, text = document
    with contextlib.suppress(ModelFileError, ClusterModelError):
        load_model(parse_model_text(text, is_json=is_json))


@FUZZ
@given(st.data(), st.sampled_from(["net-conf.json", "model.yaml", "m.json"]))
def test_commands_answer_without_tracebacks(data: st.DataObject, name: str) -> None:
    document = data.draw(yaml_documents() if name == "model.yaml" else documents)
    with tempfile.TemporaryDirectory(prefix="pyflannel-cli-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(utf8(document))
        out = Path(tmp) / "out"
        stderr = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            if name == "net-conf.json":
                status = main(["config", "check", str(path)])
            else:
                status = controller_main(
                    ["render", "--model", str(path), "--node", "n1", "--out", str(out)]
                )
        assert status in (0, 1)
        if status == 1:
            assert stderr.getvalue() and "Traceback" not in stderr.getvalue()
            assert not out.exists(), "a failed render wrote files"
