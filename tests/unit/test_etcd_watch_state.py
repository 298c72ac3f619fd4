"""The lease watch's state kept between runs (pyflannel_runtime/subnet/etcd/resume.py): its file
format, what reading a damaged one does, and what the record keeps. No etcd: the manager's use
of it is tests/integration/test_etcd_resume.py's."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.subnet.etcd import resume
from pyflannel_runtime.subnet.etcd.client import KeyValue, WatchEvent, WatchResponse
from pyflannel_runtime.subnet.etcd.resume import WatchRecord, WatchState, decode, encode, read_state

PREFIX = b"/coreos.com/network/subnets/"

kvs = st.lists(
    st.builds(
        KeyValue,
        st.binary(max_size=40),
        st.binary(max_size=200),
        st.integers(0, 2**63 - 1),
        st.integers(1, 2**63 - 1),
    ),
    max_size=20,
)


@given(kvs=kvs, cluster_id=st.integers(0, 2**64 - 1), revision=st.integers(1, 2**63 - 1))
def test_a_state_reads_back_as_written(kvs: list[KeyValue], cluster_id: int, revision: int) -> None:
    state = WatchState(prefix=PREFIX, cluster_id=cluster_id, revision=revision, kvs=kvs)
    assert decode(encode(state)) == state


def kept(revision: int = 7) -> bytes:
    kv = KeyValue(PREFIX + b"10.244.1.0-24", b'{"PublicIP":"192.0.2.1"}', 0, 5)
    return encode(WatchState(prefix=PREFIX, cluster_id=9, revision=revision, kvs=[kv]))


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (kept()[:-20], "truncated"),
        (b"", "truncated"),
        (b"\x00\xff garbage", "malformed"),
        (b"[]", "Expected `object`"),
        (kept().replace(b'"format":1', b'"format":2'), "format 2, not 1"),
        (kept(revision=0), "revision 0"),
        (kept().replace(b'"revision":7', b'"revision":"7"'), "Expected `int`"),
        (b'{"x":' * 100_000 + b"1" + b"}" * 100_000, "nested too deep"),
    ],
)
def test_a_damaged_state_says_why(data: bytes, why: str) -> None:
    found = decode(data)
    assert isinstance(found, str) and why in found


def test_reading_a_state_warns_of_one_it_cannot_use(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / resume.STATE_FILE_NAME
    with caplog.at_level(logging.WARNING):
        assert read_state(str(path), PREFIX) is None  # none yet: not worth a warning
        assert caplog.text == ""
        path.write_bytes(kept())
        assert read_state(str(path), PREFIX) == decode(kept())
        assert read_state(str(path), b"/other/subnets/") is None
        path.write_bytes(kept()[:10])
        assert read_state(str(path), PREFIX) is None
    assert "it is of /coreos.com/network/subnets/, not /other/subnets/" in caplog.text
    assert f"Ignoring the lease watch's state in {path}: Input data was truncated" in caplog.text


def put(key: bytes, revision: int, value: bytes = b"v") -> WatchEvent:
    return WatchEvent(False, KeyValue(PREFIX + key, value, 0, revision))


def delete(key: bytes, revision: int) -> WatchEvent:
    return WatchEvent(True, KeyValue(PREFIX + key, b"", 0, revision))


def test_the_record_keeps_the_keys_as_the_watch_has_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(resume.time, "monotonic", lambda: clock[0])
    path = tmp_path / resume.STATE_FILE_NAME
    record = WatchRecord(str(path), PREFIX)
    record.reset([KeyValue(PREFIX + b"a", b"1", 0, 3)], revision=4, cluster_id=9)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_state(str(path), PREFIX) == WatchState(
        prefix=PREFIX, cluster_id=9, revision=4, kvs=[KeyValue(PREFIX + b"a", b"1", 0, 3)]
    )

    # A message's events; then one whose header is ahead of its events; then a progress
    # notification, whose header revision every event up to has been sent.
    record.apply(WatchResponse((put(b"b", 5), delete(b"a", 6)), 6))
    record.apply(WatchResponse((put(b"b", 7, b"2"),), 30))
    state = read_state(str(path), PREFIX)
    assert state is not None and state.revision == 4  # not yet SAVE_INTERVAL since the last
    record.save(force=True)
    state = read_state(str(path), PREFIX)
    assert state is not None and (state.revision, state.kvs) == (
        7,
        [KeyValue(PREFIX + b"b", b"2", 0, 7)],
    )
    clock[0] += resume.SAVE_INTERVAL
    record.apply(WatchResponse((), 12))
    state = read_state(str(path), PREFIX)
    assert state is not None and state.revision == 12
    path.unlink()
    record.save(force=True)  # nothing changed since: nothing written
    assert not path.exists()
