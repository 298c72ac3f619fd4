"""Passing GC and STATUS on to the delegate, and picking a CNI version a plugin accepts.

A plugin must forward GC and STATUS to the plugins it delegates to (the CNI specification,
"Delegated plugin execution procedure"). Those verbs need CNI 1.1.0, which older plugins refuse
(Debian 12's containernetworking-plugins 1.1.1 stop at 1.0.0), so the delegate is asked for its
VERSION first and the verb forwarded only when it lists 1.1.0.
"""

from __future__ import annotations

from pyflannel_runtime.cni.invoke import InvokeError, exec_plugin, find_in_path
from pyflannel_runtime.cni.skel import SPEC_VERSION, CniError
from pyflannel_runtime.gojson.core import GoJSONError, decode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from pyflannel_runtime.cni.plugin_config import FlannelNetConf
    from pyflannel_runtime.wire.subnet_env import CniSubnetEnv


def _version_key(version: str) -> tuple[int, ...] | None:
    parts = version.split(".")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def supported_versions(plugin: str, environ: Mapping[str, str]) -> list[str]:
    """The plugin's VERSION answer; CniError when it gives none."""
    output, _ = exec_plugin("VERSION", plugin, b"{}", environ)
    try:
        answer = decode(output)
    except GoJSONError as err:
        raise CniError(0, f"{plugin} VERSION: {err}") from None
    versions = answer.get("supportedVersions") if isinstance(answer, dict) else None
    if not isinstance(versions, list):
        raise CniError(0, f"{plugin} VERSION: no supportedVersions in its answer")
    return [v for v in versions if isinstance(v, str)]


def newest_version(versions: list[str]) -> str | None:
    """The newest well-formed version of ``versions``, at most the spec version this plugin speaks."""
    ceiling = _version_key(SPEC_VERSION) or ()
    known = [(key, v) for v in versions if (key := _version_key(v)) is not None and key <= ceiling]
    return max(known)[1] if known else None


def forward_to_delegate(
    command: str,
    conf: FlannelNetConf,
    subnet_env: CniSubnetEnv,
    environ: Mapping[str, str],
    extra: Mapping[str, Any],
) -> bool:
    """Run ``command`` (GC or STATUS) on the delegate ADD would build now, with ``extra`` keys
    added; False when the delegate does not speak CNI 1.1.0. Its error is raised as CniError."""
    from pyflannel_runtime.cni.delegate import (
        DelegateError,
        build_delegate,
        check_delegate,
        encode_delegate,
    )

    try:
        if conf.delegate is not None:
            check_delegate(conf.delegate)
        delegate = build_delegate(conf, subnet_env)
    except DelegateError as err:
        raise CniError(0, str(err)) from None
    try:
        plugin = find_in_path(str(delegate.get("type")), environ.get("CNI_PATH", ""))
    except InvokeError as err:
        raise CniError(0, str(err)) from None
    try:
        versions = supported_versions(plugin, environ)
    except CniError:
        return False  # no usable VERSION answer: it cannot speak 1.1.0 either
    if SPEC_VERSION not in versions:
        return False
    delegate["cniVersion"] = SPEC_VERSION
    delegate.update(extra)
    exec_plugin(command, plugin, encode_delegate(delegate), environ)
    return True
