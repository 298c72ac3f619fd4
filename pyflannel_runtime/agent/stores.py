"""Builds the lease store flanneld's flags ask for: the Kubernetes API or etcd v3."""

from __future__ import annotations

import errno
import logging
import os
from typing import TYPE_CHECKING, Any

from pyflannel_runtime.agent.flags import Options
from pyflannel_runtime.fsutil import read_small_file
from pyflannel_runtime.subnet.manager import SubnetManager
from pyflannel_runtime.wire.subnet_env import PreviousSubnets, read_previous_subnets

if TYPE_CHECKING:
    from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings
    from pyflannel_runtime.subnet.kube.kube import KubeSettings

log = logging.getLogger("pyflannel.agent")


def previous_subnets(path: str) -> PreviousSubnets:
    """What the last run wrote to subnet.env (etcd re-acquisition and old-rule cleanup)."""
    try:
        text = read_small_file(path).decode("utf-8", errors="replace")
    except OSError as err:
        if err.errno == errno.ENOENT:
            log.warning("no subnet found for key: FLANNEL_SUBNET in file: %s", path)
        else:
            log.warning("failed to read the previous subnet file: %s", err)
        return PreviousSubnets()
    return read_previous_subnets(text)


async def build_subnet_manager(opts: Options, previous: PreviousSubnets) -> SubnetManager:
    if opts.kube_subnet_mgr:
        from pyflannel_runtime.subnet.kube.kube import KubeSubnetManager

        manager = await KubeSubnetManager.create(kube_settings(opts))
        manager.start_listing()
        return manager

    from pyflannel_runtime.subnet.etcd.etcd import EtcdSubnetManager
    from pyflannel_runtime.subnet.etcd.resume import STATE_FILE_NAME

    # Beside subnet.env: a node's own state, gone with it (a reboot empties /run).
    state_file = os.path.join(os.path.dirname(opts.subnet_file) or ".", STATE_FILE_NAME)
    return EtcdSubnetManager(etcd_settings(opts, previous=previous, watch_state_file=state_file))


def kube_settings(opts: Options, **extra: Any) -> KubeSettings:
    """The Kubernetes API settings flanneld's flags describe."""
    from pyflannel_runtime.subnet.kube.kube import KubeSettings

    return KubeSettings(
        api_url=opts.kube_api_url,
        kubeconfig_file=opts.kubeconfig_file,
        net_config_path=opts.net_config_path,
        annotation_prefix=opts.kube_annotation_prefix,
        set_node_network_unavailable=opts.set_node_network_unavailable,
        **extra,
    )


def etcd_settings(opts: Options, **extra: Any) -> EtcdSettings:
    """The etcd connection and lease settings flanneld's flags describe."""
    from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings

    return EtcdSettings(
        endpoints=tuple(opts.etcd_endpoint_list),
        prefix=opts.etcd_prefix,
        certfile=opts.etcd_certfile,
        keyfile=opts.etcd_keyfile,
        cafile=opts.etcd_cafile,
        username=opts.etcd_username,
        password=opts.etcd_password,
        subnet_lease_ttl=opts.subnet_lease_ttl,
        renew_margin_minutes=opts.subnet_lease_renew_margin,
        **extra,
    )
