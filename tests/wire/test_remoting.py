"""The remoting codec (rmqnet.remoting) against frames laid out by hand from RocketMQ 4.9.8's
``RemotingCommand.encode``/``RocketMQSerializable``, and its refusals of malformed input."""

from __future__ import annotations

import json
import struct

import pytest

from rmqnet.remoting import (
    FieldError,
    FrameDecoder,
    FrameError,
    HeaderError,
    PullMessageHeader,
    RemotingCommand,
    SendMessageHeader,
    decode,
    encode_bytes,
    encode_frame,
    ext_bool,
    ext_int,
    ext_long,
)


def _java_frame(header: dict, body: bytes = b"", stype: int = 0) -> bytes:
    h = json.dumps(header).encode()
    return struct.pack(">ii", 4 + len(h) + len(body), (stype << 24) | len(h)) + h + body


def test_a_json_frame_as_java_lays_it_out_decodes() -> None:
    raw = _java_frame(
        {
            "code": 310,
            "language": "JAVA",
            "version": 435,
            "opaque": 42,
            "flag": 0,
            "extFields": {"b": "T", "e": "3"},
            "serializeTypeCurrentRPC": "JSON",
        },
        b"body",
    )
    (frame,) = FrameDecoder().feed(raw)
    cmd = decode(frame)
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.language, cmd.version) == (310, 42, 0, "JAVA", 435)
    assert cmd.ext_fields == {"b": "T", "e": "3"} and cmd.body == b"body"
    assert not cmd.is_response and not cmd.is_oneway


def test_a_binary_rocketmq_header_decodes() -> None:
    ext = b"".join(
        struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
        for k, v in [(b"topic", b"T1"), (b"queueId", b"2")]
    )
    remark = "héllo".encode()
    header = (
        struct.pack(">hbhii", 11, 1, 63, 9, 2)
        + struct.pack(">i", len(remark))
        + remark
        + struct.pack(">i", len(ext))
        + ext
    )
    (frame,) = FrameDecoder().feed(encode_frame(header, b"xy", 1))
    cmd = decode(frame)
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark) == (11, "CPP", 63, 9, 2, "héllo")
    assert cmd.ext_fields == {"topic": "T1", "queueId": "2"} and cmd.body == b"xy" and cmd.is_oneway


def test_frames_split_anywhere_come_out_whole_and_in_order() -> None:
    cmds = [RemotingCommand(34, opaque=i, ext_fields={"n": i}, body=bytes([i]) * i) for i in range(20)]
    stream = b"".join(encode_bytes(c) for c in cmds)
    dec, got = FrameDecoder(), []
    for i in range(0, len(stream), 7):
        got += dec.feed(stream[i : i + 7])
    assert [decode(f).opaque for f in got] == list(range(20))
    assert [f.body for f in got] == [bytes([i]) * i for i in range(20)] and dec.buffered == 0


def test_replies_are_json_with_string_ext_fields_and_type_byte_zero() -> None:
    req = RemotingCommand(10, opaque=5)
    raw = encode_bytes(req.reply(0, ext_fields={"queueOffset": 7, "ok": True}))
    length, word = struct.unpack_from(">ii", raw)
    assert word >> 24 == 0 and length == len(raw) - 4
    header = json.loads(raw[8 : 8 + word])
    assert header["opaque"] == 5 and header["flag"] == 1 and header["extFields"] == {"queueOffset": "7", "ok": "true"}


@pytest.mark.parametrize(
    ("prefix", "what"),
    [
        (struct.pack(">i", 3), "frame length 3"),
        (struct.pack(">i", 16 * 1024 * 1024 + 1), "frame length"),
        (struct.pack(">i", -1), "frame length -1"),
        (struct.pack(">ii", 10, (2 << 24) | 2), "serialize type 2"),
        (struct.pack(">ii", 10, 7), "header length 7"),
    ],
)
def test_an_impossible_frame_is_refused_before_it_is_buffered(prefix: bytes, what: str) -> None:
    with pytest.raises(FrameError, match=what):
        FrameDecoder().feed(prefix)


@pytest.mark.parametrize(
    "header", [b"{not json", b"[1,2]", b'{"code":"x"}', b'{"code":1,"extFields":[1]}', b"\xff\xfe"]
)
def test_an_unreadable_json_header_is_a_header_error(header: bytes) -> None:
    (frame,) = FrameDecoder().feed(encode_frame(header))
    with pytest.raises(HeaderError):
        decode(frame)


@pytest.mark.parametrize("cut", [0, 5, 12, 16, 20])
def test_a_truncated_binary_header_is_a_header_error(cut: int) -> None:
    ext = struct.pack(">h", 1) + b"k" + struct.pack(">i", 1) + b"v"
    header = struct.pack(">hbhii", 11, 1, 63, 9, 0) + struct.pack(">i", 0) + struct.pack(">i", len(ext)) + ext
    (frame,) = FrameDecoder().feed(encode_frame(header[:cut] + (b"" if cut else b""), b"", 1))
    with pytest.raises(HeaderError):
        decode(frame)


def test_ext_fields_are_read_leniently_as_the_clients_send_them() -> None:
    ext = {"a": "12", "b": 12, "c": "1", "d": 0, "e": True, "f": "TRUE", "g": "9223372036854775807"}
    assert ext_int(ext, "a") == ext_int(ext, "b") == 12
    assert (
        ext_bool(ext, "c") is True
        and ext_bool(ext, "d") is False
        and ext_bool(ext, "e") is True
        and ext_bool(ext, "f") is True
    )
    assert ext_long(ext, "g") == 2**63 - 1 and ext_int(ext, "missing", None) is None


@pytest.mark.parametrize(
    ("ext", "name", "read"),
    [
        ({}, "queueId", ext_int),
        ({"queueId": "x"}, "queueId", ext_int),
        ({"queueId": 2**31}, "queueId", ext_int),
        ({"queueId": True}, "queueId", ext_int),
        ({"queueOffset": "2e3"}, "queueOffset", ext_long),
        ({"batch": "yes"}, "batch", ext_bool),
        ({"batch": [1]}, "batch", ext_bool),
    ],
)
def test_a_missing_or_mistyped_field_names_itself(ext: dict, name: str, read) -> None:
    with pytest.raises(FieldError, match=name):
        read(ext, name)


def test_send_headers_in_both_spellings_read_the_same() -> None:
    v1 = {
        "producerGroup": "PG",
        "topic": "T",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "1",
        "sysFlag": "0",
        "bornTimestamp": "1700000000000",
        "flag": "0",
        "properties": "KEYS\x01k\x02",
        "batch": "1",
        "AccessKey": "",
        "Signature": "x",
        "OnsChannel": "ALIYUN",
    }
    h1 = SendMessageHeader.read(v1, v2=False)
    h2 = SendMessageHeader.read(h1.to_ext(v2=True), v2=True)
    assert h1 == h2 and h1.batch and h1.queue_id == 1 and h1.born_timestamp == 1700000000000
    with pytest.raises(FieldError, match="'b'"):
        SendMessageHeader.read({k: v for k, v in h1.to_ext(v2=True).items() if k != "b"}, v2=True)


def test_a_pull_header_round_trips_and_requires_its_fields() -> None:
    ext = {
        "consumerGroup": "CG",
        "topic": "T",
        "queueId": 0,
        "queueOffset": "5",
        "maxMsgNums": 32,
        "sysFlag": 6,
        "commitOffset": "0",
        "suspendTimeoutMillis": 15000,
        "subscription": "*",
        "subVersion": 1,
    }
    h = PullMessageHeader.read(ext)
    assert PullMessageHeader.read(h.to_ext()) == h and h.queue_offset == 5 and h.expression_type is None
    with pytest.raises(FieldError, match="subVersion"):
        PullMessageHeader.read({k: v for k, v in ext.items() if k != "subVersion"})


@pytest.mark.parametrize("body", [b"", b"{", b"[1]", b'{"queueDatas":[{"brokerName":"b"}]}', b"[" * 100_000, b"\xff"])
def test_a_body_that_is_no_route_is_a_field_error(body: bytes) -> None:
    from rmqnet.remoting.route import TopicRouteData

    with pytest.raises(FieldError, match="body"):
        TopicRouteData.decode(body)
