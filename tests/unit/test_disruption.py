"""The disruption probe's pure parts: its messages, the connections a node opens, each
connection's account of a window, and the tables."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.connectivity.disruption import (
    MESSAGE,
    OUTSIDE,
    Account,
    Path,
    Report,
    Row,
    Target,
    message,
    parse_message,
    parse_outside,
    summarize,
    table_lines,
    targets,
)
from pyflannel_runtime.connectivity.wire import WireError

nonces = st.integers(0, 2**32 - 1)
sequences = st.integers(0, 2**64 - 1)


@given(nonces, sequences)
def test_a_message_reads_back_as_written(nonce: int, sequence: int) -> None:
    assert parse_message(message(nonce, sequence)) == (nonce, sequence)
    assert len(message(nonce, sequence)) == MESSAGE.size


@given(st.binary(max_size=40))
def test_anything_else_is_not_a_message(data: bytes) -> None:
    if len(data) == MESSAGE.size and data.startswith(b"PFD1"):
        return
    with pytest.raises(WireError):
        parse_message(data)


def setup_of(node: int) -> dict[str, object]:
    return {
        "pods": [
            {"name": "probe", "ip": f"10.244.{node}.2", "tcp_port": 1000 + node},
            {"name": "probe-2", "ip": f"10.244.{node}.3", "tcp_port": 2000 + node},
        ]
    }


@given(st.integers(1, 8), st.booleans())
def test_every_node_opens_each_path_once_to_every_other(count: int, outside: bool) -> None:
    setups = {f"node{n}": setup_of(n) for n in range(1, count + 1)}
    reached = ("198.51.100.2", 7472) if outside else None
    every = [t for node in setups for t in targets(node, setups, reached)]
    pairs = {(t.path, t.source, t.target) for t in every}
    assert len(pairs) == len(every), "one connection per path and pair"
    for source in setups:
        others = {n for n in setups if n != source}
        for path in (Path.POD_POD, Path.HOST_POD):
            assert {t for p, s, t in pairs if p is path and s == source} == others
        assert (Path.POD_POD_LOCAL, source, source) in pairs
        assert ((Path.POD_OUTSIDE, source, OUTSIDE) in pairs) == outside
    for target in every:
        host_side = target.path is Path.HOST_POD
        assert (target.netns is None) == host_side
        if not host_side:
            assert target.netns == "probe"
        node = 0 if target.target == OUTSIDE else int(target.target.removeprefix("node"))
        if target.path is Path.POD_POD_LOCAL:
            assert (target.address, target.port) == (f"10.244.{node}.3", 2000 + node)
        elif target.path is not Path.POD_OUTSIDE:
            assert (target.address, target.port) == (f"10.244.{node}.2", 1000 + node)
        assert Target.of(target.as_dict()) == target


def test_a_node_without_a_setup_opens_nothing() -> None:
    with pytest.raises(KeyError):
        targets("node9", {"node1": setup_of(1)}, None)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("", None), ("198.51.100.2", None), ("198.51.100.2:7472", ("198.51.100.2", 7472))],
)
def test_the_outside_reached_is_an_address_and_a_port(
    text: str, parsed: tuple[str, int] | None
) -> None:
    assert parse_outside(text) == parsed


@pytest.mark.parametrize("text", [":7472", "198.51.100.2:port"])
def test_an_outside_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_outside(text)


# --- the account -------------------------------------------------------------------------------


@dataclass
class Model:
    """What happened, told plainly: each message's fate, and the echoes' arrival times."""

    sent: int = 0
    echoed: int = 0
    lost: int = 0
    in_flight: int = 0
    up: bool = True
    resets: int = 0


events = st.lists(
    st.tuples(
        st.sampled_from(["send", "echo", "break", "reconnect", "window", "wait"]),
        st.floats(0.0, 5.0, allow_nan=False),
    ),
    max_size=60,
)


@given(events)
def test_the_account_loses_nothing_it_does_not_say(steps: list[tuple[str, float]]) -> None:
    """Over any run of events, every message sent is echoed, lost or still awaited; the longest
    gap in a window is at least every gap between two echoes in it (reports round to the
    millisecond)."""
    now = 100.0
    account = Account.opened(now)
    model = Model()
    totals = {"sent": 0, "echoed": 0, "lost": 0, "resets": 0}
    last_echo = now
    gaps: list[float] = []
    for kind, wait in steps:
        if kind == "wait":
            now += wait
        elif kind == "send" and model.up:
            account.on_sent()
            model.sent += 1
            model.in_flight += 1
        elif kind == "echo" and model.up and model.in_flight:
            now += wait
            account.on_echo(now)
            model.in_flight -= 1
            model.echoed += 1
            gaps.append(now - last_echo)
            last_echo = now
        elif kind == "break" and model.up:
            account.on_broken("reset by the far end")
            model.lost += model.in_flight
            model.in_flight = 0
            model.up = False
            model.resets += 1
        elif kind == "reconnect" and not model.up:
            account.on_reconnected()
            model.up = True
        elif kind == "window":
            report = account.report(now)
            assert report.longest_gap >= max(gaps, default=0.0) - 0.001
            assert report.pending == model.in_flight
            assert report.up == model.up
            for key in ("sent", "echoed", "lost", "resets"):
                totals[key] += getattr(report, key)
            account.next_window(now)
            gaps = []
    report = account.report(now)
    assert report.pending == model.in_flight
    assert report.longest_gap >= max(gaps, default=0.0) - 0.001
    for key in ("sent", "echoed", "lost", "resets"):
        totals[key] += getattr(report, key)
    assert totals["sent"] == model.sent
    assert totals["echoed"] == model.echoed
    assert totals["lost"] == model.lost
    assert totals["sent"] == totals["echoed"] + totals["lost"] + report.pending
    assert totals["resets"] == model.resets


def test_a_stall_going_on_counts_until_the_report() -> None:
    account = Account.opened(0.0)
    account.on_sent()
    account.on_echo(0.05)
    account.on_sent()
    assert account.report(4.0).longest_gap == pytest.approx(3.95)
    assert account.report(4.0).pending == 1
    # Across a window's end too: the new window sees the stall from where it began.
    account.next_window(4.0)
    account.on_echo(6.05)
    assert account.report(6.1).longest_gap == pytest.approx(6.0)


def test_a_quiet_connection_has_no_gap_going_on() -> None:
    account = Account.opened(0.0)
    account.on_sent()
    account.on_echo(0.1)
    assert account.report(10.0).longest_gap == pytest.approx(0.1)


def test_a_connection_down_counts_its_outage_and_breaks_once() -> None:
    account = Account.opened(0.0)
    for _ in range(3):
        account.on_sent()
    account.on_echo(0.2)
    account.on_broken("reset by the far end")
    account.on_broken("closed by the far end")  # already down: nothing more to count
    report = account.report(2.0)
    assert (report.resets, report.lost, report.pending, report.up) == (1, 2, 0, False)
    assert report.reasons == ("reset by the far end",)
    assert report.longest_gap == pytest.approx(1.8)


def test_an_unopened_connection_is_down_from_the_start() -> None:
    account = Account.unopened(1.0, "cannot open: connection refused")
    report = account.report(3.5)
    assert not report.up and report.longest_gap == pytest.approx(2.5)
    assert report.reasons == ("cannot open: connection refused",)
    account.on_reconnected()
    assert account.report(4.0).reasons == ()


def test_a_connection_down_says_why_it_broke_and_why_it_stays_down() -> None:
    account = Account.opened(0.0)
    account.on_broken("closed by the far end")
    account.on_unreachable("cannot open: connection refused")
    account.on_unreachable("cannot open: timed out")
    assert account.report(5.0).reasons == ("closed by the far end", "cannot open: timed out")


# --- rows and tables ----------------------------------------------------------------------------

reports = st.builds(
    Report,
    sent=st.integers(0, 10**6),
    echoed=st.integers(0, 10**6),
    lost=st.integers(0, 10**6),
    pending=st.integers(0, 10**6),
    resets=st.integers(0, 100),
    reconnects=st.integers(0, 100),
    longest_gap=st.floats(0, 10**4, allow_nan=False).map(lambda f: round(f, 3)),
    seconds=st.floats(0, 10**5, allow_nan=False).map(lambda f: round(f, 3)),
    up=st.booleans(),
    reasons=st.lists(st.text(max_size=20), max_size=3).map(tuple),
)
rows = st.builds(
    Row,
    st.builds(
        Target,
        st.sampled_from(Path),
        st.sampled_from(["node1", "node2"]),
        st.sampled_from(["node1", "node2", OUTSIDE]),
        st.sampled_from([None, "pyflannel-disrupt"]),
        st.just("10.244.1.2"),
        st.integers(1, 65535),
    ),
    reports,
)


@given(rows)
def test_a_row_crosses_to_the_controller_and_back(row: Row) -> None:
    assert Row.of(row.as_dict()) == row


@given(st.lists(rows, min_size=1, max_size=12))
def test_the_table_has_a_line_per_connection_and_per_path(many: list[Row]) -> None:
    lines = table_lines(many)
    summaries = summarize(many)
    assert len(lines) == 1 + len(many) + len(summaries)
    assert sum(s.connections for s in summaries) == len(many)
    for summary in summaries:
        taking = [r for r in many if r.target.path is summary.path]
        assert summary.resets == sum(r.report.resets for r in taking)
        assert summary.lost == sum(r.report.lost for r in taking)
        assert summary.longest_gap == max(r.report.longest_gap for r in taking)
    assert [s.path for s in summaries] == [p for p in Path if p in {s.path for s in summaries}]


def test_the_table_says_how_each_connection_fared() -> None:
    quiet = Row(
        Target(Path.POD_POD, "node1", "node2", "p", "10.244.2.2", 1),
        Report(100, 100, 0, 0, 0, 0, 0.14, 10.0, True),
    )
    broken = Row(
        Target(Path.POD_OUTSIDE, "node1", OUTSIDE, "p", "198.51.100.2", 7472),
        Report(100, 90, 10, 0, 1, 1, 2.5, 10.0, True, ("reset by the far end",)),
    )
    lines = table_lines([quiet, broken], "after the roll")
    assert lines[0] == "after the roll: 2 connections, a message every 0.1 s, over 10.0 s"
    assert "pod→pod across nodes" in lines[1] and "node1→node2" in lines[1]
    assert lines[1].endswith("0 reset, gap 0.14 s, 0 lost")
    assert lines[2].endswith("1 reset, gap 2.50 s, 10 lost (reset by the far end)")
    assert table_lines([]) == ["disruption probe: no connections"]
    assert not quiet.disturbed and broken.disturbed
