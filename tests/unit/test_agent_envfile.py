"""The agent's environment file reads back exactly what `python -m pyflannel_controller render` writes into it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pyflannel_controller.render.render import _env_value
from pyflannel_runtime.agent.envfile import parse_env_file

# One line of text, as the cluster model allows in any value.
values = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\0"))


@given(values)
def test_a_rendered_value_reads_back_unchanged(value: str) -> None:
    line = f"FLANNELD_ETCD_PASSWORD={_env_value(value)}\n"
    assert parse_env_file(line) == {"FLANNELD_ETCD_PASSWORD": value}


def test_comments_blank_and_foreign_lines_are_skipped() -> None:
    text = (
        "# pyflanneld settings\n"
        "\n"
        "; also a comment\n"
        "FLANNELD_IFACE=eth0\n"
        "not an assignment\n"
        "  FLANNELD_IP_MASQ = true  \n"
        "FLANNELD_ETCD_PREFIX='/x y'\n"
        'FLANNELD_ETCD_PASSWORD="a\\nb\\\\c\\"d"\n'
    )
    assert parse_env_file(text) == {
        "FLANNELD_IFACE": "eth0",
        "FLANNELD_IP_MASQ": "true",
        "FLANNELD_ETCD_PREFIX": "/x y",
        "FLANNELD_ETCD_PASSWORD": 'a\\nb\\c"d',  # as systemd: only \\ \" \` \$ are escapes
    }
