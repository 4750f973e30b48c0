"""The direct put (``MessageStore.wire.put_messages``: rmqlog.log.encode.direct,
rmqlog.access.direct_append, rmqlog.queue.direct_dispatch, IndexFile.add_few) pinned to the
vectorized wire put (``put_wire``): the same commitlog bytes, consume-queue units, index files
and results on random input, the same errors; its dispatch from the records' own fields; its
crash points."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import kill_at_crash_point, small_store_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmqlog
from rmqlog import ManualClock, MessageStore, StoreError, WireMessage
from rmqlog.access.wire import wire_messages_table
from rmqlog.index.index_keys import direct_keys, message_keys
from rmqlog.log.encode.direct import encode_direct
from rmqlog.log.msgid import UniqKeyGenerator

NOW = 1_800_000_000_000
TOPICS = ["T", "Other_topic-2", "%RETRY%g"]


class CountingUniq(UniqKeyGenerator):
    """Ids from a counter: two stores make the same ids in the same order."""

    def __init__(self) -> None:
        super().__init__(b"\x0a\x00\x00\x01", wall_ms=lambda: NOW)
        self._prefix = b"\x0a\x00\x00\x01\x00\x01\x00\x00\x00\x07"
        self._head = b"UNIQ_KEY\x01" + self._prefix.hex().upper().encode()
        self._pid = __import__("os").getpid()
        self.n = 0

    def reserve(self, n: int) -> int:
        start, self.n = self.n, self.n + n
        return start


def _open(root: Path, **config: Any) -> MessageStore:
    s = MessageStore.open(root, config=small_store_config(**config), clock=ManualClock(NOW))
    s.appender.uniq = CountingUniq()
    for t in TOPICS:
        s.create_topic(t, 4)
    return s


def _files(root: Path) -> dict[str, bytes]:
    """Every file of the log, queues and index (not the state files: their slots differ by
    what each path happened to write, not by content)."""
    out = {}
    for folder in ("commitlog", "consumequeue", "index"):
        for p in sorted((root / folder).rglob("*")):
            if p.is_file():
                out[str(p.relative_to(root))] = p.read_bytes()
    return out


PROPS = st.lists(
    st.sampled_from(
        [
            "UNIQ_KEY\x01C0A800010000000000000000000001",
            "TAGS\x01a",
            "TAGS\x01b",
            "KEYS\x01k1",
            "KEYS\x01k1 k2  k3",
            "WAIT\x01true",
            "WAIT\x01false",
            "CLUSTER\x01mine",
            "PGROUP\x01pg",
            "p\x01v",
            "MAX_RECONSUME_TIMES\x013",
        ]
    ),
    max_size=5,
).map(lambda items: "".join(i + "\x02" for i in items))


def _clean(host: str | bytes | None) -> st.SearchStrategy[WireMessage]:
    return st.builds(
        WireMessage,
        st.sampled_from(TOPICS),
        st.integers(0, 3),
        st.binary(max_size=300),
        st.integers(-5, 5),
        st.sampled_from([0, 1, 2, 3, 8, 9]),
        st.integers(0, NOW),
        st.just(host),
        PROPS,
        st.integers(0, 20),
    )


#: a put's messages come from one connection: one born host (a mix of IPv4 and IPv6 is refused)
BATCH = st.sampled_from([None, "10.1.2.3:4000", "[::1]:9", b"\x7f\x00\x00\x01\x00\x00\x10\x00"]).flatmap(
    lambda host: st.lists(_clean(host), min_size=1, max_size=6)
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(BATCH, min_size=1, max_size=5), cluster=st.sampled_from([None, "DefaultCluster"]))
def test_direct_put_writes_what_the_vectorized_put_writes(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[WireMessage]], cluster: str | None
) -> None:
    base = tmp_path_factory.mktemp("direct")
    direct, vector = _open(base / "direct"), _open(base / "vector")
    try:
        for batch in batches:
            a = direct.appender
            assert (
                encode_direct(
                    batch,
                    cluster=cluster,
                    system=False,
                    store_host=a.store_host,
                    default_born_host=a.born_host,
                    uniq=CountingUniq(),
                    max_message_size=4 << 20,
                    max_record_size=1 << 20,
                    not_allowed=frozenset(),
                )
                is not None
            )  # the direct path runs
            got = direct.wire.put_messages(batch, cluster=cluster)
            want = vector.wire.put_wire(wire_messages_table(batch), cluster=cluster, dispatch=True)
            assert got.commit_log_offsets == want.column("commitLogOffset").to_pylist()
            assert got.queue_offsets == want.column("queueOffset").to_pylist()
            assert got.msg_ids == want.column("msgId").to_pylist()
            assert got.end == direct.published_tail() and not got.duplicate
        assert direct.published_tail() == vector.published_tail()
        assert _files(base / "direct") == _files(base / "vector")
        assert direct.parts.dispatcher.position() == vector.parts.dispatcher.position() == direct.published_tail()
        assert direct.verify().problems == []
    finally:
        direct.close()
        vector.close()


def test_records_rolling_over_segment_ends_match_too(tmp_path: Path) -> None:
    direct, vector = _open(tmp_path / "d"), _open(tmp_path / "v")  # 4 KiB segments
    try:
        for i in range(40):
            batch = [
                WireMessage("T", i % 4, bytes([i]) * (300 + 37 * j), properties="TAGS\x01x\x02")
                for j in range(1 + i % 3)
            ]
            direct.wire.put_messages(batch)
            vector.wire.put_wire(wire_messages_table(batch), dispatch=True)
        assert len(direct.parts.commitlog.segments.segment_starts()) >= 10
        assert _files(tmp_path / "d") == _files(tmp_path / "v")
        assert direct.verify().problems == []
    finally:
        direct.close()
        vector.close()


@pytest.mark.parametrize(
    "messages, field",
    [
        ([WireMessage("T", 9, b"x")], "queueId"),
        ([WireMessage("T", 0, b"x", properties="REAL_TOPIC\x01Z\x02")], "properties"),
        ([WireMessage("T", 0, b"x", properties="RMQLOG_WRITER\x011 w\x02")], "properties"),
        ([WireMessage("T", 0, b"x", sys_flag=4)], "sysFlag"),
        ([WireMessage("T", 0, b"x", born_host="nowhere")], "bornHost"),
        ([WireMessage("SCHEDULE_TOPIC_XXXX", 0, b"x")], "topic"),
        ([WireMessage("RMQ_SYS_TRANS_HALF_TOPIC", 0, b"x")], "topic"),
        ([WireMessage("bad/topic", 0, b"x")], "topic"),
        ([WireMessage("T", 0, 5)], "body"),  # type: ignore[arg-type]
        ([WireMessage("T", 0, b"x"), ("T",)], "*"),
        ([WireMessage("T", 0, b"x", properties="p\x01v\x01w\x02")], "properties"),
        (
            [WireMessage("T", 0, b"x", born_host="1.2.3.4:5"), WireMessage("T", 0, b"x", born_host="[::1]:5")],
            "bornHost",
        ),
    ],
)
def test_what_the_direct_path_declines_fails_as_put_wire_fails(tmp_path: Path, messages: list[Any], field: str) -> None:
    s = _open(tmp_path / "s")
    try:
        tail = s.published_tail()
        with pytest.raises(StoreError) as direct:
            s.wire.put_messages(messages)
        assert getattr(direct.value, "field", None) == field
        if field != "*":
            with pytest.raises(type(direct.value)) as vector:
                s.wire.put_wire(wire_messages_table(messages))
            assert str(vector.value) == str(direct.value)
        assert s.published_tail() == tail  # nothing written
    finally:
        s.close()


def test_routed_messages_take_the_vectorized_path_and_are_routed(tmp_path: Path) -> None:
    s = _open(tmp_path / "s")
    try:
        rows = s.wire.put_messages([WireMessage("T", 0, b"later", properties="DELAY\x012\x02")], dispatch=True)
        assert len(rows.msg_ids) == 1
        assert s.max_offset("T", 0) == 0 and s.max_offset("SCHEDULE_TOPIC_XXXX", 1) == 1
    finally:
        s.close()


def test_an_idempotent_direct_put_is_written_once(tmp_path: Path) -> None:
    s = _open(tmp_path / "s")
    try:
        first = s.wire.put_messages([WireMessage("T", 1, b"a")], writer="w", sequence=7)
        again = s.wire.put_messages([WireMessage("T", 1, b"a")], writer="w", sequence=7)
        assert not first.duplicate and again.duplicate and again.msg_ids == []
        assert s.writer_sequence("w") == 7 and s.max_offset("T", 1) == 1
        assert b"RMQLOG_WRITER\x017 w\x02" in (tmp_path / "s" / "commitlog" / "00000000000000000000").read_bytes()
    finally:
        s.close()
    with MessageStore.open(tmp_path / "s", config=small_store_config()) as again_open:  # rebuilt from the log too
        again_open.parts.state_file.path.unlink()
    with MessageStore.open(tmp_path / "s", config=small_store_config()) as rebuilt:
        assert rebuilt.writer_sequence("w") == 7


def test_a_direct_put_is_dispatched_and_signalled_at_once(tmp_path: Path) -> None:
    s = _open(tmp_path / "s")
    heard: list[tuple[list[str], list[int], list[int]]] = []
    s.wire.on_arrival(lambda topics, qids, maxes: heard.append((topics, qids.tolist(), maxes.tolist())))
    try:
        s.wire.put_messages([WireMessage("T", 2, b"a", properties="KEYS\x01order-9\x02"), WireMessage("T", 2, b"b")])
        # no dispatch() called: the put wrote its units, moved the position and told the listeners
        assert s.max_offset("T", 2) == 2 and s.parts.dispatcher.position() == s.published_tail()
        assert heard == [(["T"], [2], [2])]
        assert s.query_by_key("T", "order-9").column("body").to_pylist() == [b"a"]
    finally:
        s.close()


def test_a_direct_put_behind_an_undispatched_one_leaves_the_dispatch_to_the_dispatcher(tmp_path: Path) -> None:
    s = _open(tmp_path / "s")
    try:
        s.wire.put_wire(wire_messages_table([WireMessage("T", 0, b"first")]))  # not dispatched
        s.wire.put_messages([WireMessage("T", 0, b"second")])
        assert s.max_offset("T", 0) == 0  # its units were not written before the earlier record's
        s.wire.put_messages([WireMessage("T", 0, b"third")], dispatch=True)  # a full dispatch: all of them
        assert s.get_messages("g", "T", 0, 0).messages.column("body").to_pylist() == [b"first", b"second", b"third"]
    finally:
        s.close()


def test_direct_keys_are_the_vectorized_keys() -> None:
    import pyarrow as pa

    msgs = [("T", "U1", "k1 k2"), ("Other", None, "  k3  "), ("T", "U3", None), ("T", None, None), ("T", "", "x")]
    got = direct_keys(msgs)
    want = message_keys(
        pa.array([m[0] for m in msgs]),
        pa.array([m[1] for m in msgs], pa.string()),
        pa.array([m[2] for m in msgs], pa.string()),
    )
    assert [g[0] for g in got] == want.message.tolist()
    assert [g[1] for g in got] == want.ordinal.tolist()
    assert [g[2] for g in got] == want.key_hash.tolist()


def test_put_messages_refuses_what_is_not_a_sequence(tmp_path: Path) -> None:
    s = _open(tmp_path / "s")
    try:
        for bad in (None, b"x", "T", 5, {"topic": "T"}):
            with pytest.raises(StoreError):
                s.wire.put_messages(bad)  # type: ignore[arg-type]
        assert s.wire.put_messages([]).msg_ids == []
    finally:
        s.close()


CHILD = r"""
import sys
import rmqlog
from rmqlog import WireMessage
from conftest import small_store_config
s = rmqlog.MessageStore.open(sys.argv[1], config=small_store_config())
s.create_topic("T", 2)
for i in range(int(sys.argv[2])):
    s.wire.put_messages([WireMessage("T", i % 2, b"m%d" % i, properties="KEYS\x01k%d\x02" % i)])
    print("acked", i, flush=True)
"""


@pytest.mark.parametrize(
    "point", ["append.written", "append.published", "dispatch.units", "index.entries", "index.slots"]
)
def test_recover_after_kill_inside_a_direct_put(tmp_path: Path, point: str) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    printed = kill_at_crash_point([str(script), str(tmp_path / "s"), "20"], point, 5, tmp=tmp_path)
    acked = [int(line.split()[1]) for line in printed if line.startswith("acked")]
    with MessageStore.open(tmp_path / "s", config=small_store_config()) as s:
        bodies = sorted(
            b for q in (0, 1) for b in s.get_messages("g", "T", q, 0, max_count=100).messages.column("body").to_pylist()
        )
        for i in acked:  # nothing acknowledged is lost; a put killed before its publish is absent, whole
            assert b"m%d" % i in bodies
        assert len(bodies) in (len(acked), len(acked) + 1)
        for i in acked:
            assert s.query_by_key("T", f"k{i}").num_rows == 1
        assert s.verify().problems == []


def test_the_direct_path_is_chosen_for_clean_messages_only(tmp_path: Path) -> None:
    s = _open(tmp_path / "s")
    a = s.appender
    kw: dict[str, Any] = dict(
        cluster="C",
        system=False,
        store_host=a.store_host,
        default_born_host=a.born_host,
        uniq=CountingUniq(),
        max_message_size=1024,
        max_record_size=4000,
        not_allowed=frozenset(["X"]),
    )
    try:
        assert encode_direct([WireMessage("T", 0, b"x", properties="TAGS\x01a\x02")], **kw) is not None
        for bad in (
            WireMessage("T", 0, b"x" * 1025),
            WireMessage("X", 0, b"x"),
            WireMessage("T", -1, b"x"),
            WireMessage("T", 0, b"x", properties="TAGS\x01\u00e9\x02"),
            WireMessage("T", 0, b"x", properties="a"),
            WireMessage("T", 0, b"x", properties="\x01v\x02"),
            WireMessage("T", 0, b"x", sys_flag=16),
            WireMessage("T", 0, b"x", born_timestamp=-1),
        ):
            assert encode_direct([bad], **kw) is None, bad
        assert encode_direct([WireMessage("T", 0, b"x")] * 65, **kw) is None  # past DIRECT_MAX_MESSAGES
    finally:
        s.close()


def test_a_non_ascii_property_still_goes_through_the_general_path(tmp_path: Path) -> None:
    s = _open(tmp_path / "s")
    try:
        s.wire.put_messages([WireMessage("T", 0, b"x", properties="TAGS\x01\u00e9t\u00e9\x02")], dispatch=True)
        got = s.get_messages("g", "T", 0, 0, tags="\u00e9t\u00e9")
        assert got.messages.num_rows == 1
    finally:
        s.close()


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(st.characters(max_codepoint=127), max_size=1100), st.text(max_size=40)))
def test_the_java_hash_of_ascii_text_is_the_utf16_loop(text: str) -> None:
    """``java_string_hash``'s one-map form for ASCII text gives the UTF-16 code-unit loop's value."""
    from rmqlog.hashing import java_string_hash

    units, h = text.encode("utf-16-be"), 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    assert java_string_hash(text) == (h - (1 << 32) if h & 0x80000000 else h)


def test_a_deferred_dispatch_waits_for_dispatch_put(tmp_path: Path) -> None:
    s = _open(tmp_path / "s")
    heard: list[list[int]] = []
    s.wire.on_arrival(lambda topics, qids, maxes: heard.append(maxes.tolist()))
    try:
        rows = s.wire.put_messages([WireMessage("T", 3, b"a")], defer_dispatch=True)
        assert s.max_offset("T", 3) == 0 and heard == []  # appended, not dispatched yet
        assert s.parts.dispatcher.run_once(0.0) is False  # a background round leaves it to the put
        assert s.wire.dispatch_put(rows) is True
        assert s.max_offset("T", 3) == 1 and heard == [[1]]
        assert s.wire.dispatch_put(rows) is True and heard == [[1]]  # once
        with pytest.raises(StoreError):
            s.wire.dispatch_put("rows")  # type: ignore[arg-type]
    finally:
        s.close()


def test_a_deferred_dispatch_never_run_is_taken_by_the_background_dispatcher(tmp_path: Path) -> None:
    import time

    from rmqlog.queue.dispatcher import DIRECT_GRACE_S

    s = _open(tmp_path / "s")
    try:
        s.wire.put_messages([WireMessage("T", 3, b"a")], defer_dispatch=True)  # its caller forgot it
        time.sleep(DIRECT_GRACE_S * 2)  # (the grace is real time: another thread's put)
        assert s.parts.dispatcher.run_once(10.0) is True
        assert s.max_offset("T", 3) == 1
    finally:
        s.close()


WRITER = r"""
import sys, rmqlog
from rmqlog import WireMessage
from conftest import small_store_config
s = rmqlog.MessageStore.open(sys.argv[1], config=small_store_config())
s.create_topic("T", 4)
w = sys.argv[2]
for i in range(int(sys.argv[3])):
    s.wire.put_messages([WireMessage("T", i % 4, f"{w}-{i}".encode(), properties=f"KEYS\x01{w}-{i}\x02")] * (1 + i % 3))
s.close()
"""


def test_direct_puts_of_three_processes_at_once_are_all_stored_dense_and_indexed(tmp_path: Path) -> None:
    """Three processes putting into the same queues at once, each dispatching its own puts (or
    leaving them to the next dispatch when another's record came between): every message is
    there once, each queue's offsets are dense, every key indexed, and verify finds nothing."""
    import subprocess
    import sys

    from conftest import subprocess_env

    root, n = tmp_path / "s", 300
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    procs = [
        subprocess.Popen([sys.executable, str(script), str(root), w, str(n)], env=subprocess_env())
        for w in ("a", "b", "c")
    ]
    assert [p.wait(300) for p in procs] == [0, 0, 0]
    with MessageStore.open(root, config=small_store_config()) as s:
        s.dispatch()
        bodies: list[bytes] = []
        for q in range(4):
            t = s.read_queue("T", q, 0, 1 << 40)
            assert t.column("queueOffset").to_pylist() == list(range(t.num_rows))
            bodies += t.column("body").to_pylist()
        assert sorted(bodies) == sorted(f"{w}-{i}".encode() for w in "abc" for i in range(n) for _ in range(1 + i % 3))
        for w in "abc":
            for i in (0, n // 2, n - 1):
                assert s.query_by_key("T", f"{w}-{i}").num_rows == 1 + i % 3
        assert s.verify().problems == []


def test_a_direct_put_whose_dispatch_finds_no_room_says_it_was_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from rmqlog.queue.consume_queue import ConsumeQueue

    s = _open(tmp_path / "s")
    try:
        s.wire.put_messages([WireMessage("T", 0, b"first")])

        def no_room(self: ConsumeQueue, first: int, units: bytes) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        with monkeypatch.context() as m:
            m.setattr(ConsumeQueue, "write_packed", no_room)
            with pytest.raises(rmqlog.DiskFullError) as info:
                s.wire.put_messages([WireMessage("T", 0, b"second")])
        assert info.value.appended and "WAS appended" in str(info.value)
        assert s.max_offset("T", 0) == 1  # its unit not written ...
        assert s.dispatch() == 1  # ... until the next dispatch
        assert s.get_messages("g", "T", 0, 0).messages.column("body").to_pylist() == [b"first", b"second"]
        assert s.verify().problems == []
    finally:
        s.close()
