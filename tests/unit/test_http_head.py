"""The health server's request heads (pyflannel_runtime/agent/http_head.py): the outcome is the
same however the bytes are split, known as early as it can be, and never more than one partial
line is kept; answers are encoded as the server has always written them."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.agent.http_head import (
    Answer,
    HeadLimits,
    HeadReader,
    Refusal,
    Request,
    status_answer,
)

LIMITS = HeadLimits(max_bytes=256, max_lines=4)
TOKEN = st.text(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    min_size=1,
    max_size=8,
)
TARGET = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)
HEADER = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30).map(
    lambda value: f"X-H: {value}"
)


def read(data: bytes, cuts: list[int], limits: HeadLimits = LIMITS) -> Request | Refusal | None:
    """Feed `data` cut at `cuts`, each piece no longer than the reader's room (as the server
    reads), until there is an outcome."""
    reader = HeadReader(limits)
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
    for piece in pieces:
        while piece:
            taken, piece = piece[: reader.room()], piece[reader.room() :]
            outcome = reader.feed(taken)
            if outcome is not None:
                return outcome
    return None


HEADS = st.builds(
    lambda method, target, headers, newline: newline.join(
        [f"{method} {target} HTTP/1.1", *headers, "", ""]
    ).encode(),
    TOKEN,
    TARGET,
    st.lists(HEADER, max_size=LIMITS.max_lines + 2),
    st.sampled_from(["\r\n", "\n"]),
)


@given(st.one_of(st.binary(max_size=600), HEADS), st.lists(st.integers(min_value=0), max_size=20))
def test_any_bytes_in_any_pieces_have_the_outcome_of_one_piece(
    data: bytes, cuts: list[int]
) -> None:
    assert read(data, cuts) == read(data, [])


@given(TOKEN, TARGET, st.lists(HEADER, max_size=LIMITS.max_lines), st.sampled_from(["\r\n", "\n"]))
def test_a_head_within_the_caps_is_read_whatever_follows(
    method: str, target: str, headers: list[str], newline: str
) -> None:
    lines = [f"{method} {target} HTTP/1.1", *headers, "", ""]
    head = newline.join(lines).encode()
    outcome = read(head + b"\x00 any body", [])
    if len(head) <= LIMITS.max_bytes:
        assert outcome == Request(method, target)
    else:
        assert outcome == Refusal(431)


@given(st.integers(min_value=LIMITS.max_lines + 1, max_value=LIMITS.max_lines + 5))
def test_a_header_line_past_the_cap_is_refused_before_the_head_ends(lines: int) -> None:
    head = b"GET / HTTP/1.1\r\n" + b"A: b\r\n" * lines
    assert read(head, []) == Refusal(431)


def test_a_head_one_byte_past_the_size_cap_is_refused_and_one_that_fits_is_read() -> None:
    line = b"GET / HTTP/1.1\r\n"
    fits = line + b"A: " + b"b" * (LIMITS.max_bytes - len(line) - 7) + b"\r\n\r\n"
    assert len(fits) == LIMITS.max_bytes
    assert read(fits, []) == Request("GET", "/")
    assert read(fits[:-4] + b"b\r\n\r\n", []) == Refusal(431)
    # An endless line is refused once one byte past the cap has come.
    assert read(b"GET /" + b"a" * (LIMITS.max_bytes - 5), []) is None
    assert read(b"GET /" + b"a" * (LIMITS.max_bytes - 4), []) == Refusal(431)


def test_bytes_no_request_line_holds_are_refused_on_arrival() -> None:
    reader = HeadReader(LIMITS)
    assert reader.feed(b"GET /hea") is None
    assert reader.feed(b"\x16") == Refusal(400)


def test_the_reader_keeps_one_partial_line_at_most() -> None:
    reader = HeadReader(HeadLimits(max_bytes=10_000, max_lines=100))
    assert reader.feed(b"GET / HTTP/1.1\r\n" + b"A: b\r\n" * 50 + b"Partial: x") is None
    assert reader.room() == 10_000 + 1 - len(
        b"GET / HTTP/1.1\r\n" + b"A: b\r\n" * 50 + b"Partial: x"
    )
    assert len(reader._partial) == len(b"Partial: x")


def test_the_path_leaves_out_the_query() -> None:
    assert Request("GET", "/readyz?verbose=1").path == "/readyz"


def test_answers_are_encoded_as_the_server_always_wrote_them() -> None:
    answer = Answer(503, "text/plain; charset=utf-8", b"flanneld is not ready yet")
    head = (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"X-Content-Type-Options: nosniff\r\nContent-Length: 25\r\nConnection: close\r\n\r\n"
    )
    assert answer.encode() == head + b"flanneld is not ready yet"
    assert answer.encode(with_body=False) == head
    assert status_answer(431).body == b"431 Request Header Fields Too Large"
