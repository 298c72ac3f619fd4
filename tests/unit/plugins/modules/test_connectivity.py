"""pyflannel.network.connectivity: its choices are the runtime's."""

from __future__ import annotations

from ansible_collections.pyflannel.network.plugins.modules import connectivity

from pyflannel_runtime.backend_spec import tx_offload
from pyflannel_runtime.connectivity.scenarios import GROUPS


def test_the_module_offers_the_runtimes_groups_and_offload_modes() -> None:
    assert list(GROUPS) == connectivity.GROUPS
    assert "choices: ['on', 'off', auto]" in connectivity.DOCUMENTATION
    assert list(tx_offload.MODES) == ["on", "off", "auto"]
