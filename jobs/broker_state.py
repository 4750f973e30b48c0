"""The broker benchmark's state-scale figures (``jobs/bench_broker.py --parts state``): the
cost of a request at a small state beside the same request at a large one.

Two brokers (ASYNC_FLUSH, processes of their own) over two stores built before they start:

- **small**: 10 topics (``BenchState`` with 4 queues and 9 others), the bench's consumer group
  ``bench_state_cg`` (its ``%RETRY%`` topic, its offset);
- **large**: the same, plus ``--state-topics`` topics (``StateT<n>``, 4 queues),
  ``--state-groups`` consumer groups (``StateG<n>``, each with its ``%RETRY%StateG<n>`` topic
  of 1 queue, as a heartbeat creates it) and ``--state-offsets`` committed offsets spread over
  those groups (each group's on consecutive topics' queues). With ``--state-filled N`` the
  first N of the topics also hold a message each (so N queue folders exist; the broker's
  start then opens each of them).

The tables are **written into the store's files before the broker starts**, in RocketMQ's
formats (``config/topics.json`` entries from ``rmqlog.config_files.TopicConfig``,
``config/consumerOffset.json``'s ``offsetTable``): creating them through the wire would take
hours on a broker whose every topic creation or offset commit rewrites the whole file. Each
broker then gets the groups registered by heartbeats (100 groups a heartbeat, from a
connection kept open while measuring), and the run checks that the broker sees the state
(GET_ALL_TOPIC_CONFIG counts the topics; QUERY_CONSUMER_OFFSET answers the last group's
offset as written).

Measured, one request at a time over a blocking connection (after 5 unmeasured), each kind
for ``--state-requests`` requests or ``--state-seconds``, whichever ends first, alternating
the two brokers each round: SEND_MESSAGE_V2 of 1 KiB to ``BenchState``; PULL_MESSAGE of 1
message with the commit flag (``commitOffset`` the offset pulled, group ``bench_state_cg``,
over 1,000 messages sent before); QUERY_CONSUMER_OFFSET (14); HEART_BEAT (34) of the bench's
client (one producer group, one consumer group subscribed to ``BenchState``). Figures: each
kind's p50 at the large state beside its p50 at the small one (ratio: large / small), and the
time each broker took from its start to its ready line.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from broker_load import Wire, check_ok, send_frame, uniq_key  # jobs/ is the scripts' directory
from broker_servers import Server, med, pct, report

import rmqlog
from rmqlog.config_files import TopicConfig, dump_fastjson
from rmqnet.client import encode_messages
from rmqnet.remoting import PullMessageHeader, RemotingCommand, RequestCode, encode_bytes
from rmqnet.remoting.headers import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION

if TYPE_CHECKING:
    from bench_broker import Run

GROUP = "bench_state_cg"
TOPIC = "BenchState"
#: the messages of BenchState's queue 1 that the committing pulls read, cycled
PULLED = 1000
SMALL_TOPICS = 10


def _topics_json(root: Path, extra: dict[str, TopicConfig]) -> None:
    """Add ``extra`` to the store's ``config/topics.json`` (written to a new file, then renamed)."""
    path = root / "config" / "topics.json"
    doc = json.loads(path.read_text())
    doc["topicConfigTable"].update({name: tc.to_json() for name, tc in extra.items()})
    doc["dataVersion"]["counter"] = int(doc["dataVersion"].get("counter", 0)) + 1
    tmp = path.with_suffix(".bench")
    tmp.write_bytes(dump_fastjson(doc))
    os.replace(tmp, path)


def _offsets_json(root: Path, table: dict[str, dict[str, int]]) -> None:
    path = root / "config" / "consumerOffset.json"
    tmp = path.with_suffix(".bench")
    tmp.write_bytes(dump_fastjson({"offsetTable": table}))
    os.replace(tmp, path)


def group_names(groups: int) -> list[str]:
    return [f"StateG{g:05d}" for g in range(groups)]


@dataclass(frozen=True)
class Built:
    """What :func:`build` wrote: counts, and one offset entry of the last group to check."""

    topics: int
    groups: int
    offsets: int
    probe: tuple[str, str, int, int] | None  # group, topic, queue, offset


def build(root: Path, config: rmqlog.StoreConfig, *, topics: int, groups: int, offsets: int, filled: int) -> Built:
    """A store at ``root`` with the small state, plus ``topics`` topics, ``groups`` groups and
    ``offsets`` offset entries (see the module docstring)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    names = [f"StateT{t:05d}" for t in range(topics)]
    with rmqlog.MessageStore.open(root, config) as store:
        store.create_topic(TOPIC, 4)
        for i in range(SMALL_TOPICS - 1):
            store.create_topic(f"BenchStateSmall{i}", 4)
        store.create_topic(f"%RETRY%{GROUP}", 1)
        if filled:
            rows = min(filled, topics)
            store.put_batch(
                pa.table(
                    {
                        "topic": pa.array(names[:rows]),
                        "body": pa.array([b"x" * 100] * rows),
                        "queueId": pa.array([0] * rows, pa.int32()),
                    }
                ),
                dispatch=True,
            )
    extra = {n: TopicConfig(n, 4, 4) for n in names}
    gnames = group_names(groups)
    extra.update({f"%RETRY%{g}": TopicConfig(f"%RETRY%{g}", 1, 1) for g in gnames})
    if extra:
        _topics_json(root, extra)
    table: dict[str, dict[str, int]] = {f"{TOPIC}@{GROUP}": {"1": 0}}
    per_group = max(1, -(-offsets // max(groups, 1)))
    n = offsets if groups and topics else 0
    probe = None
    for e in range(n):
        g, j = divmod(e, per_group)
        topic, group, queue, offset = names[(g + j // 4) % topics], gnames[g % groups], j % 4, 7 + g % 1000
        table.setdefault(f"{topic}@{group}", {})[str(queue)] = offset
        probe = (group, topic, queue, offset)
    _offsets_json(root, table)
    return Built(SMALL_TOPICS + 1 + len(extra), groups + 1, 1 + n, probe)


def heartbeat_frame(groups: list[str], opaque: int, client: str = "127.0.0.1@bench-state") -> bytes:
    """HEART_BEAT (34): one producer group, ``groups`` as consumer groups subscribed to BenchState."""
    sub = {
        "topic": TOPIC,
        "subString": "*",
        "tagsSet": [],
        "codeSet": [],
        "subVersion": 1,
        "classFilterMode": False,
        "expressionType": "TAG",
    }
    body = json.dumps(
        {
            "clientID": client,
            "producerDataSet": [{"groupName": "bench_state_pg"}],
            "consumerDataSet": [
                {
                    "groupName": g,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "unitMode": False,
                    "subscriptionDataSet": [sub],
                }
                for g in groups
            ],
        }
    ).encode()
    return encode_bytes(RemotingCommand(RequestCode.HEART_BEAT, opaque, 0, None, {}, body))


def _pull_commit(offset: int, opaque: int) -> bytes:
    h = PullMessageHeader(
        consumer_group=GROUP,
        topic=TOPIC,
        queue_id=1,
        queue_offset=offset,
        max_msg_nums=1,
        sys_flag=PULL_COMMIT_OFFSET | PULL_SUBSCRIPTION,
        commit_offset=offset,
        suspend_timeout_millis=0,
        subscription="*",
        sub_version=0,
        expression_type=None,
    )
    return encode_bytes(RemotingCommand(RequestCode.PULL_MESSAGE, opaque, 0, None, h.to_ext()))


def _query(opaque: int, group: str = GROUP, topic: str = TOPIC, queue_id: int = 1) -> bytes:
    return encode_bytes(
        RemotingCommand(
            RequestCode.QUERY_CONSUMER_OFFSET,
            opaque,
            0,
            None,
            {"consumerGroup": group, "topic": topic, "queueId": queue_id},
        )
    )


BODY = os.urandom(1024)
#: the measured kinds: name, frame of request i
KINDS: dict[str, Callable[[int], bytes]] = {
    "SEND_MESSAGE_V2 1 KiB": lambda i: send_frame(TOPIC, 0, BODY, i + 1, uniq=uniq_key(2, i)),
    "PULL_MESSAGE with the commit flag": lambda i: _pull_commit(i % PULLED, i + 1),
    "QUERY_CONSUMER_OFFSET (14)": lambda i: _query(i + 1),
    "HEART_BEAT (34)": lambda i: heartbeat_frame([GROUP], i + 1),
}


class StateBroker:
    """A broker over a built store: started (its start timed), the groups registered, checked."""

    def __init__(self, run: Run, name: str, root: Path, built: Built, groups: list[str]) -> None:
        conf = run.servers.broker_conf(run.work / f"{name}.conf", "ASYNC_FLUSH")
        t0 = time.monotonic()
        self.server = Server(["broker", str(root), str(conf)], run.work / f"{name}.log")
        self.start_s = time.monotonic() - t0
        self.registrar = Wire(self.server.port)
        self.wire = Wire(self.server.port)
        t0 = time.monotonic()
        for i in range(0, len(groups), 100):
            check_ok(
                self.registrar.call(heartbeat_frame(groups[i : i + 100], i + 1, "127.0.0.1@bench-registrar")),
                "a heartbeat registering groups",
            )
        self.register_s = time.monotonic() - t0
        self._check(built)
        fill = send_frame(
            TOPIC,
            1,
            encode_messages(pa.array([b"m" * 100] * PULLED, pa.binary()), pa.array([""] * PULLED, pa.string())),
            1,
            code=RequestCode.SEND_BATCH_MESSAGE,
            batch=True,
        )
        check_ok(self.wire.call(fill), "the committing pulls' messages")

    def _check(self, built: Built) -> None:
        head = self.wire.call(encode_bytes(RemotingCommand(RequestCode.GET_ALL_TOPIC_CONFIG, 1, 0, None, {})))
        check_ok(head, "GET_ALL_TOPIC_CONFIG")
        seen = len(json.loads(self.wire.body)["topicConfigTable"])
        if seen < built.topics:
            raise RuntimeError(f"the broker lists {seen} topics, {built.topics} were written")
        if built.probe is not None:
            group, topic, queue, offset = built.probe
            head = self.wire.call(_query(1, group, topic, queue))
            if int(head["code"]) != 0 or int(head["extFields"]["offset"]) != offset:
                raise RuntimeError(
                    f"the broker answers {head} for {group}'s offset on {topic}:{queue}, {offset} was written"
                )

    def measure(self, kind: str, requests: int, seconds: float) -> list[float]:
        """Round trips (ms) of ``kind``: 5 unmeasured, then up to ``requests`` or ``seconds``."""
        make = KINDS[kind]
        for i in range(5):
            check_ok(self.wire.call(make(i)), kind)
        out: list[float] = []
        deadline = time.monotonic() + seconds
        i = 5
        while len(out) < requests and time.monotonic() < deadline:
            frame = make(i)
            t0 = time.perf_counter_ns()
            head = self.wire.call(frame)
            out.append((time.perf_counter_ns() - t0) / 1e6)
            check_ok(head, kind)
            i += 1
        return out

    def stop(self) -> None:
        self.wire.close()
        self.registrar.close()
        self.server.stop()


def state(run: Run) -> None:
    a = run.a
    config = run.servers.store_config()
    t0 = time.monotonic()
    small_root, large_root = run.work / "state-small", run.work / "state-large"
    small_built = build(small_root, config, topics=0, groups=0, offsets=0, filled=0)
    large_built = build(
        large_root, config, topics=a.state_topics, groups=a.state_groups, offsets=a.state_offsets, filled=a.state_filled
    )
    built_s = time.monotonic() - t0
    brokers: dict[str, StateBroker] = {}
    try:
        brokers["small"] = StateBroker(run, "state-small", small_root, small_built, [])
        brokers["large"] = StateBroker(run, "state-large", large_root, large_built, group_names(a.state_groups))
        p50s: dict[tuple[str, str], list[float]] = {}
        counts: dict[tuple[str, str], int] = {}
        for _ in range(a.rounds):
            for kind in KINDS:
                for name, b in brokers.items():
                    rtts = b.measure(kind, a.state_requests, a.state_seconds)
                    p50s.setdefault((kind, name), []).append(pct(rtts, 50))
                    counts[(kind, name)] = counts.get((kind, name), 0) + len(rtts)
        large = f"{a.state_topics:,} topics, {a.state_groups:,} groups, {a.state_offsets:,} offset entries"
        print(
            f"\n== state: one request at a time at {SMALL_TOPICS} topics, 1 group, 1 offset entry, beside the same at "
            f"{large} (each group with its %RETRY% topic: {large_built.topics:,} topics in all; {a.state_filled:,} "
            f"topics holding a message); the stores written in {built_s:.1f} s before the brokers started, "
            f"{a.state_groups:,} groups registered by heartbeats in {brokers['large'].register_s:.1f} s; "
            f"medians of {a.rounds} rounds"
        )
        for kind in KINDS:
            small, big = med(p50s[(kind, "small")]), med(p50s[(kind, "large")])
            print(
                f"({kind}: {counts[(kind, 'small')]:,} requests at the small state, {counts[(kind, 'large')]:,} at "
                "the large)"
            )
            report(
                run.b,
                f"state: {kind} p50 at {large}",
                big,
                "ms",
                [(f"the same at {SMALL_TOPICS} topics, 1 group, 1 offset entry", small)],
            )
        report(
            run.b,
            f"state: the broker's start to its ready line at {large}",
            brokers["large"].start_s,
            "s",
            [(f"the same at {SMALL_TOPICS} topics, 1 group, 1 offset entry", brokers["small"].start_s)],
        )
    finally:
        for b in brokers.values():
            b.stop()
