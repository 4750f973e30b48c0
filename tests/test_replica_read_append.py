"""The store's side of replication: ``replica_read`` (master) and ``replica_append`` (slave).

The slave's commitlog is checked byte for byte against the master's and with the
independent reference codec (refcodec); its queues, append state and idempotence markers
against the master's. Tiny segments force rolls (the master's blank records come through as
bytes).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import small_store_config

import refcodec as rc
import rmqlog
from rmqlog.errors import ReplicaOffsetError, ReplicaStreamError

SEG = 4096


def _open(root: Path) -> rmqlog.MessageStore:
    return rmqlog.MessageStore.open(root, small_store_config(mapped_file_size_commit_log=SEG, max_message_size=1024))


def _fill(store: rmqlog.MessageStore, rounds: int, seed: int = 1) -> None:
    rnd = random.Random(seed)
    for r in range(rounds):
        n = rnd.randint(1, 6)
        bodies = [rnd.randbytes(rnd.randint(0, 700)) for _ in range(n)]
        table = pa.table(
            {
                "topic": [f"T{r % 3}"] * n,
                "body": bodies,
                "queueId": pa.array([rnd.randint(0, 3) for _ in range(n)], pa.int32()),
            }
        )
        if r % 5 == 4:
            store.put_batch(table, writer=f"sink/{r % 2}", sequence=r)
        else:
            store.put_batch(table)


def _replicate(master: rmqlog.MessageStore, slave: rmqlog.MessageStore, chunk: int | None = None, seed: int = 2) -> int:
    """Stream the master's log to the slave in transfers of at most ``chunk`` bytes (random
    sizes when None), as the HA service does; returns the number of transfers."""
    rnd = random.Random(seed)
    transfers = 0
    while True:
        at = slave.replica_end()
        data = master.replica_read(at, chunk or rnd.randint(1, 900))
        if not data:
            return transfers
        assert slave.replica_append(at, data) == at + len(data)
        transfers += 1


def _log_bytes(root: Path, upto: int) -> bytes:
    parts = []
    for start, path in rc.list_segments(str(root / "commitlog")):
        if start < upto:
            parts.append(Path(path).read_bytes()[: min(SEG, upto - start)])
    return b"".join(parts)


@pytest.mark.parametrize("chunk", [32 << 10, 7, None])
def test_slave_log_is_byte_identical_across_rolls(tmp_path: Path, chunk: int | None) -> None:
    master = _open(tmp_path / "m")
    slave = _open(tmp_path / "s")
    try:
        _fill(master, 40)
        tail = master.published_tail()
        assert tail > 3 * SEG  # several rolls
        _replicate(master, slave, chunk)
        assert slave.published_tail() == tail == slave.replica_end()
        assert _log_bytes(tmp_path / "s", tail) == _log_bytes(tmp_path / "m", tail)
        ref_m = rc.walk_commitlog(str(tmp_path / "m" / "commitlog"), SEG)
        ref_s = rc.walk_commitlog(str(tmp_path / "s" / "commitlog"), SEG)
        assert [r.physical_offset for r in ref_s] == [r.physical_offset for r in ref_m]
        assert [(r.topic, r.queue_id, r.queue_offset, r.body) for r in ref_s] == [
            (r.topic, r.queue_id, r.queue_offset, r.body) for r in ref_m
        ]
        ms, ss = master.append_state(), slave.append_state()
        assert (ss.tail, ss.queues, ss.writers, ss.store_timestamp) == (
            ms.tail,
            ms.queues,
            ms.writers,
            ms.store_timestamp,
        )
        master.dispatch()
        slave.dispatch()
        for t in ("T0", "T1", "T2"):
            for q in range(4):
                a = master.read_queue(t, q, 0, 1000)
                b = slave.read_queue(t, q, 0, 1000)
                assert a.num_rows
                assert b.column("body").to_pylist() == a.column("body").to_pylist()
                assert b.column("commitLogOffset").to_pylist() == a.column("commitLogOffset").to_pylist()
    finally:
        master.close()
        slave.close()


def test_promoted_slave_continues_queues_and_markers(tmp_path: Path) -> None:
    master = _open(tmp_path / "m")
    slave = _open(tmp_path / "s")
    _fill(master, 12)
    _replicate(master, slave, 32 << 10)
    master.close()
    slave.close()
    promoted = _open(tmp_path / "s")  # reopened (recovery as a first opener): a master now
    try:
        res = promoted.put_batch(pa.table({"topic": ["T0"], "body": [b"x"], "queueId": pa.array([1], pa.int32())}))
        before = [
            r for r in rc.walk_commitlog(str(tmp_path / "s" / "commitlog"), SEG) if (r.topic, r.queue_id) == ("T0", 1)
        ]
        assert res.column("queueOffset")[0].as_py() == before[-2].queue_offset + 1
        # a replayed idempotent batch of the old master's writer is a no-op on the promoted slave
        again = promoted.put_batch(pa.table({"topic": ["T0"], "body": [b"dup"]}), writer="sink/1", sequence=9)
        assert again.num_rows == 0
    finally:
        promoted.close()


def test_partial_record_waits_and_restart_resumes(tmp_path: Path) -> None:
    master = _open(tmp_path / "m")
    slave = _open(tmp_path / "s")
    _fill(master, 10)
    data = master.replica_read(0, 3000)
    slave.replica_append(0, data[:1000])
    published = slave.published_tail()
    assert 0 < published <= 1000 and slave.replica_end() == 1000
    slave.close()  # restart mid-record: the unpublished bytes are not part of the log
    slave = _open(tmp_path / "s")
    try:
        assert slave.replica_end() == published
        with pytest.raises(ReplicaOffsetError) as info:
            slave.replica_append(1000, data[1000:2000])
        assert info.value.end == published
        _replicate(master, slave, 32 << 10)
        tail = master.published_tail()
        assert _log_bytes(tmp_path / "s", tail) == _log_bytes(tmp_path / "m", tail)
    finally:
        master.close()
        slave.close()


def _first_records(master: rmqlog.MessageStore) -> tuple[bytes, list[int]]:
    data = master.replica_read(0, SEG)
    starts, pos = [], 0
    while pos + 8 <= len(data) and int.from_bytes(data[pos + 4 : pos + 8], "big", signed=True) != -875286124:
        starts.append(pos)
        size = int.from_bytes(data[pos : pos + 4], "big")
        if size == 0 or pos + size > len(data):
            break
        pos += size
    return data, starts


@pytest.mark.parametrize("damage", ["crc", "physical", "queue_offset", "magic", "size", "topic"])
def test_damaged_record_refused_nothing_past_it(tmp_path: Path, damage: str) -> None:
    master = _open(tmp_path / "m")
    slave = _open(tmp_path / "s")
    try:
        _fill(master, 10)
        data, starts = _first_records(master)
        assert len(starts) >= 3
        bad = bytearray(data)
        at = starts[2]
        if damage == "crc":
            bad[at + 8] ^= 0x40
        elif damage == "physical":
            bad[at + 28 : at + 36] = (at + 1).to_bytes(8, "big")
        elif damage == "queue_offset":
            bad[at + 20 : at + 28] = (1000).to_bytes(8, "big")
        elif damage == "magic":
            bad[at + 4] ^= 0xFF
        elif damage == "size":
            bad[at : at + 4] = (1 << 30).to_bytes(4, "big")
        else:  # a topic name the store refuses (a path): same length, so the record still adds up
            rec = master.replica_read(at, int.from_bytes(data[at : at + 4], "big"))
            tpos = rec.index(b"T", 100)
            bad[at + tpos : at + tpos + 2] = b"/."
        end = min(len(bad), starts[-1])
        with pytest.raises(ReplicaStreamError) as info:
            slave.replica_append(0, bytes(bad[:end]))
        assert info.value.offset == at
        assert slave.published_tail() == at  # the two records before it were published
        assert slave.replica_end() == at
        # nothing past it: the bytes from the bad record on were cleared
        assert not any((tmp_path / "s" / "commitlog" / f"{0:020d}").read_bytes()[at:SEG])
        assert len(rc.walk_commitlog(str(tmp_path / "s" / "commitlog"), SEG)) == 2
        # the good stream goes on from there
        _replicate(master, slave, 32 << 10)
        tail = master.published_tail()
        assert _log_bytes(tmp_path / "s", tail) == _log_bytes(tmp_path / "m", tail)
    finally:
        master.close()
        slave.close()


def test_foreign_stream_refused(tmp_path: Path) -> None:
    master = _open(tmp_path / "m")
    other = _open(tmp_path / "o")
    slave = _open(tmp_path / "s")
    try:
        _fill(master, 6, seed=1)
        _fill(other, 6, seed=9)
        _replicate(master, slave, 32 << 10)
        end = slave.replica_end()
        # another log's bytes at this offset: PHYSICALOFFSET / queue offsets do not continue
        foreign = other.replica_read(0, 2000)
        with pytest.raises(ReplicaStreamError):
            slave.replica_append(end, foreign)
        assert slave.published_tail() == end
        # zeros where a record belongs, garbage
        with pytest.raises(ReplicaStreamError):
            slave.replica_append(end, bytes(64))
        with pytest.raises(ReplicaStreamError):
            slave.replica_append(end, b"\x00\x00\x01\x00garbage!" * 4)
        # a transfer crossing its segment, an offset that is not the end: nothing written
        with pytest.raises(ReplicaStreamError, match="cross"):
            slave.replica_append(end, bytes(SEG))
        with pytest.raises(ReplicaOffsetError):
            slave.replica_append(end + 1, b"x")
        assert slave.published_tail() == end == slave.replica_end()
    finally:
        master.close()
        other.close()
        slave.close()


def test_replica_read_bounds(tmp_path: Path) -> None:
    master = _open(tmp_path / "m")
    try:
        assert master.replica_read(0, 100) == b""
        _fill(master, 20)
        tail = master.published_tail()
        assert len(master.replica_read(0, 1 << 20)) == SEG  # never past its segment
        assert len(master.replica_read(SEG - 10, 100)) == 10
        assert master.replica_read(tail, 10) == b""
        assert len(master.replica_read(tail - 5, 100)) == 5  # never past the tail
        with pytest.raises(ReplicaOffsetError, match="past the published tail"):
            master.replica_read(tail + 1, 10)
        master.commitlog.segments  # noqa: B018 - (the store's retention deletes the oldest segment below)
        with pytest.raises(rmqlog.InvalidArgumentError):
            master.replica_read(0, 0)
    finally:
        master.close()


def test_restart_inside_a_segment_blank_resumes_at_the_blank(tmp_path: Path) -> None:
    master = _open(tmp_path / "m")
    slave = _open(tmp_path / "s")
    try:
        _fill(master, 30)
        # up to just inside the first segment's end blank (the master's bytes, as stored)
        first = master.replica_read(0, SEG)
        end0 = [r for r in rc.walk_commitlog(str(tmp_path / "m" / "commitlog"), SEG) if r.physical_offset < SEG][-1]
        blank_at = end0.physical_offset + end0.total_size
        assert SEG - blank_at >= 16  # a blank of some size ends the segment
        slave.replica_append(0, first[: blank_at + 4])  # the blank's header cut in two
        assert slave.published_tail() == blank_at
        slave.replica_append(blank_at + 4, first[blank_at + 4 : SEG - 3])
        assert slave.published_tail() == blank_at  # published only once the segment's last byte came
        slave.close()
        slave = _open(tmp_path / "s")
        assert slave.replica_end() == blank_at  # resumes at the blank: its bytes come again
        slave.replica_append(blank_at, first[blank_at:])
        assert slave.published_tail() == SEG
        _replicate(master, slave, 32 << 10)
        tail = master.published_tail()
        assert _log_bytes(tmp_path / "s", tail) == _log_bytes(tmp_path / "m", tail)
    finally:
        master.close()
        slave.close()


@pytest.mark.parametrize("kind", ["queue_offset", "topic", "queue_id", "crc", "none"])
@pytest.mark.parametrize("seed", [1, 2])
def test_fast_checks_agree_with_the_general_ones(tmp_path: Path, seed: int, kind: str) -> None:
    """The continuation checks' fast form (``rmqlog.access.replica_check``) and the general
    one give the same published tails, append states and refusals, on random streams cut at
    random places, with a random record damaged in one of a few ways."""
    rnd = random.Random(seed)
    master = _open(tmp_path / "m")
    _fill(master, 30, seed=seed)
    tail = master.published_tail()
    log = b"".join(master.replica_read(o, SEG) for o in range(0, tail, SEG))[:tail]
    records = rc.walk_commitlog(str(tmp_path / "m" / "commitlog"), SEG)
    victim = rnd.choice(records)
    at = victim.physical_offset
    bad = bytearray(log)
    if kind == "queue_offset":
        bad[at + 20 : at + 28] = (victim.queue_offset + rnd.choice([1, 2, -1])).to_bytes(8, "big", signed=True)
    elif kind == "queue_id":
        bad[at + 12 : at + 16] = (victim.queue_id + 9).to_bytes(4, "big")
    elif kind == "crc":
        bad[at + 8] ^= 0x10
    elif kind == "topic":
        body_len = int.from_bytes(log[at + 84 : at + 88], "big")  # IPv4 hosts: an 88-byte header
        tpos = at + 88 + body_len + 1  # after the 1-byte topic length (MAGIC_V1)
        assert bytes(log[tpos : tpos + len(victim.topic)]) == victim.topic.encode()
        bad[tpos] = ord("/")
    outcomes = []
    for fast in (True, False):
        slave = _open(tmp_path / f"s{fast}")
        slave._replica_writer().fast = fast
        steps = []
        r2 = random.Random(seed)
        try:
            while True:
                end = slave.replica_end()
                if end >= tail:
                    break
                n = min(r2.randint(1, 3000), SEG - end % SEG, tail - end)
                try:
                    slave.replica_append(end, bytes(bad[end : end + n]))
                    steps.append(("ok", slave.published_tail()))
                except ReplicaStreamError as exc:
                    steps.append(("refused", exc.offset, str(exc).split("; file")[0]))
                    break
            st = slave.append_state()
            outcomes.append((steps, st.tail, st.queues, st.writers, st.store_timestamp))
        finally:
            slave.close()
    assert outcomes[0] == outcomes[1], kind
    master.close()


def test_an_empty_slave_starts_at_the_masters_first_segment(tmp_path: Path) -> None:
    cfg = small_store_config(
        mapped_file_size_commit_log=SEG,
        max_message_size=1024,
        delete_when="00;01;02;03;04;05;06;07;08;09;10;11;12;13;14;15;16;17;18;19;20;21;22;23",
    )
    master = rmqlog.MessageStore.open(tmp_path / "m", cfg)
    slave = rmqlog.MessageStore.open(tmp_path / "s", cfg)
    try:
        _fill(master, 30)
        master.dispatch()
        master.flush()  # (retention deletes only below the flushed position)
        master.retention.disk_used = lambda path: 10.0
        old = time.time() - 100 * 3600
        for _start, path in rc.list_segments(str(tmp_path / "m" / "commitlog"))[:2]:
            os.utime(path, (old, old))
        report = master.clean_expired()
        first = master.commit_log_min_offset()
        assert first == 2 * SEG, report
        assert first == 2 * SEG
        with pytest.raises(ReplicaOffsetError):
            slave.replica_append(first + 8, b"x")  # only a segment's start
        pos = first
        while pos < master.published_tail():
            data = master.replica_read(pos, 32 << 10)
            pos = slave.replica_append(pos, data)
        tail = master.published_tail()
        assert slave.published_tail() == tail
        for start, path in rc.list_segments(str(tmp_path / "s" / "commitlog")):
            assert start >= first
            assert (
                Path(path).read_bytes()[: min(SEG, tail - start)]
                == (tmp_path / "m" / "commitlog" / f"{start:020d}").read_bytes()[: min(SEG, tail - start)]
            )
        slave.dispatch()
        master.close()
        slave.close()
        slave = rmqlog.MessageStore.open(tmp_path / "s", cfg)  # reopened: recovery keeps it all
        assert slave.published_tail() == tail and slave.commit_log_min_offset() == first
        kept = [
            r.body
            for r in rc.walk_commitlog(str(tmp_path / "s" / "commitlog"), SEG)
            if (r.topic, r.queue_id) == ("T0", 0)
        ]
        assert kept and slave.read_queue("T0", 0, 0, 1000).column("body").to_pylist() == kept
    finally:
        slave.close()
