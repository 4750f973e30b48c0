"""Property tests: whatever goes in through put_batch comes back out, and is RocketMQ's layout.

Random batches (topics, bodies of random bytes, tags, keys, user properties, flags, queue ids,
born timestamps) go into a store with 4 KiB commitlog segments (so the log rolls often) in
several put_batch calls; then everything is dispatched and read back through get_messages and
read_queue, and the files are walked with the independent reference codec.
"""

from __future__ import annotations

import datetime as dt
import re
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import ms_to_dt, read_queue_all, small_store_config, units, walk
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refcodec as rc
import rmqlog
from rmqlog.log.properties import RESERVED_PROPERTIES
from rmqlog.log.record import Record, ScanKind, decode_at

TOPICS = ["T0", "T1", "t_a", "%RETRY%g", "x-y|z"]
QUEUES = 4
HEX32 = re.compile(r"^[0-9A-F]{32}$")
GIVEN_UNIQ = "00112233445566778899AABBCCDDEEFF"  # a client id as RocketMQ makes them
# names a user property cannot have (the store's own, RocketMQ's system names) or that the
# generator gives on purpose
RESERVED = RESERVED_PROPERTIES | {"KEYS", "TAGS", "UNIQ_KEY"}

# text without the properties separators (and without surrogates, which UTF-8 cannot hold)
_safe = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02")
_token = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02 "), min_size=1, max_size=12)
# Java's string2messageProperties drops empty values, so user values are never empty
_prop_key = st.text(_safe, min_size=1, max_size=10).filter(lambda k: k not in RESERVED and not k.startswith("RMQLOG_"))
_prop_val = st.text(_safe, min_size=1, max_size=30)
_tag = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02|"), min_size=1, max_size=10)

message = st.fixed_dictionaries(
    {
        "topic": st.sampled_from(TOPICS),
        "body": st.binary(min_size=0, max_size=300),
        "queueId": st.one_of(st.none(), st.integers(0, QUEUES - 1)),
        "tags": st.one_of(st.none(), _tag),
        "keys": st.one_of(st.none(), st.lists(_token, max_size=4)),
        "properties": st.one_of(
            st.none(),
            st.dictionaries(_prop_key, _prop_val, max_size=4),
            st.dictionaries(_prop_key, _prop_val, max_size=2).map(lambda d: {**d, "UNIQ_KEY": GIVEN_UNIQ}),
        ),
        "flag": st.integers(-(2**31), 2**31 - 1),
        "bornTimestamp": st.one_of(st.none(), st.integers(0, 4_102_444_800_000)),
    }
)
batches = st.lists(st.lists(message, min_size=1, max_size=40), min_size=1, max_size=4)

MAP = pa.map_(pa.string(), pa.string())


def to_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table(
        {
            "topic": pa.array([r["topic"] for r in rows], pa.string()),
            "body": pa.array([r["body"] for r in rows], pa.binary()),
            "queueId": pa.array([r["queueId"] for r in rows], pa.int32()),
            "tags": pa.array([r["tags"] for r in rows], pa.string()),
            "keys": pa.array([r["keys"] for r in rows], pa.list_(pa.string())),
            "properties": pa.array(
                [None if r["properties"] is None else list(r["properties"].items()) for r in rows], MAP
            ),
            "flag": pa.array([r["flag"] for r in rows], pa.int32()),
            "bornTimestamp": pa.array([r["bornTimestamp"] for r in rows], pa.int64()),
        }
    )


def expected_properties(msg: dict[str, Any], uniq: str) -> dict[str, str]:
    props = dict(msg["properties"] or {})
    if msg["keys"]:
        props["KEYS"] = " ".join(msg["keys"])
    if msg["tags"] is not None:
        props["TAGS"] = msg["tags"]
    props.setdefault("UNIQ_KEY", uniq)
    return props


def check_round_trip(root: Path, all_batches: list[list[dict[str, Any]]]) -> None:
    sent: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}  # commitLogOffset -> (input, result)
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        for rows in all_batches:
            before = dt.datetime.now(dt.UTC)
            out = s.put_batch(to_table(rows)).to_pylist()
            assert len(out) == len(rows)
            for msg, res in zip(rows, out, strict=True):
                assert res["commitLogOffset"] not in sent
                assert res["storeTimestamp"] >= before - dt.timedelta(milliseconds=2)
                sent[res["commitLogOffset"]] = (msg, res)
        assert s.dispatch() == len(sent)

        # ---- the files, read by the reference codec
        recs = walk(root)
        assert [r.physical_offset for r in recs] == sorted(sent)
        by_queue: dict[tuple[str, int], list[rc.RefRecord]] = {}
        for rec in recs:
            msg, res = sent[rec.physical_offset]
            assert rec.topic == msg["topic"]
            assert rec.body == msg["body"]
            assert rec.body_crc == rc.body_crc(msg["body"])
            assert rec.flag == msg["flag"]
            assert rec.queue_offset == res["queueOffset"]
            if msg["queueId"] is not None:
                assert rec.queue_id == msg["queueId"]
            assert 0 <= rec.queue_id < QUEUES
            if msg["bornTimestamp"] is not None:
                assert rec.born_timestamp == msg["bornTimestamp"]
            assert ms_to_dt(rec.store_timestamp) == res["storeTimestamp"]
            assert rec.store_host == "127.0.0.1:10911" and rec.sys_flag == 0
            assert rec.msg_id == res["msgId"]
            uniq = rec.properties.get("UNIQ_KEY", "")
            if "UNIQ_KEY" not in (msg["properties"] or {}):
                assert HEX32.match(uniq)
            assert rec.properties == expected_properties(msg, uniq)
            by_queue.setdefault((rec.topic, rec.queue_id), []).append(rec)
        generated = [r.properties["UNIQ_KEY"] for r in recs if r.properties["UNIQ_KEY"] != GIVEN_UNIQ]
        assert len(set(generated)) == len(generated)
        segs = {r.physical_offset // 4096 for r in recs}
        assert segs == set(range(max(segs) + 1))  # contiguous segments, every one used

        # ---- dense queue offsets, consume-queue units, and reads through the store
        for (topic, qid), rs in by_queue.items():
            assert [r.queue_offset for r in rs] == list(range(len(rs))), (topic, qid)
            assert units(root, topic, qid) == [(r.physical_offset, r.total_size, r.tags_code) for r in rs]
            assert s.min_offset(topic, qid) == 0 and s.max_offset(topic, qid) == len(rs)
            via_get = read_queue_all(s, topic, qid, max_count=7)
            via_read = s.read_queue(topic, qid, 0, len(rs)).to_pylist()
            assert via_get == via_read
            assert len(via_get) == len(rs)
            for row, rec in zip(via_get, rs, strict=True):
                msg, res = sent[row["commitLogOffset"]]
                assert row["commitLogOffset"] == rec.physical_offset
                assert (row["topic"], row["queueId"], row["queueOffset"]) == (topic, qid, rec.queue_offset)
                assert row["msgId"] == res["msgId"]
                assert row["body"] == msg["body"]
                assert row["tags"] == msg["tags"]
                assert row["keys"] == (msg["keys"] or [])
                assert dict(row["properties"]) == rec.properties
                assert row["flag"] == msg["flag"]
                assert row["bodyCRC"] == rec.body_crc
                assert row["storeTimestamp"] == res["storeTimestamp"]
                assert row["bornTimestamp"] == ms_to_dt(rec.born_timestamp)
        for topic in TOPICS:  # queues nothing went to are empty
            for qid in range(QUEUES):
                if (topic, qid) not in by_queue:
                    assert s.max_offset(topic, qid) == 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batches)
def test_put_batch_round_trip(all_batches: list[list[dict[str, Any]]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        check_round_trip(Path(d) / "store", all_batches)


@pytest.mark.optin
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.lists(message, min_size=1, max_size=200), min_size=1, max_size=8))
def test_put_batch_round_trip_heavy(all_batches: list[list[dict[str, Any]]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        check_round_trip(Path(d) / "store", all_batches)


# --------------------------------------------------------------------------- scalar vs vectorized


def _host(h: str) -> bytes:
    return rc.host_bytes(h)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(message, min_size=1, max_size=40))
def test_scalar_codec_agrees_with_put_batch(rows: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "store"
        with rmqlog.MessageStore.open(root, small_store_config()) as s:
            out = s.put_batch(to_table(rows)).to_pylist()
        refs = {r.physical_offset: r for r in walk(root)}
        for msg, res in zip(rows, out, strict=True):
            clo = res["commitLogOffset"]
            seg_start = clo - clo % 4096
            data = (root / "commitlog" / f"{seg_start:020d}").read_bytes()
            pos = clo - seg_start
            ref = refs[clo]
            raw = data[pos : pos + ref.total_size]

            # the scalar decoder reads the vectorized encoder's bytes
            scan = decode_at(memoryview(data), pos, check_crc=True)
            assert scan.kind is ScanKind.RECORD and scan.size == ref.total_size
            got = scan.record
            assert got is not None
            assert (got.topic, got.body, got.queue_id, got.flag) == (
                msg["topic"],
                msg["body"],
                ref.queue_id,
                msg["flag"],
            )
            assert (got.queue_offset, got.physical_offset) == (res["queueOffset"], clo)
            assert got.body_crc == rc.body_crc(msg["body"])
            assert got.store_timestamp == ref.store_timestamp and got.born_timestamp == ref.born_timestamp
            assert got.born_host == _host(ref.born_host) and got.store_host == _host(ref.store_host)
            assert rc.decode_properties(got.properties) == ref.properties
            assert got.encode() == raw

            # the scalar encoder, fed the input row and the fields the append assigned, writes the same bytes
            rec = Record(
                queue_id=ref.queue_id,
                flag=msg["flag"],
                queue_offset=res["queueOffset"],
                physical_offset=clo,
                sys_flag=0,
                born_timestamp=msg["bornTimestamp"] if msg["bornTimestamp"] is not None else ref.born_timestamp,
                born_host=_host("127.0.0.1:10911"),
                store_timestamp=int(res["storeTimestamp"].timestamp() * 1000 + 0.5),
                store_host=_host("127.0.0.1:10911"),
                reconsume_times=0,
                prepared_transaction_offset=0,
                body=msg["body"],
                topic=msg["topic"],
                properties=got.properties,
            )
            assert rec.encode() == raw
            assert rc.decode_record(rec.encode())[1] == ref


# --------------------------------------------------------------------------- many queues


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 79), st.integers(0, 1023)), min_size=1, max_size=120), min_size=1, max_size=3
    )
)
def test_queue_offsets_with_many_queues(all_batches: list[list[tuple[int, int]]]) -> None:
    """QUEUEOFFSET is each queue's next offset plus the row's rank in the batch, for any mix of queues."""
    expected_next: dict[tuple[str, int], int] = {}
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "store"
        cfg = small_store_config(default_topic_queue_nums=1024, mapped_file_size_commit_log=1 << 16)
        with rmqlog.MessageStore.open(root, cfg) as s:
            for rows in all_batches:
                tbl = pa.table(
                    {
                        "topic": pa.array([f"Q{t}" for t, _ in rows]),
                        "body": pa.array([b"%d" % i for i in range(len(rows))], pa.binary()),
                        "queueId": pa.array([q for _, q in rows], pa.int32()),
                    }
                )
                got = s.put_batch(tbl).column("queueOffset").to_pylist()
                want = []
                for t, q in rows:
                    key = (f"Q{t}", q)
                    want.append(expected_next.get(key, 0))
                    expected_next[key] = want[-1] + 1
                assert got == want
            assert s.dispatch() == sum(len(b) for b in all_batches)
            for (topic, q), n in expected_next.items():
                assert s.max_offset(topic, q) == n
        seen: dict[tuple[str, int], int] = {}
        for rec in walk(root):
            key = (rec.topic, rec.queue_id)
            assert rec.queue_offset == seen.get(key, 0)
            seen[key] = rec.queue_offset + 1
        assert seen == expected_next


# --------------------------------------------------------------------------- large batches, large bodies


def test_large_batch_and_large_bodies(tmp_path: Path) -> None:
    """Thousands of rows in one call (CRCs computed off-thread) and bodies over 1 KiB (memoryview CRC path)."""
    import random

    rnd = random.Random(7)
    root = tmp_path / "big"
    cfg = small_store_config(mapped_file_size_commit_log=1 << 20, max_message_size=300_000)
    many = [rnd.randbytes(rnd.randrange(0, 64)) for _ in range(6000)]
    big = [rnd.randbytes(rnd.randrange(1025, 250_000)) for _ in range(12)]
    with rmqlog.MessageStore.open(root, cfg) as s:
        out_many = s.put_batch(pa.table({"topic": pa.array(["M"] * len(many)), "body": pa.array(many, pa.binary())}))
        out_big = s.put_batch(
            pa.table(
                {
                    "topic": pa.array(["B"] * len(big)),
                    "body": pa.array(big, pa.binary()),
                    "queueId": pa.array([0] * len(big), pa.int32()),
                }
            )
        )
        assert s.dispatch() == len(many) + len(big)
        got_big = read_queue_all(s, "B", 0, max_count=5)
        assert [r["body"] for r in got_big] == big
        got_many = sorted(
            (r["commitLogOffset"], r["body"]) for q in range(QUEUES) for r in read_queue_all(s, "M", q, max_count=500)
        )
        assert [b for _, b in got_many] == many
    recs = walk(root)  # refcodec checks every body CRC
    assert [r.body for r in recs] == many + big
    assert [r.physical_offset for r in recs] == out_many.column("commitLogOffset").to_pylist() + out_big.column(
        "commitLogOffset"
    ).to_pylist()
    assert all(r.body_crc == rc.body_crc(r.body) for r in recs)
    assert len({r.physical_offset // (1 << 20) for r in recs}) >= 3
