"""POP consumption (rmqnet.broker.pop) over a real store on a ManualClock: pop, ack, the revive
to the POP retry topic with the attempt count raised, the dead letters at the group's
``retryMaxTimes``, ChangeInvisibleTime's new handle, orderly (FIFO) blocking, and the state
replayed from the POP log by a new broker over the same store (what a restart does)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import small_store_config

import rmqlog
from rmqlog import SubscriptionGroupConfig
from rmqnet.broker.broker import Broker
from rmqnet.broker.pop import AckStatus, PopRefused, PopResult
from rmqnet.broker.pop_handle import ExtraInfo, HandleError
from rmqnet.remoting import ResponseCode
from wire.broker_helpers import make_broker

T0 = 1_700_000_000_000
INVISIBLE = 10_000


@pytest.fixture
def clock() -> rmqlog.ManualClock:
    return rmqlog.ManualClock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: rmqlog.ManualClock) -> Iterator[rmqlog.MessageStore]:
    with rmqlog.MessageStore.open(tmp_path / "store", small_store_config(), clock=clock) as s:
        s.create_topic("T", 2)
        yield s


def put(store: rmqlog.MessageStore, *bodies: bytes, queue: int = 0, tags: str = "TagA") -> None:
    n = len(bodies)
    store.wire.put_wire(
        pa.table(
            {
                "topic": ["T"] * n,
                "queueId": [queue] * n,
                "body": list(bodies),
                "properties": [f"TAGS\x01{tags}\x02"] * n,
            }
        ),
        dispatch=True,
    )
    store.dispatch()


def decoded(result: PopResult) -> list[dict[str, Any]]:
    """The messages of a pop, decoded as a client decodes a pull's body."""
    out: list[dict[str, Any]] = []
    for q in result.queues:
        out += rmqlog.decode_records(bytes(q.records.data)).to_pylist()
    return out


def bodies(result: PopResult) -> list[bytes]:
    return [m["body"] for m in decoded(result)]


def pop(
    broker: Broker,
    now: int,
    n: int = 32,
    *,
    queue: int = -1,
    order: bool = False,
    group: str = "G",
    invisible: int = INVISIBLE,
    tags: str | None = None,
) -> PopResult:
    return broker.pop.pop(group, "T", queue, n, invisible, now, order=order, tags=tags)


def ack_all(broker: Broker, result: PopResult, now: int, group: str = "G") -> list[AckStatus]:
    return [broker.pop.ack(group, "T", ExtraInfo.parse(h), now) for h in result.handles]


def test_a_pop_hands_out_messages_with_rocketmqs_receipt_handles(store: rmqlog.MessageStore) -> None:
    put(store, b"a", b"b", b"c")
    broker = make_broker(store, broker_name="bk")
    got = pop(broker, T0, queue=0)
    assert bodies(got) == [b"a", b"b", b"c"]
    # ExtraInfoUtil.buildExtraInfo: startOffset popTime invisibleTime reviveQid topicType brokerName queueId offset
    assert got.handles == [f"0 {T0} {INVISIBLE} 0 0 bk 0 {i}" for i in range(3)]
    assert got.start_offset_info() == "0 0 0" and got.msg_offset_info() == "0 0 0,1,2"
    assert pop(broker, T0 + 1, queue=0).queues == []  # the position moved past them
    assert broker.pop.inflight("G") == 3


def test_acked_messages_are_not_redelivered_the_unacked_are_with_their_attempt_raised(
    store: rmqlog.MessageStore,
) -> None:
    put(store, b"a", b"b", b"c")
    broker = make_broker(store)
    got = pop(broker, T0)
    handles = got.handles
    assert broker.pop.ack("G", "T", ExtraInfo.parse(handles[1]), T0 + 5) is AckStatus.OK
    broker.run_services(T0 + INVISIBLE - 1)
    assert broker.pop.revived == 0  # not yet
    assert broker.pop.run_once(T0 + INVISIBLE) == 2
    store.dispatch()
    again = pop(broker, T0 + INVISIBLE + 1)
    msgs = decoded(again)
    assert [m["body"] for m in msgs] == [b"a", b"c"]
    assert [m["reconsumeTimes"] for m in msgs] == [1, 1]
    assert {q.topic for q in again.queues} == {"%RETRY%G_T"}  # KeyBuilder.buildPopRetryTopicV1
    assert [dict(m["properties"])["RETRY_TOPIC"] for m in msgs] == ["T", "T"]
    assert all(h.split(" ")[4] == "1" for h in again.handles)  # topicType 1: the POP retry topic
    assert ack_all(broker, again, T0 + INVISIBLE + 2) == [AckStatus.OK, AckStatus.OK]
    assert broker.pop.run_once(T0 + 10 * INVISIBLE) == 0 and broker.pop.inflight() == 0


def test_a_message_goes_to_the_dead_letters_at_the_groups_retry_max_times(store: rmqlog.MessageStore) -> None:
    put(store, b"x")
    broker = make_broker(store)
    broker.subscription_groups._put(SubscriptionGroupConfig("G", retry_max_times=2))
    now = T0
    seen = []
    for _ in range(3):  # delivered 1 + retryMaxTimes times
        got = pop(broker, now)
        seen += [m["reconsumeTimes"] for m in decoded(got)]
        now += INVISIBLE
        broker.pop.run_once(now)
        store.dispatch()
        now += 1
    assert seen == [0, 1, 2]
    assert pop(broker, now).queues == [] and broker.pop.dead == 1
    [dead] = store.read_queue("%DLQ%G", 0, 0, 10).to_pylist()
    assert dead["body"] == b"x" and dead["reconsumeTimes"] == 3


def test_change_invisible_gives_a_new_handle_and_the_old_one_no_longer_acks(store: rmqlog.MessageStore) -> None:
    put(store, b"a")
    broker = make_broker(store)
    [old] = pop(broker, T0).handles
    status, new = broker.pop.change_invisible("G", "T", ExtraInfo.parse(old), 60_000, T0 + 1000)
    assert status is AckStatus.OK and new is not None
    assert (new.pop_time, new.invisible_time, new.offset) == (T0 + 1000, 60_000, 0) and new.text() != old
    # the first invisible time passes: nothing is revived, the new one holds it
    assert broker.pop.run_once(T0 + INVISIBLE + 1) == 0
    assert broker.pop.ack("G", "T", ExtraInfo.parse(old), T0 + 2000) is AckStatus.GONE
    assert broker.pop.ack("G", "T", new, T0 + 2000) is AckStatus.OK
    assert broker.pop.run_once(T0 + 120_000) == 0 and broker.pop.inflight() == 0


def test_an_ack_after_the_redelivery_is_expired_and_changes_nothing(store: rmqlog.MessageStore) -> None:
    put(store, b"a")
    broker = make_broker(store)
    [h] = pop(broker, T0).handles
    assert broker.pop.run_once(T0 + INVISIBLE) == 1
    assert broker.pop.ack("G", "T", ExtraInfo.parse(h), T0 + INVISIBLE + 1) is AckStatus.EXPIRED
    status, new = broker.pop.change_invisible("G", "T", ExtraInfo.parse(h), 5000, T0 + INVISIBLE + 1)
    assert (status, new) == (AckStatus.EXPIRED, None)
    store.dispatch()
    assert bodies(pop(broker, T0 + INVISIBLE + 2)) == [b"a"]  # the redelivery stands


def test_an_orderly_queue_is_blocked_while_its_batch_is_invisible(store: rmqlog.MessageStore) -> None:
    put(store, b"1", b"2", b"3", b"4")
    broker = make_broker(store)
    first = pop(broker, T0, 2, queue=0, order=True)
    assert bodies(first) == [b"1", b"2"] and first.revive_qid == 999
    assert all(h.split(" ")[3] == "999" for h in first.handles)
    assert pop(broker, T0 + 1, 2, queue=0, order=True).queues == []  # blocked: 1 and 2 in flight
    h1, h2 = first.handles
    assert broker.pop.ack("G", "T", ExtraInfo.parse(h1), T0 + 2) is AckStatus.OK
    assert pop(broker, T0 + 3, 2, queue=0, order=True).queues == []  # 2 still in flight
    # its invisible time passes: 2 comes again first, its attempt count raised, then 3
    again = pop(broker, T0 + INVISIBLE, 2, queue=0, order=True)
    assert bodies(again) == [b"2", b"3"]
    assert [a for q in again.queues for a in (q.attempts.tolist() if q.attempts is not None else [])] == [1, 0]
    assert again.order_count_info() == "0 qo0%1 1;0 qo0%2 0"
    assert broker.pop.ack("G", "T", ExtraInfo.parse(h2), T0 + INVISIBLE) is AckStatus.EXPIRED  # the old handle
    assert ack_all(broker, again, T0 + INVISIBLE + 1) == [AckStatus.OK, AckStatus.OK]
    assert bodies(pop(broker, T0 + INVISIBLE + 2, 2, queue=0, order=True)) == [b"4"]


def test_an_orderly_redelivery_smaller_than_its_batch_skips_nothing(store: rmqlog.MessageStore) -> None:
    put(store, b"1", b"2", b"3", b"4")
    broker = make_broker(store)
    first = pop(broker, T0, 3, queue=0, order=True)
    assert bodies(first) == [b"1", b"2", b"3"]
    broker.pop.ack("G", "T", ExtraInfo.parse(first.handles[1]), T0 + 1)  # 2 acked; 1 and 3 not
    again = pop(broker, T0 + INVISIBLE, 1, queue=0, order=True)
    assert bodies(again) == [b"1"]
    assert ack_all(broker, again, T0 + INVISIBLE + 1) == [AckStatus.OK]
    # not blocked (everything handed out is acked): 3, again, then 4; 2 is not handed out again
    third = pop(broker, T0 + INVISIBLE + 2, 2, queue=0, order=True)
    assert bodies(third) == [b"3", b"4"]


def test_an_orderly_message_past_retry_max_times_goes_to_the_dead_letters(store: rmqlog.MessageStore) -> None:
    put(store, b"1", b"2")
    broker = make_broker(store)
    broker.subscription_groups._put(SubscriptionGroupConfig("G", retry_max_times=1))
    assert bodies(pop(broker, T0, 1, queue=0, order=True)) == [b"1"]
    assert bodies(pop(broker, T0 + INVISIBLE, 1, queue=0, order=True)) == [b"1"]
    # its third delivery would pass retryMaxTimes: dead-lettered, this pop hands out nothing (as
    # RocketMQ 5's proxy forwards it to the dead letters and answers no message)
    assert pop(broker, T0 + 2 * INVISIBLE, 1, queue=0, order=True).queues == []
    assert bodies(pop(broker, T0 + 2 * INVISIBLE + 1, 1, queue=0, order=True)) == [b"2"]
    store.dispatch()
    assert [m["body"] for m in store.read_queue("%DLQ%G", 0, 0, 10).to_pylist()] == [b"1"]


def test_a_pop_of_32_costs_one_read_per_queue_and_one_log_write(store: rmqlog.MessageStore) -> None:
    put(store, *[b"m%d" % i for i in range(40)])
    broker = make_broker(store)
    writes = broker.pop.state.log.writes
    got = pop(broker, T0, 32, queue=0)
    assert len(got) == 32 and broker.pop.state.log.writes == writes + 1
    assert got.rest == 8
    assert ack_all(broker, got, T0 + 1) == [AckStatus.OK] * 32
    assert broker.pop.state.log.writes == writes + 33  # one write per ack


def test_a_tag_filter_moves_the_position_past_what_it_skips(store: rmqlog.MessageStore) -> None:
    put(store, b"a", b"b", tags="TagA")
    put(store, b"c", tags="TagB")
    broker = make_broker(store)
    assert bodies(pop(broker, T0, queue=0, tags="TagB")) == [b"c"]
    assert broker.pop.state.positions[("G", "T", 0)] == 3


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"topic": "NOPE"}, ResponseCode.TOPIC_NOT_EXIST),
        ({"queue": 7}, ResponseCode.SYSTEM_ERROR),
        ({"n": 33}, ResponseCode.SYSTEM_ERROR),
        ({"invisible": 0}, ResponseCode.SYSTEM_ERROR),
        ({"group": "bad group!"}, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST),
    ],
)
def test_refusals_carry_rocketmqs_codes(store: rmqlog.MessageStore, args: dict[str, Any], code: int) -> None:
    broker = make_broker(store)
    kw: dict[str, Any] = {"group": "G", "topic": "T", "queue": -1, "n": 1, "invisible": INVISIBLE, "tags": None} | args
    with pytest.raises(PopRefused) as e:
        broker.pop.pop(kw["group"], kw["topic"], kw["queue"], kw["n"], kw["invisible"], T0, tags=kw["tags"])
    assert e.value.code == code


def test_an_unknown_group_is_refused_without_auto_create(store: rmqlog.MessageStore) -> None:
    broker = make_broker(store, auto_create_subscription_group=False)
    with pytest.raises(PopRefused) as e:
        pop(broker, T0, group="NEW")
    assert e.value.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


@pytest.mark.parametrize("text", ["", "1 2 3", "a b c d 0 bk 0 1", "0 1 2 3 9 bk 0 1"])
def test_a_malformed_handle_is_a_handle_error(text: str) -> None:
    with pytest.raises(HandleError):
        ExtraInfo.parse(text)


def test_a_new_broker_over_the_same_store_redelivers_the_unacked_and_not_the_acked(
    store: rmqlog.MessageStore, clock: rmqlog.ManualClock
) -> None:
    put(store, b"a", b"b", b"c")
    broker = make_broker(store, clock=clock)
    got = pop(broker, T0)
    broker.pop.ack("G", "T", ExtraInfo.parse(got.handles[0]), T0 + 1)
    status, moved = broker.pop.change_invisible("G", "T", ExtraInfo.parse(got.handles[2]), 50_000, T0 + 2)
    assert status is AckStatus.OK and moved is not None
    broker.pop.state.log.close()  # (no clean stop: what a kill leaves)

    again = make_broker(store, clock=clock)
    assert again.pop.inflight("G") == 2
    assert pop(again, T0 + 3).queues == []  # the position survived
    assert again.pop.ack("G", "T", moved, T0 + 4) is AckStatus.OK  # the changed handle survived
    assert again.pop.run_once(T0 + INVISIBLE) == 1
    store.dispatch()
    assert bodies(pop(again, T0 + INVISIBLE + 1)) == [b"b"]


def test_the_log_is_compacted_to_the_live_state(store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rmqnet.broker.pop_state.COMPACT_MIN", 10)
    put(store, *[b"m%d" % i for i in range(30)])
    broker = make_broker(store)
    for i in range(30):
        got = pop(broker, T0 + i, 1, queue=0)
        if i % 10:
            ack_all(broker, got, T0 + i)
    assert broker.pop.state.log.records > 40
    broker.pop.run_once(T0 + 100)
    log = broker.pop.state.log
    assert log.records == broker.pop.state.live_records == 3 + 1  # three checkpoints, one position
    broker.pop.state.log.close()
    assert make_broker(store).pop.inflight("G") == 3


def test_acks_of_several_handles_are_one_write(store: rmqlog.MessageStore) -> None:
    put(store, b"a", b"b", b"c")
    broker = make_broker(store)
    got = pop(broker, T0)
    writes = broker.pop.state.log.writes
    infos = [ExtraInfo.parse(h) for h in got.handles]
    assert broker.pop.ack_many("G", "T", [*infos, infos[0]], T0 + 1) == [AckStatus.OK] * 3 + [AckStatus.GONE]
    assert broker.pop.state.log.writes == writes + 1 and broker.pop.inflight() == 0


def test_a_group_whose_retry_topic_makes_no_name_revives_to_its_dead_letters(store: rmqlog.MessageStore) -> None:
    group = "G" * 120  # "%RETRY%<group>_T" would be 129 bytes: over RocketMQ's 127
    put(store, b"a")
    broker = make_broker(store)
    assert bodies(pop(broker, T0, group=group)) == [b"a"]
    assert broker.pop.run_once(T0 + INVISIBLE) == 1 and broker.pop.dead == 1
    assert broker.pop.run_once(T0 + 2 * INVISIBLE) == 0  # done: not tried again every round
    store.dispatch()
    assert [m["body"] for m in store.read_queue(f"%DLQ%{group}", 0, 0, 10).to_pylist()] == [b"a"]


def test_a_pops_messages_decoded_carry_their_handles_and_orderly_attempts(store: rmqlog.MessageStore) -> None:
    put(store, b"1", b"2")
    broker = make_broker(store)
    got = pop(broker, T0, 2, queue=0, order=True)
    table = got.messages()
    assert table.column("body").to_pylist() == [b"1", b"2"]
    assert table.column("receiptHandle").to_pylist() == got.handles
    again_result = pop(broker, T0 + INVISIBLE, 2, queue=0, order=True)
    again = again_result.messages()
    assert again.column("reconsumeTimes").to_pylist() == [1, 1]  # the attempt of this delivery
    rows = again_result.rows()  # the same, row by row
    assert [(r["body"], r["reconsumeTimes"], r["receiptHandle"]) for r in rows] == list(
        zip(again.column("body").to_pylist(), [1, 1], again.column("receiptHandle").to_pylist(), strict=True)
    )
    assert pop(broker, T0 + INVISIBLE + 1, queue=1).messages().num_rows == 0


def test_an_orderly_ack_that_frees_its_queue_wakes_the_pops_held_on_it(store: rmqlog.MessageStore) -> None:
    put(store, b"1", b"2")
    broker = make_broker(store)
    [h] = pop(broker, T0, 1, queue=0, order=True).handles
    woken: list[tuple[str, int]] = []
    broker.pop_holds.notify_arrival = lambda topic, q, m: woken.append((topic, q))  # type: ignore[method-assign]
    assert broker.pop.ack("G", "T", ExtraInfo.parse(h), T0 + 1) is AckStatus.OK
    assert woken == [("T", 0)]


def test_a_revive_interrupted_after_its_put_is_done_again_without_a_second_copy(
    store: rmqlog.MessageStore, clock: rmqlog.ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(store, b"a", b"b")
    broker = make_broker(store, clock=clock)
    got = pop(broker, T0)
    broker.pop.ack("G", "T", ExtraInfo.parse(got.handles[0]), T0 + 1)
    write = broker.pop.state.write

    def crash_before_done(records: list[dict[str, Any]], made: Any = ()) -> None:
        if records and records[0]["k"] == "done":
            raise KeyboardInterrupt("killed between the revive's put and its done record")
        write(records, made)

    monkeypatch.setattr(broker.pop.state, "write", crash_before_done)
    with pytest.raises(KeyboardInterrupt):
        broker.pop.run_once(T0 + INVISIBLE)
    broker.pop.state.log.close()
    store.dispatch()
    assert store.max_offset("%RETRY%G_T", 0) == 1  # the put was made

    again = make_broker(store, clock=clock)
    assert again.pop.ack("G", "T", ExtraInfo.parse(got.handles[1]), T0 + INVISIBLE + 1) is AckStatus.EXPIRED
    assert again.pop.run_once(T0 + INVISIBLE + 2) == 1  # done again: the store skips the put it has
    store.dispatch()
    assert store.max_offset("%RETRY%G_T", 0) == 1 and again.pop.state.pending == {}
    retried = pop(again, T0 + INVISIBLE + 3)
    assert bodies(retried) == [b"b"]
    assert ack_all(again, retried, T0 + INVISIBLE + 4) == [AckStatus.OK]
    assert again.pop.run_once(T0 + 10 * INVISIBLE) == 0 and again.pop.inflight() == 0


def test_a_message_changed_twice_in_one_millisecond_keeps_its_newest_handle(store: rmqlog.MessageStore) -> None:
    put(store, b"a")
    broker = make_broker(store)
    [h] = pop(broker, T0).handles
    _, first = broker.pop.change_invisible("G", "T", ExtraInfo.parse(h), 30_000, T0 + 5)
    assert first is not None
    status, second = broker.pop.change_invisible("G", "T", first, 60_000, T0 + 5)
    # a popTime past the first's (the first handle must not match the new checkpoint), the same deadline
    assert status is AckStatus.OK and second is not None and second.pop_time == first.pop_time + 1
    assert second.deadline == T0 + 5 + 60_000
    assert broker.pop.ack("G", "T", first, T0 + 6) is AckStatus.GONE  # the changed handle is dead
    assert broker.pop.run_once(T0 + 30_006) == 0  # the second holds it
    assert broker.pop.ack("G", "T", second, T0 + 30_007) is AckStatus.OK and broker.pop.inflight() == 0


def test_an_orderly_change_moves_its_batchs_visibility_across_a_restart(
    store: rmqlog.MessageStore, clock: rmqlog.ManualClock
) -> None:
    put(store, b"1", b"2")
    broker = make_broker(store, clock=clock)
    [h] = pop(broker, T0, 1, queue=0, order=True).handles
    status, new = broker.pop.change_invisible("G", "T", ExtraInfo.parse(h), 60_000, T0 + 1000)
    # processChangeInvisibleTimeForOrder: popTime kept, the invisible time runs from now
    assert status is AckStatus.OK and new is not None and (new.pop_time, new.invisible_time) == (T0, 61_000)
    broker.pop.state.log.close()
    again = make_broker(store, clock=clock)
    assert pop(again, T0 + INVISIBLE + 1, 1, queue=0, order=True).queues == []  # still blocked
    assert bodies(pop(again, T0 + 61_000, 1, queue=0, order=True)) == [b"1"]  # then again, in order


def test_a_compaction_keeps_a_revive_in_progress(
    store: rmqlog.MessageStore, clock: rmqlog.ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(store, b"a")
    broker = make_broker(store, clock=clock)
    pop(broker, T0)
    state = broker.pop.state
    monkeypatch.setattr(
        broker.pop.revive, "store_again", lambda *a, **k: (_ for _ in ()).throw(rmqlog.DiskFullError("full"))
    )
    with pytest.raises(rmqlog.DiskFullError):
        broker.pop.run_once(T0 + INVISIBLE)  # the intent is logged, the put failed
    assert list(state.pending.values()) == [[1]] and state.compact(force=True)
    state.log.close()
    again = make_broker(store, clock=clock)
    assert list(again.pop.state.pending.values()) == [[1]]
    assert again.pop.run_once(T0 + INVISIBLE + 1) == 1 and again.pop.state.pending == {}
    store.dispatch()
    assert bodies(pop(again, T0 + INVISIBLE + 2)) == [b"a"]


def test_a_slave_serves_no_pop(store: rmqlog.MessageStore) -> None:
    slave = make_broker(store, broker_role="SLAVE", broker_id=1)
    for call in (
        lambda: pop(slave, T0),
        lambda: slave.pop.ack("G", "T", ExtraInfo.parse("0 1 2 0 0 bk 0 0"), T0),
        lambda: slave.pop.change_invisible("G", "T", ExtraInfo.parse("0 1 2 0 0 bk 0 0"), 5000, T0),
    ):
        with pytest.raises(PopRefused) as e:
            call()
        assert e.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
