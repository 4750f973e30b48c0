"""The record-by-record decode of a few stored records (:func:`rmqlog.decode_record_rows`, what
our client takes for a small pull reply) pinned to the general Arrow decode
(:func:`rmqlog.decode_records`): the same values on random records (both host layouts, both
magics, odd properties, empty bodies, timestamps at their bounds) and the same refusals
(:class:`rmqlog.CorruptRecordError`, same message and byte position) on random damage; the
client's ``Reply`` gives the same table either way round; its cost is counted in records
decoded, not timed.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

import rmqlog
from rmqlog.log import rows as rows_module
from rmqlog.log.record import MAGIC_V1, MAGIC_V2, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, Record
from rmqnet.client.records import SMALL_REPLY, Reply

_NAMES = ["TAGS", "KEYS", "UNIQ_KEY", "a", "b", "RMQLOG_WRITER", "é", "", "x y"]
_VALUES = ["", "v", "k1 k2", "  k3  ", "tag", "ü€", "a\x01b", "1"]


def _properties(rng: random.Random) -> bytes:
    """A properties string, mostly RocketMQ's form, sometimes not (Java's rules decide)."""
    parts = []
    for _ in range(rng.randint(0, 5)):
        name, value = rng.choice(_NAMES), rng.choice(_VALUES)
        parts.append(
            rng.choice(
                [
                    f"{name}\x01{value}\x02",
                    f"{name}\x01{value}\x02",
                    f"{name}\x02",
                    f"{name}\x01",
                    f"{name}\x01{value}\x01\x02",
                    "\x02",
                    f"\x01{value}\x02",
                ]
            )
        )
    raw = "".join(parts).encode()
    if rng.random() < 0.1:
        raw += b"\xff\xfe\x01v\x02"  # not UTF-8: replaced as Java's new String would
    return raw


def _host(rng: random.Random, v6: bool) -> bytes:
    addr = bytes(rng.randrange(256) for _ in range(16 if v6 else 4))
    return addr + rng.randrange(-(2**31), 2**31).to_bytes(4, "big", signed=True)


def random_record(rng: random.Random) -> bytes:
    v2 = rng.random() < 0.3
    topic = rng.choice(["T", "topic-é", "%RETRY%g", "t" * (rng.randint(1, 300) if v2 else rng.randint(1, 120))])
    return Record(
        queue_id=rng.randrange(0, 2**31),
        flag=rng.randrange(-(2**31), 2**31),
        queue_offset=rng.randrange(0, 2**40),
        physical_offset=rng.randrange(-(2**63), 2**63),
        sys_flag=rng.randrange(0, 16),
        born_timestamp=rng.choice([MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS, 0, rng.randrange(0, 2**41)]),
        born_host=_host(rng, rng.random() < 0.2),
        store_timestamp=rng.choice([0, MAX_TIMESTAMP_MS, rng.randrange(0, 2**41)]),
        store_host=_host(rng, rng.random() < 0.2),
        reconsume_times=rng.randrange(-5, 20),
        prepared_transaction_offset=rng.randrange(0, 2**40),
        body=bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 7, 100, 1500]))),
        topic=topic,
        properties=_properties(rng),
        magic=MAGIC_V2 if v2 else MAGIC_V1,
    ).encode()


def _outcome(decode, data: bytes) -> object:
    try:
        return decode(data)
    except rmqlog.CorruptRecordError as exc:
        return ("refused", str(exc), exc.offset)


def _general(data: bytes) -> object:
    return rmqlog.decode_records(data).to_pylist()


def test_rows_are_the_table_s_rows_on_random_records() -> None:
    rng = random.Random(7)
    for _ in range(300):
        data = b"".join(random_record(rng) for _ in range(rng.randint(0, 6)))
        got = rmqlog.decode_record_rows(data)
        assert got == _general(data)
        assert rows_module._walk(memoryview(data), len(data)) == got  # the record-by-record walk itself, no fallback
        if got:
            assert Reply(data).messages.equals(rmqlog.decode_records(data))  # the table made from the rows


def test_damaged_bodies_are_refused_as_the_general_decode_refuses_them() -> None:
    rng = random.Random(11)
    for i in range(400):
        data = bytearray(b"".join(random_record(rng) for _ in range(rng.randint(1, 4))))
        how = i % 5
        if how == 0:
            del data[rng.randrange(len(data)) :]  # cut short
        elif how == 1:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)  # a flipped bit anywhere
        elif how == 2:
            at = rng.randrange(0, 48)  # a header field of the first record
            data[at : at + 4] = rng.randbytes(4)
        elif how == 3:
            data += bytes(rng.randint(1, 100))  # zeros after the records
        else:
            data += rng.randbytes(rng.randint(1, 100))
        data = bytes(data)
        assert _outcome(rmqlog.decode_record_rows, data) == _outcome(_general, data), (i, how)


def test_more_records_than_asked_for_are_left_to_the_table_after_a_count() -> None:
    rng = random.Random(3)
    data = b"".join(random_record(rng) for _ in range(SMALL_REPLY + 1))
    assert rmqlog.decode_record_rows(data, max_rows=SMALL_REPLY) is None
    assert rmqlog.decode_record_rows(data[:-1], max_rows=SMALL_REPLY) is None  # counted before any check
    reply = Reply(data)
    assert len(reply) == SMALL_REPLY + 1 and reply.rows == _general(data)
    with pytest.raises(rmqlog.CorruptRecordError):
        Reply(data[:-1])


def test_a_small_reply_costs_its_records_and_no_arrow_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Work counted: a reply of k records decodes k records, calls no Arrow decode (until its
    table is asked for), for every k up to SMALL_REPLY."""
    rng = random.Random(5)
    walked: list[int] = []
    real_walk = rows_module._walk

    def counting_walk(view: memoryview, n: int) -> list[dict[str, object]]:
        out = real_walk(view, n)
        walked.append(len(out))
        return out

    def no_table(data: object) -> pa.Table:
        raise AssertionError("the Arrow decode ran for a small reply")

    monkeypatch.setattr(rows_module, "_walk", counting_walk)
    monkeypatch.setattr("rmqnet.client.records.decode_records", no_table)
    for k in (1, 2, 8, SMALL_REPLY):
        data = b"".join(random_record(rng) for _ in range(k))
        reply = Reply(data)
        assert walked[-1] == k and len(reply) == k
        assert reply.rows[0]["body"] == _general(data)[0]["body"]  # type: ignore[index]
        assert reply.messages["body"][0].as_py() == reply.rows[0]["body"]  # the README's form still works
