"""Lease JSON and subnet keys, byte for byte against flannel's examples (flannel-io/flannel
Documentation/reservations.md, pkg/subnet/subnet_test.go)."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.wire.lease import (
    Lease,
    LeaseAttrs,
    LeaseError,
    make_subnet_key,
    parse_ipv4,
    parse_subnet_key,
)
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data

RESERVATIONS_EXAMPLE = (
    '{"PublicIP":"192.168.64.3","PublicIPv6":null,"BackendType":"vxlan",'
    '"BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}'
)


def test_reservations_example_round_trips_byte_for_byte() -> None:
    attrs = LeaseAttrs.from_json(RESERVATIONS_EXAMPLE)
    assert attrs.public_ip == IPv4Address("192.168.64.3")
    assert attrs.backend_type == "vxlan"
    assert attrs.to_json() == RESERVATIONS_EXAMPLE


def test_built_vxlan_attrs_match_example() -> None:
    attrs = LeaseAttrs(
        public_ip=IPv4Address("192.168.64.3"),
        backend_type="vxlan",
        backend_data=vxlan_backend_data(1, "C6:D2:32:6F:8F:44"),
    )
    assert attrs.to_json() == RESERVATIONS_EXAMPLE


def test_udp_lease_has_no_backend_type() -> None:
    assert (
        LeaseAttrs(IPv4Address("10.0.0.5")).to_json() == '{"PublicIP":"10.0.0.5","PublicIPv6":null}'
    )


def test_zero_public_ip_and_ipv6_present() -> None:
    attrs = LeaseAttrs(public_ipv6=IPv6Address("fd00::1"), backend_type="host-gw")
    assert (
        attrs.to_json() == '{"PublicIP":"0.0.0.0","PublicIPv6":"fd00::1","BackendType":"host-gw"}'
    )


def test_dual_stack_vxlan_attrs() -> None:
    attrs = LeaseAttrs(
        IPv4Address("192.0.2.11"),
        IPv6Address("2001:db8::11"),
        "vxlan",
        vxlan_backend_data(1, "02:00:00:00:00:01"),
        vxlan_backend_data(1, "02:00:00:00:00:02"),
    )
    text = attrs.to_json()
    assert text == (
        '{"PublicIP":"192.0.2.11","PublicIPv6":"2001:db8::11","BackendType":"vxlan",'
        '"BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:00:01"},'
        '"BackendV6Data":{"VNI":1,"VtepMAC":"02:00:00:00:00:02"}}'
    )
    assert LeaseAttrs.from_json(text) == attrs


def test_decoding_is_case_insensitive_and_compacts_backend_data() -> None:
    attrs = LeaseAttrs.from_json('{"publicip": "10.1.1.1", "backenddata": { "VNI" : 2 }}')
    assert attrs.public_ip == IPv4Address("10.1.1.1")
    assert attrs.backend_data == '{"VNI":2}'


@pytest.mark.parametrize("bad", ["", "[]", '{"PublicIP":"nope"}', '{"PublicIP":5}', "{"])
def test_malformed_lease_json_is_a_lease_error(bad: str) -> None:
    with pytest.raises(LeaseError):
        LeaseAttrs.from_json(bad)


def test_subnet_keys() -> None:
    assert make_subnet_key(IPv4Network("10.5.52.0/24"), None) == "10.5.52.0-24"
    assert (
        make_subnet_key(IPv4Network("10.12.13.0/24"), IPv6Network("fd00:12:13::/56"))
        == "10.12.13.0-24&fd00:12:13::-56"
    )
    assert parse_subnet_key("/coreos.com/network/subnets/10.5.52.0-24") == (
        IPv4Network("10.5.52.0/24"),
        None,
    )
    assert parse_subnet_key("10.12.13.0-24&fd00:12:13::-56") == (
        IPv4Network("10.12.13.0/24"),
        IPv6Network("fd00:12:13::/56"),
    )


@pytest.mark.parametrize(
    "bad", ["10.12.13.0-24hi", "10.12.13.300-24", "10.12.13.0-24&2001::", "10.0.0.0-33", "x"]
)
def test_invalid_subnet_keys(bad: str) -> None:
    with pytest.raises(LeaseError):
        parse_subnet_key(bad)


@given(
    v4=st.integers(0, 2**32 - 1),
    len4=st.integers(0, 31),
    v6=st.none() | st.tuples(st.integers(0, 2**128 - 1), st.integers(0, 127)),
)
def test_subnet_key_round_trip(v4: int, len4: int, v6: tuple[int, int] | None) -> None:
    # Go parses the lengths as 5- and 7-bit uints, so /32 and /128 keys are not valid keys.

    sn4 = IPv4Network((v4, len4), strict=False)
    sn6 = IPv6Network(v6, strict=False) if v6 else None
    assert parse_subnet_key(make_subnet_key(sn4, sn6)) == (sn4, sn6)


@given(
    ip=st.ip_addresses(v=4),
    ipv6=st.none() | st.ip_addresses(v=6),
    backend_type=st.sampled_from(["", "vxlan", "host-gw"]),
    data=st.none()
    | st.dictionaries(
        st.text("abcXYZ019", min_size=1, max_size=5),
        st.integers(-(2**40), 2**40) | st.text(max_size=8),
        max_size=3,
    ),
)
def test_fast_and_general_decoding_agree(
    ip: IPv4Address, ipv6: IPv6Address | None, backend_type: str, data: dict[str, object] | None
) -> None:
    import json

    from pyflannel_runtime.gojson.structs import compact

    raw = None if data is None else compact(data)
    attrs = LeaseAttrs(ip, ipv6, backend_type, raw, raw if ipv6 is not None else None)
    text = attrs.to_json()
    # What the general (Go-rules) decoder makes of the text, with the fast path bypassed by
    # a leading space that JSON ignores.
    assert LeaseAttrs.from_json(text) == LeaseAttrs.from_json(" " + text) == attrs
    assert json.loads(LeaseAttrs.from_json(text).to_json()) == json.loads(text)


# --- what the mutation run showed untested ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"PublicIP":5}', "invalid public IP in lease: 5 is not a string"),
        ('{"PublicIPv6":true}', "invalid public IP in lease: True is not a string"),
        ('{"PublicIP":"nope"}', "invalid public IP in lease: Expected 4 octets in 'nope'"),
        (
            '{"PublicIP":"1.2.3.300","PublicIPv6":null}',  # the fast path's layout
            "invalid public IP in lease: Octet 300 (> 255) not permitted in '1.2.3.300'",
        ),
        (
            '{"BackendType":5}',
            "json: cannot unmarshal into Go struct field BackendType of type string",
        ),
        ("[]", "json: cannot unmarshal array into Go value of type lease.LeaseAttrs"),
    ],
)
def test_lease_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(LeaseError) as err:
        LeaseAttrs.from_json(text)
    assert str(err.value) == message


def test_a_json_syntax_error_passes_the_decoders_reason_on() -> None:
    with pytest.raises(LeaseError) as err:
        LeaseAttrs.from_json("{")
    assert str(err.value) and str(err.value) != "None"


def test_leases_decode_from_bytes_and_default_to_no_public_ip() -> None:
    attrs = LeaseAttrs(IPv4Address("192.0.2.7"), IPv6Address("2001:db8::7"), "vxlan", '{"VNI":1}')
    assert LeaseAttrs.from_json(attrs.to_json().encode()) == attrs
    assert LeaseAttrs.from_json(b" " + attrs.to_json().encode()) == attrs
    assert LeaseAttrs.from_json(b"{}") == LeaseAttrs() == LeaseAttrs.from_json("{}")
    with pytest.raises(LeaseError):
        LeaseAttrs.from_json(b'{"PublicIP":"1.2.3.4\xff"}')


def test_the_general_decoder_keeps_the_ipv6_backend_data() -> None:
    attrs = LeaseAttrs.from_json(
        '{ "PublicIP": "192.0.2.7", "BackendType": "vxlan", "backendV6Data": {"VNI": 1} }'
    )
    assert (attrs.backend_type, attrs.backend_data, attrs.backend_v6_data) == (
        "vxlan",
        None,
        '{"VNI":1}',
    )


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("10.0.0.0-31", (IPv4Network("10.0.0.0/31"), None)),
        ("10.0.0.0-32", None),  # Go reads the length as a 5-bit uint
        ("10.0.0.0-24&fd00::-127", (IPv4Network("10.0.0.0/24"), IPv6Network("fd00::/127"))),
        ("10.0.0.0-24&fd00::-128", None),  # a 7-bit uint
        ("10.0.0.0-24&fd00::1-64", (IPv4Network("10.0.0.0/24"), IPv6Network("fd00::/64"))),
    ],
)
def test_subnet_key_lengths_and_host_bits(
    key: str, parsed: tuple[IPv4Network, IPv6Network | None] | None
) -> None:
    if parsed is not None:
        assert parse_subnet_key(key) == parsed
        return
    with pytest.raises(LeaseError) as err:
        parse_subnet_key(key)
    assert str(err.value) == f"invalid subnet key: {key}"


def test_invalid_subnet_key_message() -> None:
    with pytest.raises(LeaseError, match=r"^invalid subnet key: x$"):
        parse_subnet_key("x")


def test_a_dual_stack_lease_key_names_both_subnets() -> None:
    lease = Lease(IPv4Network("10.12.13.0/24"), IPv6Network("fd00:12:13::/56"), LeaseAttrs())
    assert lease.key() == "10.12.13.0-24&fd00:12:13::-56"


def test_subnet_key_segment_bound_is_exact() -> None:
    """The last path segment is searched only up to 128 characters; the prefix path may be
    longer, and an error shows a long key cut."""
    fitting = "x" * (128 - len("10.0.0.0-24")) + "10.0.0.0-24"
    assert parse_subnet_key(fitting) == (IPv4Network("10.0.0.0/24"), None)
    assert parse_subnet_key("/" + "p" * 300 + "/" + fitting)[0] == IPv4Network("10.0.0.0/24")
    with pytest.raises(LeaseError, match=r"^invalid subnet key: x{118}10\.0\.0\.0-24$"):
        parse_subnet_key("x" + fitting)
    whole = "y" * 256
    with pytest.raises(LeaseError, match=rf"^invalid subnet key: {whole}$"):
        parse_subnet_key(whole)
    with pytest.raises(LeaseError) as err:
        parse_subnet_key("y" * 257)
    assert str(err.value) == f"invalid subnet key: {'y' * 128}... (257 characters)"


def test_a_canonical_lease_beyond_the_document_bound_is_refused() -> None:
    data = '{"VNI":1,"VtepMAC":"' + "a" * (1 << 20) + '"}'
    text = (
        '{"PublicIP":"192.0.2.7","PublicIPv6":null,"BackendType":"vxlan","BackendData":'
        + data
        + "}"
    )
    with pytest.raises(LeaseError):
        LeaseAttrs.from_json(text)


def _octet_texts() -> st.SearchStrategy[str]:
    """Octets as written, the tricky ones too: leading zeros, too large, signs, blanks, other
    digits."""
    return st.one_of(
        st.integers(0, 999).map(str),
        st.integers(0, 255).map(lambda n: f"0{n}"),
        st.sampled_from(
            ["", "+1", "-1", " 1", "1 ", "0x1", "1e1", "\u0661", "\x00", "256", "0000"]
        ),
    )


ADDRESS_TEXTS = st.one_of(
    st.lists(_octet_texts(), min_size=1, max_size=6).map(".".join),
    st.from_regex(r"[0-9.:a-f%/]{0,20}", fullmatch=True),
    st.text(max_size=20),
)


def _reference_ipv4(text: str) -> IPv4Address | None:
    try:
        return IPv4Address(text)
    except ValueError:
        return None


@given(ADDRESS_TEXTS)
def test_parse_ipv4_accepts_exactly_what_ipaddress_does(text: str) -> None:
    try:
        parsed: IPv4Address | None = parse_ipv4(text)
    except ValueError:
        parsed = None
    assert parsed == _reference_ipv4(text)
