"""plugin_utils/role_values.py: role variables as Ansible gives them (``-e key=value`` and INI
``[group:vars]`` strings) converted by the roles' argument-spec types before the cluster model
sees them; values that cannot be converted named by host, variable, value and type."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.module_utils.common.parameters import DEFAULT_TYPE_VALIDATORS
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.pyflannel.network.plugins.plugin_utils import role_values
from ansible_collections.pyflannel.network.plugins.plugin_utils.cluster import check_cluster
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_controller.inventory import InventoryError

from .test_role_specs import ROLES, load

# Ansible's own truthy and falsy words (ansible.module_utils.parsing.convert_bool).
TRUTHY = ("yes", "on", "1", "true", "True", "TRUE", "y", "t")
FALSY = ("no", "off", "0", "false", "False", "FALSE", "n", "f")


def convert(values: dict[str, Any], host: str = "node1") -> dict[str, Any]:
    converted, problems = role_values.convert_role_values(host, values)
    assert problems == []
    return converted


def test_every_role_documents_a_shared_variable_with_one_type() -> None:
    seen: dict[str, tuple[str, dict[str, Any]]] = {}
    for spec_file in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        for entry_point, entry in load(spec_file)["argument_specs"].items():
            for name, option in entry["options"].items():
                where = f"{spec_file.parent.parent.name}/{entry_point}"
                kind = {key: option.get(key) for key in ("type", "elements", "no_log")}
                assert kind["type"] in DEFAULT_TYPE_VALIDATORS, (where, name)
                first = seen.setdefault(name, (where, kind))
                assert first[1] == kind, f"{name}: {first[0]} {first[1]} but {where} {kind}"
    assert set(role_values.role_options()) == set(seen)


def test_the_issues_examples_become_the_types_the_model_wants() -> None:
    assert convert(
        {"flannel_vxlan_vni": "7", "flannel_subnet_len": "25", "flannel_ip_masq": "false"}
    ) == {"flannel_vxlan_vni": 7, "flannel_subnet_len": 25, "flannel_ip_masq": False}


@pytest.mark.parametrize("word", TRUTHY)
def test_ansibles_truthy_words_are_true(word: str) -> None:
    assert convert({"flannel_vxlan_direct_routing": word}) == {"flannel_vxlan_direct_routing": True}


@pytest.mark.parametrize("word", FALSY)
def test_ansibles_falsy_words_are_false(word: str) -> None:
    assert convert({"flannel_etcd_tls": word}) == {"flannel_etcd_tls": False}


@given(st.integers(min_value=-(2**63), max_value=2**63))
def test_an_int_written_as_text_is_that_int(number: int) -> None:
    assert convert({"flannel_mtu": str(number)}) == {"flannel_mtu": number}


def test_a_comma_separated_string_is_a_list_where_the_spec_says_list() -> None:
    endpoints = "https://192.0.2.11:2379,https://192.0.2.12:2379"
    assert convert({"flannel_etcd_endpoints": endpoints, "flannel_reset_devices": "cni0"}) == {
        "flannel_etcd_endpoints": ["https://192.0.2.11:2379", "https://192.0.2.12:2379"],
        "flannel_reset_devices": ["cni0"],
    }


def test_a_dict_may_be_json_or_key_value_text() -> None:
    assert convert({"flannel_cni_delegate_extra": '{"mtu": 1400}'}) == {
        "flannel_cni_delegate_extra": {"mtu": 1400}
    }
    assert convert({"flannel_cni_delegate_extra": "a=1 b=2"}) == {
        "flannel_cni_delegate_extra": {"a": "1", "b": "2"}
    }


def test_strings_stay_strings_and_other_scalars_become_strings() -> None:
    assert convert({"flannel_cni_version": "1.0.0", "flannel_interface": 0}) == {
        "flannel_cni_version": "1.0.0",
        "flannel_interface": "0",
    }


def test_node_paths_are_not_expanded_on_the_controller() -> None:
    """A path is the node's: the controller's ~ and $HOME mean nothing there."""
    values = {"flannel_subnet_file": "~/subnet.env", "flannel_agent_venv": "$HOME/venv"}
    assert convert(values) == values


def test_typed_values_unset_values_and_undocumented_variables_pass_unchanged() -> None:
    values = {
        "flannel_vxlan_vni": 7,
        "flannel_ip_masq": False,
        "flannel_mtu": None,
        "flannel_etcd_endpoints": ["https://192.0.2.11:2379"],
        "flannel_backnd_type": "7",  # a typo: the inventory check names it
    }
    assert convert(values) == values


def test_a_value_that_cannot_be_converted_is_named_by_host_variable_value_and_type() -> None:
    values = {
        "flannel_vxlan_vni": "seven",
        "flannel_etcd_tls": "maybe",
        "flannel_cni_delegate_extra": "not a mapping",
        "flannel_subnet_len": "24",
    }
    converted, problems = role_values.convert_role_values("node2", values)
    assert problems[0] == "node2: flannel_vxlan_vni: 'seven' cannot be converted to int"
    assert problems[1].startswith(
        "node2: flannel_etcd_tls: 'maybe' cannot be converted to bool: "
        "The value 'maybe' is not a valid boolean. Valid booleans include: "
    )
    assert problems[2] == (
        "node2: flannel_cni_delegate_extra: 'not a mapping' cannot be converted to dict: "
        "dictionary requested, could not parse JSON or key=value"
    )
    assert len(problems) == 3
    assert converted["flannel_subnet_len"] == 24


def test_a_secret_that_cannot_be_converted_is_not_shown() -> None:
    with pytest.MonkeyPatch.context() as patch:
        options = {**role_values.role_options()}
        options["flannel_etcd_password"] = {"type": "int", "no_log": True}
        patch.setattr(role_values, "role_options", lambda: options)
        role_values._validator.cache_clear()
        try:
            _, problems = role_values.convert_role_values("h1", {"flannel_etcd_password": "s3"})
        finally:
            role_values._validator.cache_clear()
    assert problems == ["h1: flannel_etcd_password: its value cannot be converted to int"]


# --- through the preflight's cluster check ------------------------------------------------------


def task_vars(settings: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "groups": {"flannel_nodes": sorted(settings)},
        "hostvars": {host: {"_flannel_settings": values} for host, values in settings.items()},
    }


# Every host here has its settings fact: nothing is templated.
TEMPLAR = Templar(loader=DataLoader())
KUBE = {"flannel_datastore": "kubernetes", "flannel_kubeconfig_file": "/etc/kubelet.conf"}


def test_the_cluster_check_sees_converted_values_equal_on_every_host() -> None:
    """An INI host var ("7") and an extra var given as JSON (7) are one cluster-wide value."""
    settings = {
        "h1": {**KUBE, "flannel_vxlan_vni": "7", "flannel_ip_masq": "no"},
        "h2": {**KUBE, "flannel_vxlan_vni": 7, "flannel_ip_masq": False},
    }
    checked = check_cluster(
        task_vars(settings), "flannel_nodes", with_facts=False, read_source=bytes, templar=TEMPLAR
    )
    assert checked.model.flannel_vxlan_vni == 7
    assert checked.model.flannel_ip_masq is False


def test_the_cluster_check_refuses_an_unconvertible_value_before_the_model() -> None:
    settings = {"h1": {**KUBE}, "h2": {**KUBE, "flannel_subnet_len": "twenty-four"}}
    with pytest.raises(InventoryError) as refused:
        check_cluster(
            task_vars(settings),
            "flannel_nodes",
            with_facts=False,
            read_source=bytes,
            templar=TEMPLAR,
        )
    assert refused.value.problems == [
        "h2: flannel_subnet_len: 'twenty-four' cannot be converted to int"
    ]
