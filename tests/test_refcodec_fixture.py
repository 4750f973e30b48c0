"""Check the reference codec (refcodec/) against real files written by RocketMQ.

The fixtures are kept in ``tests/fixtures/rocketmq`` (see its README), a byte-identical copy
of the workplace's shared folder (checked below when that folder sits beside the clone).
"""

from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import FIXTURES, SHARED_FIXTURES  # noqa: E402

import refcodec as rc  # noqa: E402

COMMITLOG_DIR = FIXTURES / "commitlog-8k-4.9"
SEGMENT = COMMITLOG_DIR / "00000000000000000000"
CONFIG_DIR = FIXTURES / "broker-4.4-store" / "config"

BODY = b"Once, there was a chance for me!"
RECORD_SIZE = 172
N_RECORDS = 47
BLANK_POS = 8084
SEGMENT_SIZE = 8192


@pytest.fixture(scope="module")
def segment_bytes() -> bytes:
    """The raw bytes of the 8 KiB RocketMQ 4.9 commitlog segment."""
    return SEGMENT.read_bytes()


@pytest.fixture(scope="module")
def records() -> list[rc.RefRecord]:
    """All records of the fixture commitlog, walked by the reference codec."""
    return rc.walk_commitlog(str(COMMITLOG_DIR))


# --------------------------------------------------------------------------- commitlog fixture


def test_fixtures_are_the_shared_files() -> None:
    """The repository's copy is every file of the shared folder, byte for byte."""
    ours = {p.relative_to(FIXTURES): p.read_bytes() for p in FIXTURES.rglob("*") if p.is_file()}
    assert len(ours) == 7 and all(ours.values())
    if not SHARED_FIXTURES.is_dir():
        return  # a clone without the workplace beside it: the copy is all there is
    shared = {p.relative_to(SHARED_FIXTURES): p.read_bytes() for p in SHARED_FIXTURES.rglob("*") if p.is_file()}
    assert ours == shared


def test_segment_file(segment_bytes: bytes) -> None:
    """The fixture is one 8192-byte segment."""
    assert len(segment_bytes) == SEGMENT_SIZE


def test_record_count_sizes_and_offsets(records: list[rc.RefRecord]) -> None:
    """47 records of 172 bytes, queue offsets 0..46, PHYSICALOFFSET = position."""
    assert len(records) == N_RECORDS
    for i, rec in enumerate(records):
        assert rec.total_size == RECORD_SIZE
        assert rec.magic == rc.MAGIC_V1
        assert rec.queue_offset == i
        assert rec.physical_offset == i * RECORD_SIZE
    assert N_RECORDS * RECORD_SIZE == BLANK_POS


def test_record_fields(records: list[rc.RefRecord]) -> None:
    """Every field of every record has the value RocketMQ wrote."""
    for rec in records:
        assert rec.topic == "abc"
        assert rec.queue_id == 0
        assert rec.flag == 0
        assert rec.sys_flag == 0
        assert rec.reconsume_times == 0
        assert rec.prepared_transaction_offset == 0
        assert rec.born_host == "127.0.0.1:0"
        assert rec.store_host == "192.168.71.1:8123"
        assert rec.body == BODY
        assert rec.body_crc == 151131488
        assert rec.body_crc == zlib.crc32(BODY) & 0x7FFFFFFF == rc.body_crc(BODY)
        assert 0 <= rec.store_timestamp - rec.born_timestamp < 1000
        assert rec.born_timestamp > 1_600_000_000_000  # 2020+, in ms


def test_record_properties(records: list[rc.RefRecord]) -> None:
    """Properties are `0`, `KEYS` (= born ms) and `TAGS` = TAG1, in that order on disk."""
    for rec in records:
        assert list(rec.properties) == ["0", "KEYS", "TAGS"]
        assert rec.properties["0"] == "imagoodperson0"
        assert rec.properties["KEYS"] == str(rec.born_timestamp)
        assert rec.properties["TAGS"] == "TAG1"
        assert rec.tags_code == rc.java_string_hash("TAG1") == 2567159


def test_record_length_formula(records: list[rc.RefRecord]) -> None:
    """172 = 91 + body 32 + topic 3 + properties 46 (IPv4 hosts, V1)."""
    rec = records[0]
    props_len = len(rc.encode_properties(rec.properties))
    assert props_len == 46
    assert rc.record_length(len(rec.body), len(rec.topic), props_len) == 91 + 32 + 3 + 46 == 172


def test_msg_ids(records: list[rc.RefRecord]) -> None:
    """Offset msgIds: store ip + port + physical offset, uppercase hex."""
    assert records[0].msg_id == "C0A8470100001FBB0000000000000000"
    assert records[1].msg_id == "C0A8470100001FBB00000000000000AC"
    for rec in records:
        assert rec.msg_id == f"C0A8470100001FBB{rec.physical_offset:016X}"
        assert len(rec.msg_id) == 32


def test_blank_record(segment_bytes: bytes) -> None:
    """Byte 8084 holds the blank end-of-segment record with TOTALSIZE 108; zeros after it."""
    assert rc.decode_record(segment_bytes, BLANK_POS) == (rc.KIND_BLANK, 108)
    assert BLANK_POS + 108 == SEGMENT_SIZE
    assert struct.unpack_from(">iI", segment_bytes, BLANK_POS) == (108, rc.BLANK_MAGIC)
    assert segment_bytes[BLANK_POS + 8 :] == bytes(108 - 8)


def test_decode_record_by_position(segment_bytes: bytes, records: list[rc.RefRecord]) -> None:
    """decode_record at each position gives what walk_commitlog gave."""
    for rec in records:
        kind, value = rc.decode_record(segment_bytes, rec.physical_offset)
        assert kind == rc.KIND_RECORD
        assert value == rec


def test_round_trip_bytes(segment_bytes: bytes, records: list[rc.RefRecord]) -> None:
    """Re-encoding each decoded record reproduces the fixture's bytes exactly."""
    for rec in records:
        original = segment_bytes[rec.physical_offset : rec.physical_offset + rec.total_size]
        assert rc.encode_ref_record(rec) == original
        # The explicit keyword encoder, with the CRC computed rather than copied.
        assert (
            rc.encode_record(
                topic=rec.topic,
                body=rec.body,
                queue_id=rec.queue_id,
                queue_offset=rec.queue_offset,
                physical_offset=rec.physical_offset,
                properties=rec.properties,
                flag=rec.flag,
                sys_flag=rec.sys_flag,
                born_timestamp=rec.born_timestamp,
                born_host=rec.born_host,
                store_timestamp=rec.store_timestamp,
                store_host=rec.store_host,
            )
            == original
        )
    rebuilt = b"".join(rc.encode_ref_record(r) for r in records) + rc.encode_blank(108)
    assert rebuilt == segment_bytes


def test_walk_with_explicit_segment_size() -> None:
    """Passing the segment size gives the same result as inferring it."""
    assert rc.walk_commitlog(str(COMMITLOG_DIR), SEGMENT_SIZE) == rc.walk_commitlog(str(COMMITLOG_DIR))


# --------------------------------------------------------------------------- config fixtures


def test_fastjson_consumer_offset() -> None:
    """consumerOffset.json has unquoted integer keys; queues 0..3 of TopicTest are at 250."""
    text = (CONFIG_DIR / "consumerOffset.json").read_text("utf-8")
    assert "{0:250" in text  # really the non-JSON fastjson form
    data = rc.parse_fastjson(text)
    assert isinstance(data, dict)
    table = data["offsetTable"]
    assert table["TopicTest@please_rename_unique_group_name_4"] == {
        "0": 250,
        "1": 250,
        "2": 250,
        "3": 250,
    }
    assert table["%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4"] == {"0": 0}


def test_fastjson_other_configs() -> None:
    """topics.json, subscriptionGroup.json and delayOffset.json parse too."""
    topics = rc.parse_fastjson((CONFIG_DIR / "topics.json").read_text("utf-8"))
    assert isinstance(topics, dict)
    assert topics["dataVersion"] == {"counter": 3, "timestamp": 1551626364371}
    tt = topics["topicConfigTable"]["TopicTest"]
    assert tt == {
        "order": False,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "TopicTest",
        "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    for name, cfg in topics["topicConfigTable"].items():
        assert cfg["topicName"] == name

    groups = rc.parse_fastjson((CONFIG_DIR / "subscriptionGroup.json").read_text("utf-8"))
    assert isinstance(groups, dict)
    assert groups["dataVersion"]["counter"] == 1
    g = groups["subscriptionGroupTable"]["please_rename_unique_group_name_4"]
    assert g["groupName"] == "please_rename_unique_group_name_4"
    assert g["retryMaxTimes"] == 16

    assert rc.parse_fastjson((CONFIG_DIR / "delayOffset.json").read_text("utf-8")) == {"offsetTable": {}}


def test_checkpoint_fixture_layout() -> None:
    """The 4.4 checkpoint: 4096 B, physic = logics = 1551626238066, index = 0."""
    data = (FIXTURES / "broker-4.4-store" / "checkpoint").read_bytes()
    assert len(data) == 4096
    assert struct.unpack_from(">qqq", data, 0) == (1551626238066, 1551626238066, 0)


# --------------------------------------------------------------------------- synthetic checks


def test_java_string_hash() -> None:
    """Java String.hashCode: known values, overflow and UTF-16 surrogates."""
    assert rc.java_string_hash("TAG1") == 2567159
    assert rc.java_string_hash("TagA") == 2598919
    assert rc.java_string_hash("") == 0
    assert rc.java_string_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE
    assert rc.java_string_hash("hello world") == 1794106052
    assert rc.java_string_hash("\U0001f600") == 55357 * 31 + 56832  # two UTF-16 units


def test_properties_codec() -> None:
    """name \\x01 value \\x02 repeated, order kept; Java drops empty values."""
    d = {"TAGS": "A", "KEYS": "k1 k2", "UNIQ_KEY": "ÄÖ"}
    blob = rc.encode_properties(d)
    assert blob == "TAGS\x01A\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ÄÖ\x02".encode()
    assert rc.decode_properties(blob) == d
    assert list(rc.decode_properties(blob)) == list(d)
    assert rc.decode_properties(b"") == {}
    assert rc.decode_properties(b"A\x01\x02B\x01b\x02") == {"B": "b"}
    with pytest.raises(ValueError):
        rc.encode_properties({"A": "x\x02y"})


def test_ipv6_and_v2_round_trip() -> None:
    """IPv6 hosts (+12 bytes each) and the V2 magic (2-byte topic length) decode back."""
    raw = rc.encode_record(
        topic="t" * 200,
        body=b"",
        queue_id=3,
        queue_offset=7,
        physical_offset=4096,
        properties={"TAGS": "TagA"},
        sys_flag=rc.SYSFLAG_BORN_HOST_V6 | rc.SYSFLAG_STORE_HOST_V6,
        born_host="[::1]:1234",
        store_host="[fe80::1]:10911",
        magic=rc.MAGIC_V2,
    )
    props = len(rc.encode_properties({"TAGS": "TagA"}))
    assert len(raw) == 91 + 24 + 1 + 200 + props
    kind, rec = rc.decode_record(raw)
    assert kind == rc.KIND_RECORD and isinstance(rec, rc.RefRecord)
    assert rec.magic == rc.MAGIC_V2
    assert rec.topic == "t" * 200
    assert rec.body_crc == 0 and rec.body == b""
    assert rec.born_host == "[::1]:1234"
    assert rec.store_host == "[fe80::1]:10911"
    assert len(rec.msg_id) == 56
    assert rec.msg_id == "FE800000000000000000000000000001" + "00002A9F" + "0000000000001000"
    assert rec.tags_code == 2598919
    assert rc.encode_ref_record(rec) == raw
    with pytest.raises(ValueError):  # V1 cannot hold a 200-byte topic
        rc.encode_record(topic="t" * 200, body=b"x", queue_id=0, queue_offset=0, physical_offset=0)
    with pytest.raises(ValueError):  # host family must match SYSFLAG
        rc.encode_record(
            topic="t",
            body=b"x",
            queue_id=0,
            queue_offset=0,
            physical_offset=0,
            born_host="[::1]:1",
        )


def test_malformed_records_raise() -> None:
    """Bad magic, TOTALSIZE mismatch, truncation and CRC mismatch raise ValueError."""
    good = rc.encode_record(
        topic="abc",
        body=BODY,
        queue_id=0,
        queue_offset=0,
        physical_offset=0,
        properties={"TAGS": "TAG1"},
    )
    assert rc.decode_record(good)[0] == rc.KIND_RECORD
    bad_magic = good[:4] + b"\x00\x00\x00\x01" + good[8:]
    bad_size = struct.pack(">i", len(good) - 1) + good[4:]
    bad_crc = good[:8] + struct.pack(">i", 1) + good[12:]
    for buf in (bad_magic, bad_size, bad_crc, good[:-1]):
        with pytest.raises(ValueError):
            rc.decode_record(buf)
    assert rc.decode_record(bad_crc, check_crc=False)[0] == rc.KIND_RECORD
    assert rc.decode_record(bytes(16)) == (rc.KIND_END, None)
    assert rc.decode_record(good, len(good)) == (rc.KIND_END, None)


def test_walk_multi_segment(tmp_path: Path) -> None:
    """Records continue in the next segment after a blank; zeros end the walk."""
    seg = 512
    recs: list[bytes] = []
    segments = [bytearray(), bytearray()]
    offset = 0
    for i in range(6):
        size = len(rc.encode_record(topic="T", body=b"m%d" % i, queue_id=1, queue_offset=i, physical_offset=0))
        idx = offset // seg
        left = seg - offset % seg
        if size + 8 > left:
            segments[idx] += rc.encode_blank(left)
            offset += left
            idx += 1
        raw = rc.encode_record(topic="T", body=b"m%d" % i, queue_id=1, queue_offset=i, physical_offset=offset)
        segments[idx] += raw
        recs.append(raw)
        offset += len(raw)
    assert len(segments[1]) > 0  # the test really crosses a segment
    for i, data in enumerate(segments):
        (tmp_path / f"{i * seg:020d}").write_bytes(bytes(data) + bytes(seg - len(data)))
    (tmp_path / "ignored.tmp").write_bytes(b"junk")
    walked = rc.walk_commitlog(str(tmp_path))
    assert [r.queue_offset for r in walked] == list(range(6))
    assert [rc.encode_ref_record(r) for r in walked] == recs
    assert walked[-1].physical_offset >= seg


def test_read_consume_queue(tmp_path: Path) -> None:
    """Units are read across segments and stop at the first all-zero unit."""
    unit_seg = 3 * rc.CQ_UNIT_SIZE
    units = [(i * 172, 172, 2567159) for i in range(5)]
    blob = b"".join(struct.pack(">qiq", *u) for u in units)
    blob += bytes(2 * unit_seg - len(blob))
    (tmp_path / f"{0:020d}").write_bytes(blob[:unit_seg])
    (tmp_path / f"{unit_seg:020d}").write_bytes(blob[unit_seg:])
    assert rc.read_consume_queue(str(tmp_path)) == units
    assert rc.consume_queue_start(str(tmp_path)) == 0


def test_parse_fastjson_forms() -> None:
    """Unquoted integer keys are quoted; strings that look like them are left alone."""
    assert rc.parse_fastjson('{"a":{0:1, 12 :2,\n\t-3:4}}') == {"a": {"0": 1, "12": 2, "-3": 4}}
    assert rc.parse_fastjson('{"s":"{0:1,2:3}","t":[1,2]}') == {"s": "{0:1,2:3}", "t": [1, 2]}
    assert rc.parse_fastjson('{"q\\"{0:":{5:6}}') == {'q"{0:': {"5": 6}}
    assert rc.parse_fastjson('{"0":250}') == {"0": 250}
