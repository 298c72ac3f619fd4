"""render_node writes net-conf.json only where the agent reads it: the Kubernetes datastore.
With etcd the config lives under <prefix>/config instead (ops/publish.py)."""

from __future__ import annotations

from pyflannel_controller.model.cluster import load_model
from pyflannel_controller.render.render import render_node


def test_net_conf_is_rendered_for_the_kubernetes_datastore_only() -> None:
    kube = render_node(load_model({"nodes": {"n1": None}}), "n1")
    etcd = render_node(
        load_model(
            {
                "flannel_datastore": "etcd",
                "flannel_etcd_endpoints": ["http://192.0.2.10:2379"],
                "nodes": {"n1": None},
            }
        ),
        "n1",
    )
    assert "etc/kube-flannel/net-conf.json" in kube
    assert "etc/kube-flannel/net-conf.json" not in etcd
    assert "FLANNELD_NET_CONFIG_PATH" not in etcd["etc/pyflannel/pyflanneld.env"].content
    assert set(kube) - set(etcd) == {"etc/kube-flannel/net-conf.json"}
