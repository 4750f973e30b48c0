"""The delay scheduler's state against the log:
``config/delayOffset.json`` is checked against the writer markers and the queues' bounds,
a repair rebuilds it from the log, a delivery is never early whatever the caller's time, and
levels removed from the configuration are still delivered."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pytest
from conftest import small_store_config

import rmqlog
from rmqlog.config import delay_levels_ms
from rmqlog.schedule.delay_offsets import load_delay_offsets, save_delay_offsets

S = "SCHEDULE_TOPIC_XXXX"
FAR = 1 << 50
LEVELS = delay_levels_ms(rmqlog.config.DEFAULT_DELAY_LEVELS)


def delivered(s: rmqlog.MessageStore, topic: str = "T") -> Counter[bytes]:
    s.dispatch()
    if topic not in s.topics():
        return Counter()
    return Counter(
        m["body"]
        for q in range(s.topics()[topic].write_queue_nums)
        for m in s.read_queue(topic, q, 0, 1 << 40).to_pylist()
    )


def stored_at(s: rmqlog.MessageStore, level: int, offset: int = 0) -> int:
    s.dispatch()
    row = s.read_queue(S, level - 1, offset, offset + 1).to_pylist()[0]
    return int(row["storeTimestamp"].timestamp() * 1000)


def offsets_file(root: Path) -> Path:
    return root / "config" / "delayOffset.json"


def write_offsets(root: Path, table: dict[int, int]) -> None:
    """The file and its ``.bak`` both saying ``table``."""
    save_delay_offsets(offsets_file(root), table)
    save_delay_offsets(offsets_file(root), table)


# ------------------------------------------------------------------ an offset past the queue's end
@pytest.mark.parametrize("bogus", [1000, 1 << 40])
def test_an_offset_past_the_queue_end_strands_nothing(root: Path, bogus: int, caplog: pytest.LogCaptureFixture) -> None:
    """A level's offset past the end of its queue (a copy from another store, a flipped
    bit), with 2 messages delivered and 3 waiting: every waiting and later message is delivered,
    none twice, and a warning names the level and the offsets."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        for i in range(2):
            s.put("T", b"d%d" % i, delay_level=2)
        assert s.deliver_due(FAR) == 2
        for i in range(3):
            s.put("T", b"w%d" % i, delay_level=2)
    write_offsets(root, {2: bogus})
    with (
        caplog.at_level(logging.WARNING, logger="rmqlog.schedule.scheduler"),
        rmqlog.MessageStore.open(root, small_store_config()) as s,
    ):
        s.put("T", b"later", delay_level=2)
        assert s.deliver_due(FAR) == 4
        assert delivered(s) == Counter([b"d0", b"d1", b"w0", b"w1", b"w2", b"later"])
        assert s.deliver_due(FAR) == 0
    text = caplog.text
    assert "level 2" in text and str(bogus) in text
    assert load_delay_offsets(offsets_file(root)) == {2: 6}


def test_a_file_offset_past_the_end_without_markers_strands_nothing(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same for a level the log has no delivery of (the file is then its only record, as for a
    RocketMQ broker's deliveries): RocketMQ's correctDelayOffset would clamp 500 to the queue's
    end and skip the message waiting there; the file, certainly wrong, is not followed: the
    level resumes at its queue's minimum, and the waiting and later messages are delivered."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"old", delay_level=1)
        s.dispatch()
    write_offsets(root, {1: 500})
    with (
        caplog.at_level(logging.WARNING, logger="rmqlog.schedule.scheduler"),
        rmqlog.MessageStore.open(root, small_store_config()) as s,
    ):
        s.put("T", b"new", delay_level=1)
        assert s.deliver_due(FAR) == 2 and delivered(s) == Counter([b"old", b"new"])
    assert "offset 500 (delayOffset.json) is past the end of its queue (offsets 0..2); corrected to 0" in caplog.text


def _broker_delivered(root: Path, delivered_first: int, *, index: bool = True) -> list[bytes]:
    """A store as a RocketMQ broker leaves it: 5 messages waiting at level 1 (with their own
    client msgIds), the first ``delivered_first`` of them delivered (their copies in topic T,
    with the same msgIds) and no writer marker: ``delayOffset.json`` is the only record."""
    bodies = [b"m%d" % i for i in range(5)]
    keys = [f"{i:032X}" for i in range(1, 6)]
    with rmqlog.MessageStore.open(root, small_store_config(message_index_enable=index)) as s:
        for body, key in zip(bodies, keys, strict=True):
            s.put("T", body, delay_level=1, properties={"UNIQ_KEY": key})
        for body, key in zip(bodies[:delivered_first], keys[:delivered_first], strict=True):
            s.put("T", body, properties={"UNIQ_KEY": key})  # the broker's delivered copies
        s.dispatch()
    return bodies


@pytest.mark.parametrize(("claimed", "resumes"), [(2, 2), (4, 2), (5, 2), (1, 1)])
def test_a_file_offset_no_marker_backs_is_confirmed_against_the_log(
    root: Path, claimed: int, resumes: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The file is the only record of a RocketMQ broker's deliveries (no writer marker): an
    offset is followed only as far as the log holds the delivered copy of the message before it
    (found through the index by its client msgId). Two of five were delivered: a file saying 4
    or 5 (a flipped bit, another store's file) used to skip the messages between, lost for
    good; it now resumes at 2. A file saying less than was delivered repeats deliveries (as a
    RocketMQ broker would), never loses one."""
    bodies = _broker_delivered(root, 2)
    write_offsets(root, {1: claimed})
    with (
        caplog.at_level(logging.WARNING, logger="rmqlog.schedule.scheduler"),
        rmqlog.MessageStore.open(root, small_store_config()) as s,
    ):
        assert s.deliver_due(FAR) == 5 - resumes
        # once each; again only those the file said too little about
        assert delivered(s) == Counter(bodies + bodies[resumes:2])
    assert ("confirms deliveries only up to 2" in caplog.text) == (claimed > 2)


def test_without_the_index_an_unconfirmed_offset_repeats_rather_than_loses(root: Path) -> None:
    """Without index files nothing can confirm the file's offset: the level resumes at its
    queue's minimum (every message delivered again, none lost)."""
    bodies = _broker_delivered(root, 2, index=False)
    write_offsets(root, {1: 4})
    with rmqlog.MessageStore.open(root, small_store_config(message_index_enable=False)) as s:
        assert s.deliver_due(FAR) == 5
        assert delivered(s) == Counter(bodies + bodies[:2])


def test_an_offset_below_the_queue_minimum_is_reported(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The other half of ``correctDelayOffset``: below the queue's minimum (its units deleted by
    retention) the level resumes at the minimum, with a warning and the loss counted."""
    from rmqlog.schedule.scheduler import resume_offset

    with caplog.at_level(logging.WARNING, logger="rmqlog.schedule.scheduler"):
        assert resume_offset(3, 2, None, 5, 9) == 2  # the pass starts at 5 and counts 2..5 as lost
        assert resume_offset(3, None, 7, 5, 9) == 7
        assert resume_offset(3, 20, 7, 5, 9) == 7
        assert resume_offset(3, 20, None, 5, 9) == 5
        assert resume_offset(3, None, 20, 5, 9) == 9
        assert resume_offset(3, 4, 2, 5, 9) == 2  # the file skipped deleted units: no warning
    text = caplog.text
    assert "level 3: offset 2 (delayOffset.json) is below its queue's minimum 5" in text
    assert "says offset 20, but the log records deliveries up to 7" in text
    assert "offset 20 (delayOffset.json) is past the end of its queue (offsets 5..9); corrected to 5" in text
    assert "offset 20 (the log) is past the end of its queue (offsets 5..9); corrected to 9" in text
    assert "offset 4" not in text


def test_a_plausible_but_wrong_offset_is_checked_against_the_log(root: Path) -> None:
    """A flipped bit that leaves the offset inside the queue (7 of 10, 3 delivered): the log's
    writer marker says 3, so messages 3..9 are delivered, none twice."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        for i in range(3):
            s.put("T", b"d%d" % i, delay_level=1)
        assert s.deliver_due(FAR) == 3
        for i in range(7):
            s.put("T", b"w%d" % i, delay_level=1)
    write_offsets(root, {1: 7})
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.deliver_due(FAR) == 7
        assert delivered(s) == Counter([b"d0", b"d1", b"d2"] + [b"w%d" % i for i in range(7)])


# ------------------------------------------------------------------ unreadable state files
def test_unreadable_delay_offsets_need_repair_which_rebuilds_them_from_the_log(root: Path) -> None:
    """``delayOffset.json`` and its ``.bak`` unreadable. A pass raises a typed error
    that says ``repair=True``; a repair sets both aside and the levels resume where the log's
    markers say: nothing delivered twice, nothing lost."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        for i in range(3):
            s.put("T", b"d%d" % i, delay_level=1)
        assert s.deliver_due(FAR) == 3
        s.put("T", b"w", delay_level=1)
        s.put("T", b"v", delay_level=4)
    for name in ("delayOffset.json", "delayOffset.json.bak"):
        (root / "config" / name).write_bytes(b'{"offsetTable":{1:\x00')
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        with pytest.raises(rmqlog.CorruptStoreError, match="repair=True") as err:
            s.deliver_due(FAR)
        assert err.value.path == str(offsets_file(root))
    with rmqlog.MessageStore.open(root, small_store_config(), repair=True) as s:
        assert s.recovery is not None
        assert any("delayOffset.json set aside" in p for p in s.recovery.problems)
        assert s.deliver_due(FAR) == 2
        assert delivered(s) == Counter([b"d0", b"d1", b"d2", b"w", b"v"])
    aside = sorted(p.name for p in (root / "config").iterdir() if ".damaged-" in p.name)
    assert sorted(n.split(".damaged-")[0] for n in aside) == ["delayOffset.json", "delayOffset.json.bak"]


def test_a_wrong_type_offset_table_is_set_aside_by_repair(root: Path) -> None:
    """Readable JSON that is not an offset table counts as unreadable too."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"w", delay_level=1)
    offsets_file(root).write_text('{"offsetTable": [1, 2]}')
    with rmqlog.MessageStore.open(root, small_store_config(), repair=True) as s:
        assert s.deliver_due(FAR) == 1 and delivered(s) == Counter([b"w"])


# ------------------------------------------------------------------ never early
def test_a_caller_time_before_the_store_time_delivers_nothing(root: Path) -> None:
    """``deliver_due(now_ms)`` 10 ms before a 2-hour message's store time delivered it
    at once (the clock-went-back correction fired on the caller's time)."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"2h", delay_level=18)
        t = stored_at(s, 18)
        assert LEVELS[17] == 2 * 3600 * 1000
        for now in (t - 10, t - 3 * 3600 * 1000, 0, t, t + LEVELS[17] - 1):
            assert s.deliver_due(now) == 0, now
        assert delivered(s) == Counter()
        assert s.deliver_due(t + LEVELS[17]) == 1 and delivered(s) == Counter([b"2h"])


def test_a_wall_clock_that_went_back_delivers_late_never_early(root: Path) -> None:
    """The scheduler's own clock one hour behind the store times (the wall clock went back):
    RocketMQ's correction would deliver at once; here the message waits for its due time."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"m", delay_level=3)  # 10 s
        t = stored_at(s, 3)
        s.scheduler.wall_ms = lambda: t - 3_600_000
        assert s.deliver_due() == 0
        s.scheduler.wall_ms = lambda: t + 9_999
        assert s.deliver_due() == 0
        s.scheduler.wall_ms = lambda: t + 10_000
        assert s.deliver_due() == 1


def test_a_damaged_tagscode_makes_nothing_early(root: Path) -> None:
    """The unit's tagsCode (derived, not checksummed) says due long ago: the record's store time
    decides, and the message waits for its due time; the next one waits behind it."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"a", delay_level=5)  # 1 min
        s.put("T", b"b", delay_level=5)
        t = stored_at(s, 5, 1)
        cq_file = next((root / "consumequeue" / S / "4").iterdir())
        raw = bytearray(cq_file.read_bytes())
        raw[12:20] = (1).to_bytes(8, "big")  # unit 0's tagsCode
        cq_file.write_bytes(bytes(raw))
        assert int(s.consume_queue(S, 4).read(0, 1)[0]["tagsCode"]) == 1
        assert s.deliver_due(t + 1000) == 0 and delivered(s) == Counter()
        assert s.deliver_due(t + LEVELS[4]) == 2


def test_a_shortened_level_delivers_by_the_new_delay(root: Path) -> None:
    """Units dispatched when level 3 was 1 hour, the store reopened with 10 s: due by the new
    delay (the record's store time + 10 s), as RocketMQ's correction does, and not before."""
    with rmqlog.MessageStore.open(root, small_store_config(message_delay_level="1s 5s 1h")) as s:
        s.put("T", b"m", delay_level=3)
        t = stored_at(s, 3)
    with rmqlog.MessageStore.open(root, small_store_config(message_delay_level="1s 5s 10s")) as s:
        assert s.deliver_due(t + 9_999) == 0
        assert s.deliver_due(t + 10_000) == 1


# ------------------------------------------------------------------ levels removed from the configuration
def test_removed_levels_are_delivered_at_the_last_level(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Reopened with 3 levels where there were 18, the messages waiting at levels 10
    and 18 are delivered with level 3's delay (never before), with a warning naming the levels
    and how many wait there."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"ten-a", delay_level=10)
        s.put("T", b"ten-b", delay_level=10)
        s.put("T", b"eighteen", delay_level=18)
        s.put("T", b"one", delay_level=1)
        first, last = stored_at(s, 10), max(stored_at(s, 10, 1), stored_at(s, 18))
    config = small_store_config(message_delay_level="1s 5s 10s")
    with (
        caplog.at_level(logging.WARNING, logger="rmqlog.schedule.scheduler"),
        rmqlog.MessageStore.open(root, config) as s,
    ):
        assert s.scheduler.deliver_due(first + 9_999).delivered == {1: 1}  # level 1 only
        assert delivered(s) == Counter([b"one"])
        report = s.scheduler.deliver_due(last + 10_000)
        assert report.delivered == {10: 2, 18: 1}
        assert delivered(s) == Counter([b"one", b"ten-a", b"ten-b", b"eighteen"])
        assert s.deliver_due(FAR) == 0
    assert "delay level 10 is no longer configured" in caplog.text and "2 message(s) wait at it" in caplog.text
    assert "delay level 18 is no longer configured" in caplog.text and "1 message(s) wait at it" in caplog.text
    assert load_delay_offsets(offsets_file(root)) == {1: 1, 10: 2, 18: 1}


def test_repair_sets_aside_an_unreadable_bak_whose_file_is_missing(root: Path) -> None:
    """Found by the fuzz: ``delayOffset.json`` deleted, its ``.bak`` unreadable: the repair's
    set-aside raised ``FileNotFoundError`` (it moved the missing file first)."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"d", delay_level=1)
        assert s.deliver_due(FAR) == 1
        s.put("T", b"w", delay_level=1)
    offsets_file(root).unlink()
    (root / "config" / "delayOffset.json.bak").write_text("{broken")
    with rmqlog.MessageStore.open(root, small_store_config(), repair=True) as s:
        assert s.deliver_due(FAR) == 1 and delivered(s) == Counter([b"d", b"w"])
    assert [p.name.split(".damaged-")[0] for p in (root / "config").iterdir() if ".damaged-" in p.name] == [
        "delayOffset.json.bak"
    ]
