"""pyflannel.network.role_value: a role variable's value as its argument spec's type, for the
variables tasks use directly (the cluster model's are converted by the preflight)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.pyflannel.network.plugins.filter.role_value import role_value


def test_a_comma_separated_string_is_the_list_the_spec_says() -> None:
    assert role_value("cni0,docker0", "flannel_reset_devices") == ["cni0", "docker0"]
    assert role_value(["cni0"], "flannel_reset_devices") == ["cni0"]


def test_ints_and_bools_from_text() -> None:
    assert role_value("30", "flannel_etcd_health_retries") == 30
    assert role_value("no", "flannel_verify_repair") is False


def test_a_value_that_cannot_be_converted_is_named() -> None:
    with pytest.raises(AnsibleFilterError) as refused:
        role_value("thirty", "flannel_etcd_health_retries")
    assert str(refused.value) == (
        "role_value: flannel_etcd_health_retries: 'thirty' cannot be converted to int"
    )


def test_a_name_no_role_documents_is_refused() -> None:
    with pytest.raises(AnsibleFilterError, match="flannel_reset_devises is no variable"):
        role_value("cni0", "flannel_reset_devises")
