"""The secrets a pyflannel node holds that no diagnostics bundle may: the etcd password, the
credentials of the kubeconfig the agent uses (its token, password and client key, and the
files holding them), the in-cluster service account's token, and the lines of the etcd client
key. `ops.bundle` redacts each wherever it appears (`ops.redact`). A key file's path is no
secret: it stays.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Iterator

from pyflannel_runtime.ops.bundle_node import NodeSettings

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
_SECRET_FILE_LIMIT = 1 << 20

# A kubeconfig's credentials, as `key: value` lines (the file is YAML or JSON).
_KUBECONFIG_SECRET = re.compile(
    r"""^\s*-?\s*["']?(?P<key>token|password|client-key-data|id-token|refresh-token"""
    r"""|access-token|client-secret|secret)["']?\s*:\s*["']?(?P<value>[^"'\s,}]+)""",
    re.MULTILINE,
)
_KUBECONFIG_FILE = re.compile(
    r"""^\s*-?\s*["']?(?P<key>tokenFile|client-key)["']?\s*:\s*["']?(?P<value>[^"'\s,}]+)""",
    re.MULTILINE,
)
_MIN_KEY_LINE = 16


def _read_secret_file(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(_SECRET_FILE_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return None  # what cannot be read cannot leak


def pem_lines(text: str) -> list[str]:
    """A key file's secret parts: its whole text and each long line of its PEM bodies."""
    lines = [
        line.strip()
        for line in text.splitlines()
        if len(line.strip()) >= _MIN_KEY_LINE and not line.startswith("-----")
    ]
    return [text.strip(), *lines] if text.strip() else lines


def kubeconfig_secrets(text: str, directory: str) -> Iterator[str]:
    """The credentials a kubeconfig holds: tokens, passwords, client keys (and what the key
    data decodes to), and the contents of the token and key files it names."""
    for match in _KUBECONFIG_SECRET.finditer(text):
        value = match.group("value")
        yield value
        if match.group("key") == "client-key-data":
            try:
                decoded = base64.b64decode(value, validate=True).decode("utf-8", "replace")
            except (binascii.Error, ValueError):
                continue
            yield from pem_lines(decoded)
    for match in _KUBECONFIG_FILE.finditer(text):
        path = os.path.join(directory, match.group("value"))
        held = _read_secret_file(path)
        if held is not None:
            yield from pem_lines(held) if "PRIVATE KEY" in held else [held.strip()]


def known_secrets(settings: NodeSettings) -> list[str]:
    """What the node holds that no bundle may, as the agent's settings name it."""
    opts = settings.opts
    found = [opts.etcd_password]
    if opts.etcd_keyfile:
        found += pem_lines(_read_secret_file(opts.etcd_keyfile) or "")
    if opts.kubeconfig_file:
        text = _read_secret_file(opts.kubeconfig_file) or ""
        directory = os.path.dirname(os.path.abspath(opts.kubeconfig_file))
        found += kubeconfig_secrets(text, directory)
    if opts.kube_subnet_mgr:
        found.append((_read_secret_file(SERVICE_ACCOUNT_TOKEN) or "").strip())
    return sorted({secret for secret in found if secret.strip()})
