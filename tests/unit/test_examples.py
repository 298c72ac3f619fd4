"""The shipped examples stay valid and agree with each other."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pyflannel_controller.model.cluster import load_model
from pyflannel_controller.render.render import render_node
from pyflannel_runtime.backend_spec import specs
from pyflannel_runtime.wire.netconf import check_network_config, parse_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_net_conf_is_one_the_agent_accepts() -> None:
    config = check_network_config(parse_config((EXAMPLES / "net-conf.json").read_bytes()))
    specs.validate(config)


@pytest.mark.parametrize(("name", "datastore"), [("cluster-etcd.yml", "etcd"),
                                                 ("cluster-kubernetes.yml", "kubernetes")])  # fmt: skip
def test_every_node_of_each_cluster_model_renders(name: str, datastore: str) -> None:
    model = load_model(yaml.safe_load((EXAMPLES / name).read_text()))
    assert model.flannel_datastore == datastore
    assert len(model.nodes) == 3
    for node in model.nodes:
        files = render_node(model, node)
        assert ("etc/kube-flannel/net-conf.json" in files) == (datastore == "kubernetes")


def test_the_etcd_model_publishes_the_example_net_conf() -> None:
    """In etcd mode the config is published, not rendered: the example file is the model's."""
    model = load_model(yaml.safe_load((EXAMPLES / "cluster-etcd.yml").read_text()))
    published = check_network_config(parse_config((EXAMPLES / "net-conf.json").read_bytes()))
    assert check_network_config(model.to_network_config()) == published
