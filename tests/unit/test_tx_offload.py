"""The vxlan tx checksum offload policy: modes, the auto verdict file, what the agent wants."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.backend.vxlan import offload_verdict
from pyflannel_runtime.backend_spec import tx_offload


@pytest.mark.parametrize(
    ("mode", "verdict", "expected"),
    [
        ("on", None, True),
        ("on", "errors seen", True),  # a verdict counts only in auto mode
        ("off", None, False),
        ("auto", None, True),
        ("auto", "errors seen", False),
    ],
)
def test_wanted(mode: str, verdict: str | None, expected: bool) -> None:
    assert tx_offload.wanted(mode, verdict) is expected


def test_modes_are_checked() -> None:
    for mode in tx_offload.MODES:
        tx_offload.check_mode(mode)
    with pytest.raises(ValueError, match="must be one of on, off, auto"):
        tx_offload.check_mode("On")


reasons = st.text(
    st.characters(codec="utf-8", exclude_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
    max_size=80,
)


@given(reasons)
def test_a_recorded_verdict_reads_back_with_its_reason_on_one_line(reason: str) -> None:
    text = tx_offload.render_verdict(reason)
    assert text.count("\n") == 1 and text.startswith("off: ")
    expected = " ".join(reason.split()) or "the connectivity suite turned it off"
    assert tx_offload.parse_verdict(text) == expected


@pytest.mark.parametrize("text", ["", "\n", "on: fine\n", "offload\n", "of: x\n"])
def test_anything_but_off_is_no_verdict(text: str) -> None:
    assert tx_offload.parse_verdict(text) is None


def test_record_auto_off_writes_once(tmp_path: Path) -> None:
    path = str(tmp_path / "state" / "verdict")
    assert offload_verdict.read_auto_verdict(path) is None
    assert offload_verdict.record_auto_off("UdpInCsumErrors +3 at node2", path)
    assert not offload_verdict.record_auto_off("again", path)
    assert offload_verdict.read_auto_verdict(path) == "UdpInCsumErrors +3 at node2"
    assert (tmp_path / "state" / "verdict").stat().st_mode & 0o777 == 0o644


def test_describe_names_the_state_and_where_it_comes_from() -> None:
    assert tx_offload.describe("off", False, None) == (
        "tx checksum offload off (--vxlan-tx-checksum-offload=off)"
    )
    assert tx_offload.describe("auto", False, "errors") == "tx checksum offload off (auto: errors)"
    assert tx_offload.describe("auto", True, None) == (
        "tx checksum offload on (auto: no checksum errors seen)"
    )
    assert tx_offload.describe("on", None, None).startswith("tx checksum offload unknown")
