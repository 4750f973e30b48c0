"""The remoting codec's per-request fast paths, pinned to the
general paths they stand in for: JSON headers read by orjson where it reads what ``json``
reads (else ``json`` itself), reply headers written by orjson byte for byte as ``json.dumps``
writes them, and extFields readers that take the common case in one step. Every case below
compares outcomes: the same object or bytes, or the same typed error with the same text."""

from __future__ import annotations

import enum
import json
import struct
from typing import Any

import numpy as np
import pytest

from rmqnet.remoting import FieldError, HeaderError, RemotingCommand, SendMessageHeader, fields
from rmqnet.remoting import command as cmdmod
from rmqnet.remoting.codes import RequestCode, ResponseCode
from rmqnet.remoting.frame import Frame, FrameDecoder, FrameError, encode_frame


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(*args))
    except (HeaderError, FieldError, UnicodeError) as exc:
        return (type(exc).__name__, str(exc))


# ------------------------------------------------------------- JSON headers in
SEND = (
    b'{"code":310,"flag":0,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":435,'
    b'"extFields":{"a":"PG","b":"T","c":"TBW102","d":"4","e":"1","f":"0","g":"1700000000000","h":"0",'
    b'"i":"WAIT\\u0001true\\u0002","j":"0","k":"false","m":"false"}}'
)

TRICKY = [
    SEND,
    b'{"code":10,"extFields":{"queueId":0,"k":false,"maxMsgNums":32,"queueOffset":"0"}}',  # ali-ons / C++ mixes
    b'{"code":1,"a":1,"a":2,"extFields":{"x":"1","x":null}}',  # duplicate names: the last wins
    b'{"code":1,"opaque":123456789012345678901234567890}',  # past 64 bits: orjson would give a float
    b'{"code":1,"extFields":{"queueOffset":-9223372036854775809}}',
    b'{"code":1,"extFields":{"queueOffset":18446744073709551615}}',
    b'{"code":1,"extFields":{"n":1e400,"m":1.5}}',
    b'{"code":1,"extFields":{"n":NaN}}',
    b'{"code":Infinity}',
    b'{"code":1,"remark":"\\ud800"}',  # a lone surrogate: json reads it, orjson refuses
    b'\xef\xbb\xbf{"code":1}',  # a byte order mark
    '{"code":1,"remark":"é"}'.encode("utf-16"),
    '{"code":1}'.encode("utf-16-le"),
    b'{"code":1,"remark":"\xed\xa0\x80"}',  # an encoded surrogate (json decodes with surrogatepass)
    b'{"code":1,"extFields":{"a":[1,{"b":2}],"c":{"d":null}}}',
    b'{"code":1,"other":{"x":[]}}',
    b'{"code":1,"extFields":[]}',
    b'{"code":1,"extFields":"x"}',
    b' \t\r\n{"code" : 1 , "extFields" : { "a" : "b" } } \n',
    b'{"code":1}\x00',
    b'{"code":1,}',
    b"[1,2]",
    b'"x"',
    b"null",
    b"1",
    b"",
    b"{",
    b'{"code":"5","opaque":"x"}',
    b'{"code":true}',
    b'{"code":1,"remark":"a\x01b"}',
    b'{"code":1,"remark":"x\x7f\xc3\xa9\xf0\x9f\x98\x80"}',
    b'{"code":-0,"flag":1.0}',
    b'{"code":1,"extFields":' + b"[" * 1010 + b"]" * 1010 + b"}",  # deeper than json's stack, within orjson's
    b'{"code":1,"extFields":' + b"[" * 1030 + b"]" * 1030 + b"}",
    b'{"code":1,"x":' + b'{"y":' * 900 + b"1" + b"}" * 900 + b"}",
]


@pytest.mark.parametrize("header", TRICKY)
def test_json_headers_read_as_json_reads_them(header: bytes) -> None:
    got, want = outcome(cmdmod.decode_json_header, header), outcome(cmdmod._json_header, header)
    assert got == want
    if got[0] == "ok":  # the same values of the same types, in the same order
        assert list(got[1].items()) == list(want[1].items())
        assert [type(v) for v in got[1].values()] == [type(v) for v in want[1].values()]


@pytest.mark.parametrize("seed", range(4))
def test_damaged_headers_read_as_json_reads_them(seed: int) -> None:
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b'{}[]":,0123456789-+.eE \\utrfalsn\x00\xff\xc3', np.uint8)
    for _ in range(500):
        h = bytearray(TRICKY[int(rng.integers(0, 3))])
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(h)))
            op = int(rng.integers(0, 3))
            if op == 0:
                h[at] = int(rng.choice(alphabet))
            elif op == 1:
                del h[at]
            else:
                h.insert(at, int(rng.choice(alphabet)))
        got, want = outcome(cmdmod.decode_json_header, bytes(h)), outcome(cmdmod._json_header, bytes(h))
        assert got == want, bytes(h)


def test_a_decoded_command_is_the_same_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    for header in TRICKY:
        frame = Frame(0, header, b"body")
        fast = outcome(cmdmod.decode, frame)
        with monkeypatch.context() as m:
            m.setattr(cmdmod, "decode_json_header", cmdmod._json_header)
            general = outcome(cmdmod.decode, frame)
        assert fast == general, header


# ---------------------------------------------------------- JSON headers out
class Code(enum.IntEnum):
    X = 5


def every_code_point(step: int = 0x800) -> list[str]:
    """All of Unicode but the surrogates, in strings of ``step`` code points."""
    out = []
    for start in range(0, 0x110000, step):
        out.append("".join(chr(c) for c in range(start, min(start + step, 0x110000)) if not 0xD800 <= c <= 0xDFFF))
    return [s for s in out if s]


def commands() -> list[RemotingCommand]:
    base = [
        RemotingCommand(
            ResponseCode.SUCCESS,
            7,
            1,
            None,
            {
                "msgId": "7F00000100002A9F0000000000001234",
                "queueId": "1",
                "queueOffset": 17,
                "TRACE_ON": True,
                "gone": None,
            },
            b"",
            "JAVA",
        ),
        RemotingCommand(RequestCode.SEND_MESSAGE_V2, -1, 0, "", {}),
        RemotingCommand(0, 0, 0, None, {"only": None}),  # extFields that are all null: written empty
        RemotingCommand(Code.X, True, False, 'r"e\\m\na\tr\x00k\x1f\x7f', {"k\x01": "v\x02", "ü": "é😀"}, b"", "CPP"),
        RemotingCommand(1, 2**64, 0, None, {}),  # past 64 bits: orjson refuses, json writes it
        RemotingCommand(1, 0, 0, None, {5: "int key", True: "bool key", None: "none key"}),  # type: ignore[dict-item]
        RemotingCommand(1, 0, 0, None, {"f": 1.5, "big": 10**30, "neg": -0.0, "l": [1, "a"]}),
        RemotingCommand(1.0, 0, 0, None, {}),  # type: ignore[arg-type]
        RemotingCommand(1, 0, 0, 5, {}),  # type: ignore[arg-type]
    ]
    return base


@pytest.mark.parametrize("cmd", commands(), ids=lambda c: repr(c.remark)[:20])
def test_reply_headers_are_the_bytes_json_dumps_writes(cmd: RemotingCommand) -> None:
    assert outcome(cmdmod.encode_header, cmd) == outcome(cmdmod.encode_header_json, cmd)


def test_every_code_point_is_written_as_json_dumps_writes_it() -> None:
    for s in every_code_point():  # in the remark, the language, names and values
        cmd = RemotingCommand(0, 1, 1, s, {s[:40]: s, "k": s[-40:]}, b"", s[:8])
        assert cmdmod.encode_header(cmd) == cmdmod.encode_header_json(cmd), repr(s[:3])


@pytest.mark.parametrize("bad", ["\ud800", "a\udfffb"])
def test_a_lone_surrogate_fails_in_a_request_and_is_escaped_in_a_response(bad: str) -> None:
    # a request of ours: the caller's value, UnicodeEncodeError by both paths; an answer: written
    # with the surrogate escaped (six characters), the same bytes by both paths (a lone surrogate once raised)
    escaped = bad.encode("utf-8", "backslashreplace").decode()
    for flag in (0, 1):
        for cmd in (
            RemotingCommand(0, 1, flag, bad, {}),
            RemotingCommand(0, 1, flag, None, {"k": bad}),
            RemotingCommand(0, 1, flag, None, {bad: "v"}),
        ):
            got = outcome(cmdmod.encode_header, cmd)
            assert got == outcome(cmdmod.encode_header_json, cmd)
            if flag == 0:
                assert got[0] == "UnicodeEncodeError"
            else:
                obj = json.loads(cmdmod.encode_header(cmd))
                ext = obj.get("extFields", {})
                assert escaped in (obj.get("remark"), *ext, *ext.values())


def test_a_reply_round_trips_through_both_readers() -> None:
    req = cmdmod.decode(Frame(0, SEND, b""))
    rep = req.reply(ResponseCode.SUCCESS, "fine ü", {"msgId": "X", "queueOffset": 3})
    header = cmdmod.encode_header(rep)
    assert json.loads(header) == {
        "code": 0,
        "flag": 1,
        "language": "JAVA",
        "opaque": 7,
        "serializeTypeCurrentRPC": "JSON",
        "version": 435,
        "extFields": {"msgId": "X", "queueOffset": "3"},
        "remark": "fine ü",
    }
    assert cmdmod.decode_json_header(header) == json.loads(header)


# ------------------------------------------------------------- extFields readers
# main's readers before the fast paths, verbatim: the reference for every outcome
_MISSING = fields._MISSING


def _raw(ext: dict[str, Any], name: str, default: Any) -> Any:
    v = ext.get(name, _MISSING)
    if v is _MISSING or v is None:
        if default is _MISSING:
            raise FieldError(name, "is missing")
        return default
    return v


def ref_str(ext: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
    v = _raw(ext, name, default)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        raise FieldError(name, f"is a JSON {type(v).__name__}, not a string")
    return v if isinstance(v, str) or v is default else str(v)


def _number(name: str, v: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(v, bool):
        raise FieldError(name, f"is {v!r}, not {what}")
    if isinstance(v, int):
        n = v
    elif isinstance(v, str):
        try:
            n = int(v.strip())
        except ValueError:
            raise FieldError(name, f"is {v[:40]!r}, not {what}") from None
    else:
        raise FieldError(name, f"is {v!r}, not {what}")
    if not lo <= n <= hi:
        raise FieldError(name, f"is {n}, outside the range of {what}")
    return n


def ref_int(ext: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
    v = _raw(ext, name, default)
    return v if v is default else _number(name, v, -(1 << 31), (1 << 31) - 1, "a Java int")


def ref_long(ext: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
    v = _raw(ext, name, default)
    return v if v is default else _number(name, v, -(1 << 63), (1 << 63) - 1, "a Java long")


def ref_bool(ext: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
    v = _raw(ext, name, default)
    if v is default or isinstance(v, bool):
        return v
    if isinstance(v, int):
        if v in (0, 1):
            return bool(v)
    elif isinstance(v, str):
        t = v.strip().lower()
        if t in ("true", "1"):
            return True
        if t in ("false", "0", ""):
            return False
    raise FieldError(name, f"is {v!r}, not a boolean")


class Text(str):
    pass


VALUES: list[Any] = [
    "0",
    "1",
    "-1",
    "17",
    " 5 ",
    "\t42\n",
    "+5",
    "1_000",
    "\u0663",
    "\u20035\u2003",
    "\u00a07",
    "0x10",
    "1.0",
    "1e3",
    "",
    " ",
    "abc",
    "true",
    "TRUE",
    " true ",
    "False",
    "0 ",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "9" * 50,
    Text("12"),
    Text("x"),
    0,
    1,
    2,
    -1,
    2**31 - 1,
    2**31,
    -(2**31) - 1,
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    True,
    False,
    None,
    1.0,
    1.5,
    float("nan"),
    [],
    [1],
    {},
    {"a": 1},
    Code.X,
]
READERS = [
    (fields.ext_str, ref_str),
    (fields.ext_int, ref_int),
    (fields.ext_long, ref_long),
    (fields.ext_bool, ref_bool),
]


@pytest.mark.parametrize(("fast", "ref"), READERS, ids=lambda f: getattr(f, "__name__", ""))
def test_ext_field_readers_answer_as_the_general_readers(fast: Any, ref: Any) -> None:
    for v in VALUES:
        for default in ((), (None,), (7,), ("d",)):
            got, want = outcome(fast, {"f": v}, "f", *default), outcome(ref, {"f": v}, "f", *default)
            assert got == want and type(got[1]) is type(want[1]), (v, default)
        assert outcome(fast, {}, "f") == outcome(ref, {}, "f")


def test_a_send_header_reads_the_same_in_every_spelling_clients_use() -> None:
    java = {
        "producerGroup": "PG",
        "topic": "T",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "1",
        "sysFlag": "0",
        "bornTimestamp": "1700000000000",
        "flag": "0",
        "properties": "a\x01b\x02",
        "reconsumeTimes": "0",
        "unitMode": "false",
        "batch": "1",
        "maxReconsumeTimes": "16",
    }
    alions = {
        **java,
        "defaultTopicQueueNums": 4,
        "queueId": 1,
        "sysFlag": 0,
        "bornTimestamp": 1700000000000,
        "flag": 0,
        "reconsumeTimes": 0,
        "unitMode": False,
        "batch": True,
        "maxReconsumeTimes": 16,
    }
    a, b = SendMessageHeader.read(java, v2=False), SendMessageHeader.read(alions, v2=False)
    assert a == b and a.batch is True and a.queue_id == 1 and a.max_reconsume_times == 16
    with pytest.raises(FieldError, match="queueId"):
        SendMessageHeader.read({**java, "queueId": "2147483648"}, v2=False)


# ------------------------------------------------------------------ frames in
@pytest.mark.parametrize("seed", range(5))
def test_frames_come_out_whole_whatever_the_reads(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sent = [
        (int(rng.integers(0, 2)), rng.bytes(int(rng.integers(0, 300))), rng.bytes(int(rng.choice([0, 5, 70_000]))))
        for _ in range(40)
    ]
    stream = b"".join(encode_frame(h, b, t) for t, h, b in sent)
    cuts = np.sort(rng.choice(np.arange(1, len(stream)), size=int(rng.integers(1, 120)), replace=False))
    dec, got = FrameDecoder(), []
    for i, (a, b) in enumerate(zip([0, *cuts.tolist()], [*cuts.tolist(), len(stream)], strict=True)):
        wrap = (bytes, bytearray, memoryview)[i % 3]  # a read is bytes; other buffers work alike
        got += dec.feed(wrap(stream[a:b]))  # type: ignore[arg-type]
    assert [(f.serialize_type, f.header, f.body) for f in got] == sent
    assert all(type(f.header) is bytes and type(f.body) is bytes for f in got)
    assert dec.buffered == 0


@pytest.mark.parametrize(
    "bad",
    [struct.pack(">i", 3), struct.pack(">ii", 20, 2 << 24 | 4), struct.pack(">ii", 20, 40), struct.pack(">i", 1 << 30)],
)
def test_a_bad_frame_after_good_ones_is_refused_in_any_read(bad: bytes) -> None:
    good = encode_frame(b'{"code":1}', b"body")
    stream = good * 3 + bad + b"\x00" * 24
    for cut in range(1, len(stream)):
        dec = FrameDecoder()
        with pytest.raises(FrameError) as info:
            dec.feed(stream[:cut])
            dec.feed(stream[cut:])
        whole = FrameDecoder()
        with pytest.raises(FrameError) as once:
            whole.feed(stream)
        assert str(info.value) == str(once.value)
