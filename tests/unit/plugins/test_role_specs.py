"""Every role documents each of its defaults in meta/argument_specs.yml with the same default,
the preflight role's defaults are the cluster model's own, and its backend choices are the
runtime's backend specs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pyflannel_controller.inventory import CLUSTER_VARIABLES, NODE_VARIABLES
from pyflannel_controller.model.cluster import ClusterModel
from pyflannel_controller.model.cluster_settings import AGENT_BACKEND_SETTINGS, BACKEND_SETTINGS
from pyflannel_runtime.backend_spec import specs, tx_offload

ROLES = Path(__file__).resolve().parents[3] / "roles"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) or {}


@pytest.mark.parametrize("role", sorted(p.name for p in ROLES.iterdir()))
def test_defaults_and_argument_specs_agree(role: str) -> None:
    defaults = load(ROLES / role / "defaults/main.yml")
    options = load(ROLES / role / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    for name, value in defaults.items():
        assert options[name].get("default") == value, name
        assert options[name]["description"], name


def test_preflight_defaults_are_the_models() -> None:
    defaults = load(ROLES / "preflight/defaults/main.yml")
    assert set(CLUSTER_VARIABLES) | set(NODE_VARIABLES) <= set(defaults)
    for name in CLUSTER_VARIABLES:
        expected = ClusterModel.model_fields[name].get_default(call_default_factory=True)
        if expected is not None and not isinstance(expected, bool | int | dict | list):
            expected = str(expected)
        assert defaults[name] == expected, name


def test_preflight_offers_exactly_the_registered_backends_and_their_settings() -> None:
    """A backend is registered once, in pyflannel_runtime.backend_spec.specs; the role's choices
    must follow it (ansible-core checks them before the model sees the inventory)."""
    spec = load(ROLES / "preflight/meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(spec["flannel_backend_type"]["choices"]) == sorted(specs.names())
    assert set(BACKEND_SETTINGS) | set(AGENT_BACKEND_SETTINGS) <= set(spec)
    assert {backend for backend, _ in BACKEND_SETTINGS.values()} <= set(specs.names())
    assert set(AGENT_BACKEND_SETTINGS.values()) <= set(specs.names())
    offload = spec["flannel_vxlan_tx_checksum_offload"]
    assert offload["choices"] == list(tx_offload.MODES)
