"""Text of every file a node needs, rendered from the cluster model.

The conflist and net-conf.json come out exactly as flannel's manifest writes them (2-space JSON
with a final newline); subnet.env comes from SubnetEnv, the one writer the agent uses too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jinja2

from pyflannel_controller.model.cluster import ClusterModel
from pyflannel_controller.model.cluster_plan import NodePlan, plan_cluster
from pyflannel_runtime import DEFAULT_SUBNET_FILE
from pyflannel_runtime.agent.envfile import AGENT_ENV_FILE
from pyflannel_runtime.ops.files import WantedFile
from pyflannel_runtime.wire.subnet_env import SubnetEnv

SYSTEMD_UNIT_FILE = "/etc/systemd/system/pyflanneld.service"

_PLAIN_ENV_VALUE = re.compile(r"[A-Za-z0-9_./:,@%+=-]*")


def _to_json(value: Any, indent: int = 0) -> str:
    """JSON in the manifest's style; nested lines shifted right by ``indent`` spaces."""
    text = json.dumps(value, indent=2, default=str)
    return text.replace("\n", "\n" + " " * indent)


def _env_value(value: Any) -> str:
    """A value for a systemd EnvironmentFile: bare when safe, else double-quoted and escaped."""
    text = str(value)
    if _PLAIN_ENV_VALUE.fullmatch(text):
        return text
    escaped = re.sub(r'([\\"`$])', r"\\\1", text)
    return f'"{escaped}"'


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).with_name("templates")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["to_json"] = _to_json
    env.filters["env_value"] = _env_value
    return env


_ENV = _environment()


def _render(template: str, model: ClusterModel, **extra: Any) -> str:
    # Templates see the model's settings under their own names, as Ansible templates would.
    context = {name: getattr(model, name) for name in type(model).model_fields}
    return _ENV.get_template(template).render(context | extra)


def render_conflist(model: ClusterModel) -> str:
    """/etc/cni/net.d/10-flannel.conflist."""
    subnet_file = model.flannel_subnet_file
    cni_subnet_file = None if subnet_file == DEFAULT_SUBNET_FILE else subnet_file
    return _render("10-flannel.conflist.j2", model, cni_subnet_file=cni_subnet_file)


def render_net_conf(model: ClusterModel) -> str:
    """/etc/kube-flannel/net-conf.json (also the value for etcd's <prefix>/config)."""
    return _render("net-conf.json.j2", model, backend=model.backend_options())


def render_subnet_env(model: ClusterModel, node: NodePlan) -> str:
    """subnet.env as flanneld will write it, for a node whose lease is pinned."""
    if model.flannel_enable_ipv4 and node.subnet is None:
        raise ValueError(f"nodes.{node.name}.subnet: not pinned, so subnet.env is not known")
    if model.flannel_enable_ipv6 and node.ipv6_subnet is None:
        raise ValueError(f"nodes.{node.name}.ipv6_subnet: not pinned, so subnet.env is not known")
    return SubnetEnv(
        network=model.flannel_network if model.flannel_enable_ipv4 else None,
        subnet=node.subnet,
        ipv6_network=model.flannel_ipv6_network if model.flannel_enable_ipv6 else None,
        ipv6_subnet=node.ipv6_subnet,
        mtu=node.mtu,
        ipmasq=model.flannel_ip_masq,
    ).render()


def render_agent_env(model: ClusterModel, node: NodePlan) -> str:
    """/etc/pyflannel/pyflanneld.env: the agent's flags as FLANNELD_* variables."""
    return _render("pyflanneld.env.j2", model, node=node)


def render_systemd_unit(model: ClusterModel) -> str:
    """/etc/systemd/system/pyflanneld.service."""
    runtime_directory = str(Path(model.flannel_subnet_file).parent.relative_to("/run"))
    return _render(
        "pyflanneld.service.j2",
        model,
        env_file=AGENT_ENV_FILE,
        runtime_directory=runtime_directory,
    )


def render_node(model: ClusterModel, node_name: str) -> dict[str, WantedFile]:
    """Every file for one node, keyed by path relative to the root (no leading slash).

    Raises PlanError when the nodes do not fit together or the node is unknown.
    """
    node = plan_cluster(model).node(node_name)
    files = {
        f"{model.flannel_cni_conf_dir}/{model.flannel_cni_conf_file}": WantedFile(
            render_conflist(model), 0o644
        ),
        # It may hold the etcd password: 0600 and no content in diffs.
        AGENT_ENV_FILE: WantedFile(render_agent_env(model, node), 0o600, sensitive=True),
        SYSTEMD_UNIT_FILE: WantedFile(render_systemd_unit(model), 0o644),
    }
    if model.flannel_datastore == "kubernetes":
        # With etcd the agent reads the config from <prefix>/config (ops/publish.py puts it there).
        files[model.flannel_net_conf_path] = WantedFile(render_net_conf(model), 0o644)
    pinned = (node.subnet is not None or not model.flannel_enable_ipv4) and (
        node.ipv6_subnet is not None or not model.flannel_enable_ipv6
    )
    if pinned:
        files[model.flannel_subnet_file] = WantedFile(render_subnet_env(model, node), 0o644)
    return {path.lstrip("/"): rendered for path, rendered in files.items()}
