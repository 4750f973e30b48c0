"""Protocol fuzz of a running broker: malformed frames on many connections, a healthy client beside them.

    python jobs/fuzz_broker.py [--cases 10000] [--seed 1] [--concurrency 8] [--baseline-s 3] [--root DIR]
                               [--no-throughput-check]

A name server and a broker process (``python -m rmqnet broker``, topic ``FUZZ`` with 4 queues) on
127.0.0.1. A *healthy client* process (our :class:`rmqnet.client.Producer` and
:class:`~rmqnet.client.PullConsumer`) sends a 100-byte message and pulls it back, one round trip
after the other, checking the body; its rate is measured alone for ``--baseline-s`` seconds
before and after the fuzz (the mean is the "without" figure) and during the fuzz.

The fuzz (seeded by ``--seed``; ``--cases`` cases, ``--concurrency`` at a time) sends, per case,
one of these kinds, on a connection of its own, or several of them on one connection (``multi``):

- ``length``: a frame length below 4, negative, or above the 16 MiB cap (``oversize``);
- ``header_length``: a header length past the frame, or above the 1 MiB header cap;
- ``serialize_type``: a type byte other than 0 (JSON) and 1 (ROCKETMQ);
- ``json``: a header that is not JSON (random bytes, truncated JSON, deep nesting, not UTF-8),
  or JSON that is not an object;
- ``field_types``: a JSON object whose ``code``/``opaque``/``flag``/``extFields`` have the wrong
  types or absurd values;
- ``unknown_code``: a well-formed request with a code the broker does not serve: it must be
  answered REQUEST_CODE_NOT_SUPPORTED (3);
- ``unknown_oneway``: the same as a oneway request: it must not be answered, nor its connection closed;
- ``bad_fields``: a served code (send, send back, pull, offsets, queries, admin) with fields missing,
  mistyped, out of range, or names such as ``../x`` (never trusted as paths);
- ``truncated``: a frame cut short, then the connection closed;
- ``stall``: a frame cut short, the connection left open (up to 2 s) while other cases run;
- ``binary``: a ROCKETMQ binary header with remark, extFields, key or value lengths past its end;
- ``garbage``: random bytes;
- ``nested_body``: a heartbeat (34) or lock (41, 42) body nested deeper than RocketMQ's bodies
  go (65 to 200,000 levels, balanced or not, arrays or objects, alone or inside a valid body): it
  must be answered SYSTEM_ERROR (1) with a typed remark;
- ``lone_surrogate``: a served code whose header holds a string that is not Unicode text (a lone
  surrogate as the JSON escape ``\\ud800``, in a field it reads, an unknown field, a key, the
  remark or the language), or a heartbeat or lock body holding one: answered SYSTEM_ERROR (1);
- ``ns_values``: the same two against the name server (a RegisterBrokerBody nested deep or with a
  lone surrogate in a topic, a route query (105) or a KV read (101) with one): answered 1.

Each case waits for an answer or the broker closing the connection (at most 2 s), and is tallied
by what happened (``answered <code>``, ``closed``, ``no answer``). Every 500 cases the broker must
be alive and answer a GET_BROKER_RUNTIME_INFO (28). Reported: crashes (the broker process gone or
not answering: must be 0), the broker's RSS before and after (bounded: at most 64 MiB of growth),
the healthy client's rate with and without the fuzz (>= 0.8x) and its errors (must be 0), and the
cases whose outcome is not the one their kind must have (``EXPECTED``; must be 0), the untyped
answers of any kind (a remark that is an exception's text, ``RecursionError: ...``, or "the answer
does not encode": must be 0; tallied ``answered 1 untyped``) and the tracebacks in the broker's
and the name server's logs (must be 0). Exit 1 if any check fails (the throughput one unless
``--no-throughput-check``).
"""

from __future__ import annotations

import argparse
import asyncio
import builtins
import contextlib
import json
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from torture_common import GUARD_S, start_process  # noqa: E402

TOPIC = "FUZZ"
QUEUES = 4
MAX_FRAME = 16 * 1024 * 1024
MAX_HEADER = 1024 * 1024
CASE_WAIT_S = 2.0
RSS_GROWTH_MAX = 64 * 1024 * 1024
_II = struct.Struct(">iI")
#: codes the broker serves, with the fields each reads (their values get fuzzed)
SERVED: dict[int, tuple[str, ...]] = {
    10: (
        "producerGroup",
        "topic",
        "defaultTopic",
        "defaultTopicQueueNums",
        "queueId",
        "sysFlag",
        "bornTimestamp",
        "flag",
        "properties",
        "reconsumeTimes",
        "unitMode",
        "batch",
    ),
    310: tuple("abcdefghijklmn"),
    320: tuple("abcdefghijklmn"),
    11: (
        "consumerGroup",
        "topic",
        "queueId",
        "queueOffset",
        "maxMsgNums",
        "sysFlag",
        "commitOffset",
        "suspendTimeoutMillis",
        "subscription",
        "subVersion",
        "expressionType",
    ),
    12: ("topic", "key", "maxNum", "beginTimestamp", "endTimestamp", "_UNIQUE_KEY_QUERY"),
    33: ("offset",),
    36: ("offset", "group", "delayLevel", "originMsgId", "originTopic", "unitMode", "maxReconsumeTimes"),
    14: ("consumerGroup", "topic", "queueId"),
    15: ("consumerGroup", "topic", "queueId", "commitOffset"),
    29: ("topic", "queueId", "timestamp"),
    30: ("topic", "queueId"),
    31: ("topic", "queueId"),
    32: ("topic", "queueId"),
    17: (
        "topic",
        "defaultTopic",
        "readQueueNums",
        "writeQueueNums",
        "perm",
        "topicFilterType",
        "topicSysFlag",
        "order",
    ),
    34: (),
    35: ("clientID", "producerGroup", "consumerGroup"),
    38: ("consumerGroup",),
    21: (),
    28: (),
    37: (
        "producerGroup",
        "tranStateTableOffset",
        "commitLogOffset",
        "commitOrRollback",
        "fromTransactionCheck",
        "msgId",
        "transactionId",
    ),
    41: (),
    42: (),  # (their request is the body: fuzzed as the others' bodies are)
    43: (),
    45: (),
    26: (),
    202: ("topic",),
    203: ("consumerGroup",),
    208: ("consumerGroup", "topic"),
    201: (),
    200050: (
        "consumerGroup",
        "topic",
        "queueId",
        "maxMsgNums",
        "invisibleTime",
        "pollTime",
        "bornTime",
        "initMode",
        "expType",
        "exp",
        "order",
        "attemptId",
    ),
    200051: ("consumerGroup", "topic", "queueId", "extraInfo", "offset"),
    200053: ("consumerGroup", "topic", "queueId", "extraInfo", "offset", "invisibleTime"),
    200950: ("consumerGroup", "topic", "maxNum"),  # GET_POP_INFLIGHT (ours): a read
}
#: codes the broker serves whose fields are not fuzzed: they change the broker's configuration
#: or delete topics or subscription groups, which would make the healthy client's errors the fuzz's doing
SERVED_UNFUZZED = frozenset((25, 215, 200, 207))


# ---- the cases ---------------------------------------------------------------------------------


def frame(header: bytes, body: bytes = b"", stype: int = 0) -> bytes:
    return _II.pack(4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


def jheader(code: Any, ext: Any = None, opaque: Any = 1, flag: Any = 0, **more: Any) -> bytes:
    obj: dict[str, Any] = {"code": code, "language": "JAVA", "version": 401, "opaque": opaque, "flag": flag}
    if ext is not None:
        obj["extFields"] = ext
    obj.update(more)
    return json.dumps(obj).encode()


def _bad_value(rng: random.Random) -> Any:
    return rng.choice(
        [
            None,
            "",
            "x" * rng.randint(1, 300),
            -1,
            -(2**31),
            2**31,
            2**63,
            -(2**63) - 1,
            10**30,
            1.5,
            float("nan"),
            True,
            [],
            {},
            {"a": [1, 2]},
            "../../etc/passwd",
            "..",
            "/abs/path",
            "a/b",
            "%RETRY%",
            "SCHEDULE_TOPIC_XXXX",
            "TBW102",
            TOPIC,
            "\x00\x01\x02",
            "é" * 50,
            "9" * 40,
            "0",
            "1",
            "true",
        ]
    )


def case_length(rng: random.Random) -> bytes:
    n = rng.choice([0, 1, 3, -1, -(2**31), MAX_FRAME + 1, 2**31 - 1, rng.randint(MAX_FRAME + 1, 2**31 - 1)])
    return struct.pack(">i", n) + rng.randbytes(rng.randint(0, 64))


def case_header_length(rng: random.Random) -> bytes:
    length = rng.randint(4, 200)
    hlen = rng.choice([length - 3, length + 100, MAX_HEADER + 1, 0xFFFFFF, rng.randint(length - 3, 0xFFFFFF)])
    return _II.pack(length, hlen & 0xFFFFFF) + rng.randbytes(length - 4)


def case_serialize_type(rng: random.Random) -> bytes:
    h = jheader(28)
    return _II.pack(4 + len(h), (rng.randint(2, 255) << 24) | len(h)) + h


def case_json(rng: random.Random) -> bytes:
    good = jheader(28)
    h = rng.choice(
        [
            rng.randbytes(rng.randint(1, 200)),
            good[: rng.randint(1, len(good) - 1)],
            b"[" * rng.randint(1000, 200_000),
            b'{"a":' * rng.randint(1000, 100_000),
            b"\xff\xfe" + good,
            b"[1,2,3]",
            b'"code"',
            b"null",
            b"42",
            b"true",
            b"{}",
            b"",
            good.replace(b"{", b"{" + b'"x":"\\ud800",', 1),
            good + b"trailing",
        ]
    )
    return frame(h, rng.randbytes(rng.randint(0, 32)))


def case_field_types(rng: random.Random) -> bytes:
    code = rng.choice([_bad_value(rng), rng.choice(list(SERVED))])
    ext = rng.choice([_bad_value(rng), {"topic": _bad_value(rng)}, {str(i): _bad_value(rng) for i in range(5)}])
    h = jheader(
        code,
        ext,
        opaque=_bad_value(rng) if rng.random() < 0.5 else 7,
        flag=rng.choice([0, 2, 1, -1, 2**40, "1", None, 1.0]),
        language=_bad_value(rng),
        version=_bad_value(rng),
        remark=_bad_value(rng),
    )
    return frame(h.replace(b"NaN", b"NaN"), rng.randbytes(rng.randint(0, 16)))


def _unknown_code(rng: random.Random) -> int:
    code = rng.choice([rng.randint(-(2**31), 2**31 - 1), rng.randint(0, 400), 99999, -1, 2**40])
    while code in SERVED or code in SERVED_UNFUZZED:
        code += 1000
    return code


def case_unknown_code(rng: random.Random) -> bytes:
    return frame(jheader(_unknown_code(rng), {"topic": TOPIC}, opaque=rng.randint(0, 2**31 - 1), flag=0))


def case_unknown_oneway(rng: random.Random) -> bytes:
    return frame(jheader(_unknown_code(rng), {"topic": TOPIC}, opaque=rng.randint(0, 2**31 - 1), flag=2))


def case_bad_fields(rng: random.Random) -> bytes:
    code = rng.choice(list(SERVED))
    names = SERVED[code]
    ext: dict[str, Any] = {}
    for name in names:
        r = rng.random()
        if r < 0.2:
            continue  # missing
        ext[name] = _bad_value(rng) if r < 0.7 else rng.choice(["0", "1", "4", TOPIC, "G", "-1"])
    if code == 17 and isinstance(ext.get("topic"), str) and rng.random() < 0.9:
        ext["topic"] = rng.choice(["../x", "a/b", "", "x" * 300, "..", "%RETRY%G", "SCHEDULE_TOPIC_XXXX"])
    body = rng.choice(
        [
            b"",
            rng.randbytes(rng.randint(1, 600)),
            b"{}",
            b'{"clientID": 5}',
            b"[",
            b"\x00" * 40,
            struct.pack(">iiiii", rng.randint(-5, 100), 0, 0, 0, rng.randint(-5, 2**31 - 1)),
        ]
    )
    return frame(jheader(code, ext, opaque=rng.randint(0, 2**31 - 1), flag=rng.choice([0, 0, 0, 2])), body)


def case_truncated(rng: random.Random) -> bytes:
    whole = case_bad_fields(rng) if rng.random() < 0.5 else frame(jheader(28), rng.randbytes(rng.randint(1, 1000)))
    return whole[: rng.randint(1, len(whole) - 1)]


def case_binary(rng: random.Random) -> bytes:
    fixed = struct.pack(">hbhii", rng.choice([28, 10, 11, 999]), 0, 401, rng.randint(0, 2**31 - 1), 0)
    rlen = rng.choice([-1, 5, 1000, 2**31 - 1])
    remark = rng.randbytes(rng.randint(0, 8))
    elen = rng.choice([-5, 3, 10, 10_000, 2**31 - 1])
    ext = struct.pack(">h", rng.choice([-1, 3, 30000])) + b"key" + struct.pack(">i", rng.choice([-1, 2, 99999])) + b"vv"
    if rng.random() < 0.3:
        ext = struct.pack(">h", 3) + b"\xff\xfe\xfd" + struct.pack(">i", 1) + b"v"  # not UTF-8
        elen = len(ext)
        rlen = len(remark)
    h = (fixed + struct.pack(">i", rlen) + remark + struct.pack(">i", elen) + ext)[: rng.randint(1, 200)]
    return frame(h, b"", stype=1)


def case_garbage(rng: random.Random) -> bytes:
    return rng.randbytes(rng.randint(1, 4096))


#: the deepest a peer's JSON body may nest (rmqnet.remoting.json_values.MAX_BODY_DEPTH)
MAX_BODY_DEPTH = 64


def _deep(rng: random.Random) -> bytes:
    """A JSON value nested deeper than a body may be: balanced or left open."""
    n = rng.choice([MAX_BODY_DEPTH + 1, 100, 1000, 100_000, rng.randint(MAX_BODY_DEPTH + 1, 200_000)])
    opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}"), (b'[{"k":', b"}]"), (b'{"s":"[[[",' + b'"a":', b"}")])
    value = rng.choice([b"1", b'"x"', b"[]", b"{}"])
    return opener * n + value + (closer * n if rng.random() < 0.7 else b"")


def _body_around(rng: random.Random, code: int, inner: bytes) -> bytes:
    """``inner`` where a heartbeat's or lock body's list goes, or alone."""
    if rng.random() < 0.3:
        return inner
    if code == 34:
        return (
            b'{"clientID":"fuzz","producerDataSet":[],"consumerDataSet":[{"groupName":"G",'
            b'"subscriptionDataSet":' + inner + b"}]}"
        )
    return b'{"consumerGroup":"G","clientId":"fuzz","mqSet":' + inner + b"}"


def case_nested_body(rng: random.Random) -> bytes:
    code = rng.choice([34, 41, 42])
    return frame(jheader(code, {}, opaque=rng.randint(0, 2**31 - 1)), _body_around(rng, code, _deep(rng)))


def _lone(rng: random.Random) -> str:
    """Text holding a lone surrogate (json.dumps writes it as its escape)."""
    s = rng.choice([chr(rng.randint(0xD800, 0xDBFF)), chr(rng.randint(0xDC00, 0xDFFF)), "\udc00\ud800"])
    return rng.choice(["", "T", "x" * rng.randint(1, 50)]) + s + rng.choice(["", "x", "é"])


def case_lone_surrogate(rng: random.Random) -> bytes:
    code = rng.choice(list(SERVED))
    ext: dict[str, Any] = {name: rng.choice(["0", "1", TOPIC, "G"]) for name in SERVED[code]}
    where = rng.random()
    body = b""
    more: dict[str, Any] = {}
    if code in (34, 41, 42) and where < 0.3:
        inner = json.dumps(
            [
                {
                    "groupName": _lone(rng),
                    "topic": _lone(rng),
                    "subString": f"a = '{_lone(rng)}'",
                    "brokerName": "b",
                    "queueId": 0,
                }
            ]
        )
        body = _body_around(rng, code, inner.encode())
    elif where < 0.6 and ext:
        ext[rng.choice(list(ext))] = _lone(rng)
    elif where < 0.75:
        ext[_lone(rng)] = "v"
    elif where < 0.9:
        more["remark"] = _lone(rng)
    else:
        more["language"] = _lone(rng)
    if not body and code in (34, 41, 42):  # (a body its header never reaches: refused first)
        body = b'{"clientID":"fuzz"}'
    return frame(jheader(code, ext, opaque=rng.randint(0, 2**31 - 1), **more), body)


def case_ns_values(rng: random.Random) -> bytes:
    r = rng.random()
    opaque = rng.randint(0, 2**31 - 1)
    if r < 0.5:
        ext = {
            "brokerName": "fuzz-broker",
            "brokerAddr": "127.0.0.1:1",
            "clusterName": "FuzzCluster",
            "haServerAddr": "",
            "brokerId": "0",
            "compressed": "false",
            "bodyCrc32": "0",
        }
        if rng.random() < 0.5:
            body = b'{"topicConfigSerializeWrapper":{"topicConfigTable":' + _deep(rng) + b"}}"
        else:
            name = _lone(rng)
            body = json.dumps(
                {
                    "topicConfigSerializeWrapper": {
                        "topicConfigTable": {
                            name: {"topicName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}
                        },
                        "dataVersion": {"timestamp": 1, "counter": 1},
                    },
                    "filterServerList": [],
                }
            ).encode()
        return frame(jheader(103, ext, opaque=opaque), body)
    if r < 0.8:
        return frame(jheader(105, {"topic": _lone(rng)}, opaque=opaque))
    return frame(jheader(101, {"namespace": _lone(rng), "key": "k"}, opaque=opaque))


KINDS: dict[str, Callable[[random.Random], bytes]] = {
    "length": case_length,
    "header_length": case_header_length,
    "serialize_type": case_serialize_type,
    "json": case_json,
    "field_types": case_field_types,
    "unknown_code": case_unknown_code,
    "unknown_oneway": case_unknown_oneway,
    "bad_fields": case_bad_fields,
    "truncated": case_truncated,
    "stall": case_truncated,
    "binary": case_binary,
    "garbage": case_garbage,
    "nested_body": case_nested_body,
    "lone_surrogate": case_lone_surrogate,
    "ns_values": case_ns_values,
}
#: kinds sent to the name server (every other kind goes to the broker)
TO_NAMESRV = frozenset(("ns_values",))
#: a remark that is no answer of ours but the text of one of Python's own exceptions (what the
#: transport answers when a handler raises: ``RecursionError: ...``) or of its last resorts; the
#: store's typed errors (``InvalidTopicError: field 'topic': ...``) are answers of ours
_BUILTIN_ERRORS = "|".join(
    sorted(name for name, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException))
)
UNTYPED = re.compile(rf"^(?:(?:{_BUILTIN_ERRORS}):|the answer does not encode|the processor returned)")


# ---- running them ------------------------------------------------------------------------------


async def _outcome(reader: asyncio.StreamReader, wait_s: float) -> str:
    """What the broker did: ``answered <code>`` (first answer; ``answered <code> untyped`` when its
    remark is an exception's text: :data:`UNTYPED`), ``closed``, or ``no answer``."""
    try:
        head = await asyncio.wait_for(reader.readexactly(8), wait_s)
        length, word = _II.unpack(head)
        hlen = word & 0xFFFFFF
        header = json.loads(await asyncio.wait_for(reader.readexactly(hlen), wait_s))
        untyped = " untyped" if UNTYPED.match(str(header.get("remark") or "")) else ""
        return f"answered {header.get('code')}{untyped}"
    except TimeoutError:  # first: TimeoutError is an OSError, which means "closed" below
        return "no answer"
    except asyncio.IncompleteReadError:
        return "closed"
    except (ConnectionError, OSError):
        return "closed"


async def run_case(addr: tuple[str, int], kind: str, payloads: list[bytes], rng: random.Random) -> str:
    try:
        reader, writer = await asyncio.open_connection(*addr)
    except OSError as exc:
        return f"connect failed {type(exc).__name__}"
    try:
        for p in payloads:
            writer.write(p)
        try:
            await writer.drain()
        except (ConnectionError, OSError):
            return "closed"
        if kind == "truncated":
            writer.close()
            return "closed by us"
        return await _outcome(reader, CASE_WAIT_S if kind != "stall" else rng.uniform(0.2, CASE_WAIT_S))
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


async def broker_answers(addr: tuple[str, int]) -> bool:
    """A GET_BROKER_RUNTIME_INFO (28) answered SUCCESS on a fresh connection."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*addr), 5)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(frame(jheader(28, {}, opaque=424242)))
        return await _outcome(reader, 10.0) == "answered 0"
    finally:
        writer.close()


#: the only outcome a kind may have (kinds not named: any outcome but a crash): a well-formed
#: request with a code the broker does not serve is answered REQUEST_CODE_NOT_SUPPORTED (3), and
#: as a oneway request it is not answered and its connection stays open (RocketMQ 4.9.8's
#: ``NettyRemotingAbstract.processRequestCommand``)
EXPECTED = {
    "unknown_code": "answered 3",
    "unknown_oneway": "no answer",
    "nested_body": "answered 1",
    "lone_surrogate": "answered 1",
    "ns_values": "answered 1",
}


def unexpected(tally: Counter[str]) -> dict[str, int]:
    """The tallied outcomes of :data:`EXPECTED`'s kinds that are not the expected one."""
    out: dict[str, int] = {}
    for key, n in tally.items():
        kind, outcome = key.split(": ", 1)
        if kind in EXPECTED and outcome != EXPECTED[kind]:
            out[key] = n
    return out


async def fuzz(
    addr: tuple[str, int],
    cases: int,
    seed: int,
    concurrency: int,
    broker: subprocess.Popen[bytes],
    tally: Counter[str],
    ns_addr: tuple[str, int] | None = None,
) -> int:
    """Run the cases; returns the crashes seen (the broker gone or not answering)."""
    rng = random.Random(seed)
    kinds = list(KINDS)
    plan: list[tuple[str, list[bytes], random.Random]] = []
    for _ in range(cases):
        kind = rng.choice([*kinds, "multi"])
        if kind == "multi":  # several malformed requests on one connection, the last one may close it
            crng = random.Random(rng.getrandbits(64))
            payloads = [case_bad_fields(crng) for _ in range(crng.randint(2, 20))]
            payloads.append(KINDS[crng.choice(kinds)](crng))
            plan.append((kind, payloads, crng))
        else:
            crng = random.Random(rng.getrandbits(64))
            plan.append((kind, [KINDS[kind](crng)], crng))
    crashes = 0
    sem = asyncio.Semaphore(concurrency)
    stalls = asyncio.Semaphore(max(1, concurrency * 4))

    async def one(kind: str, payloads: list[bytes], crng: random.Random) -> None:
        if kind == "stall":  # a stalled sender does not hold a slot of the others
            async with stalls:
                tally[f"{kind}: {await run_case(addr, kind, payloads, crng)}"] += 1
            return
        target = ns_addr if kind in TO_NAMESRV and ns_addr is not None else addr
        async with sem:
            tally[f"{kind}: {await run_case(target, kind, payloads, crng)}"] += 1

    for start in range(0, cases, 500):
        batch = plan[start : start + 500]
        await asyncio.gather(*(one(*c) for c in batch))
        if broker.poll() is not None or not await broker_answers(addr):
            crashes += 1
            print(
                f"  CRASH after case {start + len(batch)}: broker "
                f"{'exited ' + str(broker.returncode) if broker.poll() is not None else 'not answering'}",
                flush=True,
            )
            break
    return crashes


# ---- the healthy client ---------------------------------------------------------------------------


def run_healthy(spec: dict[str, Any]) -> int:
    """Send a message and pull it back until stdin closes; prints ``<round trips> <errors> <seconds>``
    after each ``mark`` line read from stdin (the parent's phases) and at the end."""
    import threading

    from rmqnet.client import Producer, PullConsumer

    producer = Producer("FUZZ_HEALTHY_PG", spec["namesrv"], timeout_s=10.0)
    consumer = PullConsumer("FUZZ_HEALTHY_CG", spec["namesrv"], timeout_s=10.0)
    counts = {"ok": 0, "errors": 0}
    lock = threading.Lock()
    stop = threading.Event()

    def loop() -> None:
        i = 0
        body = b"h" * 92
        while not stop.is_set():
            i += 1
            try:
                sent = producer.send(TOPIC, body + f"{i:08d}".encode(), queue_id=i % QUEUES)
                # held until the dispatcher has the message (a pull may come before its dispatch)
                got = consumer.pull(TOPIC, sent.queue_id, sent.queue_offset, 1, suspend_ms=5000)
                good = got.status == "FOUND" and got.messages["body"][0].as_py() == body + f"{i:08d}".encode()
            except Exception as exc:
                print(f"healthy error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                good = False
            with lock:
                counts["ok" if good else "errors"] += 1

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    print("ready", flush=True)
    t0 = time.monotonic()
    for _line in sys.stdin:
        with lock:
            print(f"{counts['ok']} {counts['errors']} {time.monotonic() - t0:.6f}", flush=True)
    stop.set()
    t.join(30)
    producer.close()
    consumer.close()
    return 0


class Healthy:
    """The healthy client process; :meth:`mark` reads its counters at a phase boundary."""

    def __init__(self, namesrv: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--child", "healthy", json.dumps({"namesrv": namesrv})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the healthy client did not start")

    def mark(self) -> tuple[int, int, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("mark\n")
        self.proc.stdin.flush()
        ok, errors, t = self.proc.stdout.readline().split()
        return int(ok), int(errors), float(t)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(GUARD_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def tracebacks(log: Path) -> int:
    """Tracebacks (and asyncio's "Fatal error" lines) in a process's log."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return 0
    return text.count("Traceback (most recent call last)") + text.count("Fatal error")


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return -1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return run_healthy(json.loads(argv[2]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--baseline-s", type=float, default=3.0, help="the healthy client alone, before and after the fuzz")
    ap.add_argument("--root", type=Path, default=None, help="work directory (default: a new temporary one, removed)")
    ap.add_argument("--no-throughput-check", action="store_true", help="print the ratio, do not fail on it")
    args = ap.parse_args(argv)
    if args.cases < 1 or args.concurrency < 1 or args.baseline_s <= 0:
        ap.error("--cases and --concurrency must be at least 1, --baseline-s positive")
    base = args.root or Path(tempfile.mkdtemp(prefix="fuzz-broker-"))
    base.mkdir(parents=True, exist_ok=True)
    print(
        f"fuzz_broker: {args.cases} cases, seed {args.seed}, concurrency {args.concurrency}, work directory {base}",
        flush=True,
    )
    import rmqlog

    root = base / "store"
    with rmqlog.MessageStore.open(root) as store:
        store.create_topic(TOPIC, QUEUES)
    ns, namesrv = start_process(
        ["namesrv", "--listen", "127.0.0.1:0"], base / "namesrv.log", "listening on", "the name server"
    )
    broker, addr_text = start_process(
        ["broker", str(root), "--listen", "127.0.0.1:0", "--namesrv", namesrv],
        base / "broker.log",
        "ready at",
        "the broker",
    )
    host, port = addr_text.rsplit(":", 1)
    addr = (host, int(port))
    ns_host, ns_port = namesrv.rsplit(":", 1)
    failed: list[str] = []
    healthy: Healthy | None = None
    tally: Counter[str] = Counter()
    try:
        healthy = Healthy(namesrv)
        time.sleep(args.baseline_s)  # the healthy client alone: the first half of the baseline
        a = healthy.mark()
        rss_before = rss(broker.pid)
        t0 = time.monotonic()
        crashes = asyncio.run(
            fuzz(addr, args.cases, args.seed, args.concurrency, broker, tally, (ns_host, int(ns_port)))
        )
        fuzz_s = time.monotonic() - t0
        b = healthy.mark()
        rss_after = rss(broker.pid) if broker.poll() is None else -1
        time.sleep(args.baseline_s)  # the second half of the baseline
        c = healthy.mark()
        alone = (a[0] + (c[0] - b[0])) / (a[2] + (c[2] - b[2]))
        during = (b[0] - a[0]) / (b[2] - a[2])
        errors = c[1]
        ratio = during / alone if alone else 0.0
        for key in sorted(tally):
            print(f"  {key}: {tally[key]}")
        print(f"cases: {sum(tally.values())} in {fuzz_s:.1f} s ({sum(tally.values()) / fuzz_s:.0f}/s)")
        print(f"crashes: {crashes} (broker {'alive and answering' if crashes == 0 else 'DOWN or silent'})")
        print(
            f"broker RSS: {rss_before / 2**20:.1f} MiB before, {rss_after / 2**20:.1f} MiB after "
            f"({(rss_after - rss_before) / 2**20:+.1f} MiB; bound {RSS_GROWTH_MAX / 2**20:.0f} MiB)"
        )
        print(
            f"healthy client: {alone:.0f} round trips/s alone, {during:.0f}/s during the fuzz: {ratio:.2f}x "
            f"(>= 0.80 {'met' if ratio >= 0.8 else 'NOT met'}), {errors} errors",
            flush=True,
        )
        if crashes:
            failed.append("crashes")
        if rss_after < 0 or rss_after - rss_before > RSS_GROWTH_MAX:
            failed.append("memory")
        if errors:
            failed.append("healthy client errors")
        wrong = unexpected(tally)
        print(
            f"unexpected outcomes: {sum(wrong.values())} "
            f"({', '.join(f'{k}: {n}' for k, n in sorted(wrong.items())) or 'none'})"
        )
        if wrong:
            failed.append("unexpected outcomes")
        if ratio < 0.8 and not args.no_throughput_check:
            failed.append("throughput")
    finally:
        if healthy is not None:
            healthy.close()
        for proc in (broker, ns):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(GUARD_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
    if broker.returncode not in (0, None):
        failed.append(f"broker exit status {broker.returncode}")
    untyped = sum(n for key, n in tally.items() if key.endswith(" untyped"))
    print(f"untyped answers: {untyped}")
    if untyped:
        failed.append("untyped answers")
    logs = {name: tracebacks(base / f"{name}.log") for name in ("broker", "namesrv")}
    print(f"tracebacks: {logs['broker']} in the broker's log, {logs['namesrv']} in the name server's")
    if any(logs.values()):
        failed.append("tracebacks")
    print(f"{args.cases} cases, {len(failed) and 'FAILED: ' + ', '.join(failed) or 'all checks met'}", flush=True)
    if not failed and args.root is None:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
