"""Fuzzing stdin and the environment: the plugin always answers with a CNI result or error,
and the state directory never holds a partial or stray file."""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyflannel_runtime.cni.plugin import run

FAKE_BRIDGE = """#!/bin/sh
cat > /dev/null
echo '{"cniVersion":"0.3.1","ips":[]}'
"""
SUBNET_ENVS = [
    "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n",
    "FLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_IPV6_SUBNET=fd00::1/64\nFLANNEL_MTU=1\nFLANNEL_IPMASQ=x\n",
    "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_MTU=abc\n",
    "",
]

env_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20
)
json_scalar = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | env_text
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(env_text, inner, max_size=3),
    max_leaves=10,
)
flannel_keys = st.sampled_from(
    ["name", "cniVersion", "type", "delegate", "ipam", "runtimeConfig", "Delegate", "IPAM", "dns"]
)
conf_overrides = st.dictionaries(flannel_keys, json_value, max_size=4)
delegate_value = st.dictionaries(
    st.sampled_from(["type", "bridge", "mtu", "ipMasq", "isGateway", "hairpinMode"]), json_value
)
ipam_value = st.dictionaries(
    st.sampled_from(["type", "routes", "ranges", "dataDir"]),
    json_value
    | st.lists(st.dictionaries(st.sampled_from(["dst", "gw", "mtu", "table"]), json_value)),
)


@st.composite
def stdin_data(draw: st.DrawFn, data_dir: str, subnet_file: str) -> bytes:
    kind = draw(st.sampled_from(["conf", "conf", "conf", "json", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "json":
        return json.dumps(draw(json_value)).encode()
    conf: dict[str, Any] = {
        "name": draw(st.sampled_from(["net", "cbr0", "a b", ""])),
        "cniVersion": draw(st.sampled_from(["0.3.1", "1.0.0", "1.1.0", "", "0.4.0", "9"])),
        "type": "flannel",
        "subnetFile": subnet_file,
        "dataDir": data_dir,
    }
    if draw(st.booleans()):
        conf["delegate"] = draw(delegate_value)
    if draw(st.booleans()):
        conf["ipam"] = draw(ipam_value)
    conf.update(draw(conf_overrides))
    return json.dumps(conf).encode()


cni_env = st.fixed_dictionaries(
    {},
    optional={
        "CNI_COMMAND": st.sampled_from(["ADD", "DEL", "CHECK", "VERSION", "GC", "STATUS", "", "x"]),
        "CNI_CONTAINERID": st.sampled_from(["c1", "c2", "../x", ".", "a/b", ""]) | env_text,
        "CNI_NETNS": st.sampled_from(["/nonexistent", "/proc/self/ns/net", ""]),
        "CNI_IFNAME": st.sampled_from(["eth0", "", "a" * 16, "a:b", ".."]) | env_text,
        "CNI_ARGS": env_text,
        "CNI_NETNS_OVERRIDE": st.sampled_from(["1", "true", ""]),
    },
)


def check_state_dir(data_dir: Path) -> None:
    if not data_dir.exists():
        return
    for entry in data_dir.iterdir():
        assert not entry.name.startswith("."), f"stray temp file {entry.name}"
        saved = json.loads(entry.read_bytes())  # complete JSON, never a partial write
        assert isinstance(saved, dict)
        assert isinstance(saved["name"], str)
        assert isinstance(saved["type"], str)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data(), env=cni_env, subnet_env=st.sampled_from(SUBNET_ENVS))
def test_plugin_never_crashes_or_leaves_partial_state(
    data: st.DataObject, env: dict[str, str], subnet_env: str
) -> None:
    root = Path(tempfile.mkdtemp(prefix="pcni-fuzz-"))
    try:
        (root / "bin").mkdir()
        bridge = root / "bin" / "bridge"
        bridge.write_text(FAKE_BRIDGE)
        bridge.chmod(0o755)
        (root / "subnet.env").write_text(subnet_env)
        data_dir = root / "data"
        stdin = data.draw(stdin_data(str(data_dir), str(root / "subnet.env")))
        environ = dict(env, CNI_PATH=str(root / "bin"), PATH="/usr/bin:/bin")
        stdout, stderr = io.BytesIO(), io.BytesIO()

        status = run(environ, io.BytesIO(stdin), stdout, stderr)

        assert status in (0, 1)
        output = stdout.getvalue()
        if status == 1:
            # the error result is the last document (a result may precede a netns error)
            error = json.loads(output[output.rfind(b"{\n    ") :])
            assert isinstance(error["code"], int)
            assert isinstance(error["msg"], str)
            assert "Error: " not in error["msg"]  # not an unexpected Python exception
            assert "[Errno" not in error["msg"]  # an OS error in Go's words, not Python's
        elif output:
            json.loads(output)
        check_state_dir(data_dir)
    finally:
        shutil.rmtree(root)
