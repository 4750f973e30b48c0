"""The ``rmqlog`` commands that read: info, topic-status, read, get, query, lag, verify.

None of them adds a message or commits an offset. Each takes the open store and the parsed
arguments and returns the exit status (:mod:`rmqlog.admin.exits`); a wrong topic, queue or
group raises :class:`rmqlog.admin.exits.CliError` with one message for every command.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..message_store import MessageStore
from .exits import NOTHING, OK, USAGE, CliError
from .render import emit, error, messages


def listing(names: list[str]) -> str:
    return ", ".join(names[:20]) + (f" ... ({len(names)} in all)" if len(names) > 20 else "") if names else "none"


def require_topic(s: MessageStore, topic: str) -> int:
    """The number of queues of ``topic``; :class:`CliError` naming the store's topics if it has none such."""
    tc = s.topics().get(topic)
    if tc is None:
        raise CliError(f"no topic {topic!r} in {s.paths.root}; topics: {listing(sorted(s.topics()))}", USAGE)
    return max(tc.read_queue_nums, tc.write_queue_nums)


def require_queue(s: MessageStore, topic: str, queue: int | None) -> int:
    """The topic's queue count, after checking ``queue`` (when given) is one of its queues."""
    count = require_topic(s, topic)
    if queue is not None and not 0 <= queue < count:
        raise CliError(f"queue {queue} is not a queue of topic {topic!r} ({count} queues: 0..{count - 1})", USAGE)
    return count


def groups(s: MessageStore) -> list[str]:
    """Every consumer group with a committed offset."""
    return sorted({key.split("@", 1)[1] for key in s.consumer_offsets.table() if "@" in key})


def _queues(s: MessageStore, topic: str, queues: int) -> list[dict[str, int]]:
    out = []
    for q in range(queues):
        lo, hi = s.min_offset(topic, q), s.max_offset(topic, q)
        out.append({"queueId": q, "min": lo, "max": hi, "messages": max(0, hi - lo)})
    return out


def info(s: MessageStore, args: argparse.Namespace) -> int:
    starts = s.commitlog.segments.segment_starts()
    topics = s.topics()
    per_topic: dict[str, dict[str, Any]] = {
        name: {
            "writeQueues": tc.write_queue_nums,
            "readQueues": tc.read_queue_nums,
            "queues": _queues(s, name, tc.read_queue_nums),
        }
        for name, tc in sorted(topics.items())
    }
    obj: dict[str, Any] = {
        "root": str(s.paths.root),
        "segments": len(starts),
        "segmentSize": s.commitlog.segment_size,
        "commitlogMin": s.commitlog.min_offset(),
        "publishedTail": s.published_tail(),
        "flushed": s.flushed_offset(),
        "topics": per_topic,
    }
    lines = [
        f"store        {s.paths.root}",
        f"segments     {len(starts)} x {s.commitlog.segment_size:,} B"
        + (f"  (first {starts[0]:020d}, last {starts[-1]:020d})" if starts else ""),
        f"commitlog    min {obj['commitlogMin']:,}  published tail {obj['publishedTail']:,}  flushed "
        f"{obj['flushed']:,}",
        f"topics       {len(topics)}",
    ]
    for name, t in per_topic.items():
        ranges = " ".join(f"{q['queueId']}:[{q['min']},{q['max']})" for q in t["queues"])
        lines.append(f"  {name:<24} queues {t['writeQueues']}  {ranges}")
    emit(obj, args.json, lines)
    return OK


def topic_status(s: MessageStore, args: argparse.Namespace) -> int:
    require_topic(s, args.topic)
    queues = _queues(s, args.topic, s.topics()[args.topic].read_queue_nums)
    lines = [f"{args.topic}/{q['queueId']}  min {q['min']}  max {q['max']}  messages {q['messages']}" for q in queues]
    emit({"topic": args.topic, "queues": queues}, args.json, lines)
    return OK


def read(s: MessageStore, args: argparse.Namespace) -> int:
    require_queue(s, args.topic, args.queue)
    offset = args.offset if args.offset is not None else s.min_offset(args.topic, args.queue)
    res = s.get_messages("rmqlog_cli", args.topic, args.queue, offset, max_count=args.count, tags=args.tags)
    status = {
        "status": res.status.name,
        "nextOffset": res.next_begin_offset,
        "minOffset": res.min_offset,
        "maxOffset": res.max_offset,
    }
    messages(res.messages, args.body, args.json, **status)
    if not args.json:
        print(
            f"# {res.status.name} next={res.next_begin_offset} min={res.min_offset} max={res.max_offset}",
            file=sys.stderr,
        )
    return OK if res.messages.num_rows else NOTHING


def get(s: MessageStore, args: argparse.Namespace) -> int:
    import pyarrow as pa

    from ..schema import MESSAGE_SCHEMA

    row = s.message_by_offset(args.offset) if args.offset is not None else s.message_by_id(args.id)
    if row is None:
        error(
            f"no message at commitlog offset {args.offset}" if args.offset is not None else _no_message_with_id(args.id)
        )
        return NOTHING
    messages(pa.Table.from_pylist([row], MESSAGE_SCHEMA), args.body, args.json)
    return OK


def query(s: MessageStore, args: argparse.Namespace) -> int:
    if args.topic != "*":
        require_topic(s, args.topic)
    import pyarrow as pa

    from ..log.msgid import is_uniq_key
    from ..schema import MESSAGE_SCHEMA

    if args.id is not None:
        # a client msgId (UNIQ_KEY) through the topic's index, else an offset msgId (what a
        # send's result and ali-ons print: 32 hex digits too), as get reads it
        table = s.query_by_unique_key(args.topic, args.id) if is_uniq_key(args.id) else MESSAGE_SCHEMA.empty_table()
        if not table.num_rows:
            row = s.message_by_id(args.id)
            if row is not None and row["topic"] != args.topic:
                error(f"msgId {args.id} is a message of topic {row['topic']!r}, not of {args.topic!r}")
                return NOTHING
            if row is None:
                error(_no_message_with_id(args.id))
                return NOTHING
            table = pa.Table.from_pylist([row], MESSAGE_SCHEMA)
    elif args.key is not None:
        table = s.query_by_key(args.topic, args.key, args.max, args.begin, args.end)
    else:  # a time range, in one topic or ("*") every topic
        topics = None if args.topic == "*" else [args.topic]
        table = s.query_by_time(args.begin, args.end, topics=topics, max_count=args.max)
    messages(table, args.body, args.json)
    if not table.num_rows:
        what = (
            f"msgId {args.id}"
            if args.id is not None
            else f"key {args.key!r}"
            if args.key is not None
            else "a store time in that range"
        )
        error(
            f"no message with {what} in {'any topic' if args.topic == '*' else f'topic {args.topic!r}'}"
            + (
                " (the index holds keys of messages stored while message_index_enable was on)"
                if args.id is not None or args.key is not None
                else ""
            )
        )
    return OK if table.num_rows else NOTHING


def _no_message_with_id(msg_id: str) -> str:
    """Why ``msg_id`` found nothing, said: an offset msgId names a store host and an offset."""
    from ..log.msgid import parse_offset_msg_id

    parsed = parse_offset_msg_id(msg_id)
    if parsed is None:
        return f"no message with client msgId {msg_id} in the index files"
    raw, offset = parsed
    host = ".".join(str(b) for b in raw[:4]) if len(raw) == 8 else raw[:16].hex()
    port = int.from_bytes(raw[-4:], "big")
    return (
        f"no message with msgId {msg_id}: as a client msgId (UNIQ_KEY) the index files hold none, and as an "
        f"offset msgId it names commitlog offset {offset} of store host {host}:{port}, and this store holds no "
        "message of that host there"
    )


def lag(s: MessageStore, args: argparse.Namespace) -> int:
    known = groups(s)
    if args.group is not None and args.group not in known:
        raise CliError(
            f"no consumer group {args.group!r} in {s.paths.root} (none with committed offsets); "
            f"groups: {listing(known)}",
            USAGE,
        )
    topics = s.topics()
    rows: list[dict[str, Any]] = []
    for g in [args.group] if args.group is not None else known:
        for name in sorted(topics):
            for q in range(topics[name].read_queue_nums):
                committed = s.committed_offset(g, name, q)
                if committed < 0:
                    continue
                hi = s.max_offset(name, q)
                rows.append(
                    {
                        "group": g,
                        "topic": name,
                        "queueId": q,
                        "committed": committed,
                        "max": hi,
                        "lag": max(0, hi - committed),
                    }
                )
    if not rows:
        error("no consumer group has committed offsets")
        return NOTHING
    lines = [
        f"{r['group']}  {r['topic']}/{r['queueId']}  committed {r['committed']}  max {r['max']}  lag {r['lag']}"
        for r in rows
    ]
    lines.append(f"total lag {sum(r['lag'] for r in rows)}")
    emit({"offsets": rows, "totalLag": sum(r["lag"] for r in rows)}, args.json, lines)
    return OK


def verify(s: MessageStore, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    with tqdm(unit="B", unit_scale=True, file=sys.stderr, disable=not sys.stderr.isatty(), desc="verify") as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        report = s.verify(progress)
    problems = [{"path": p.path, "offset": p.offset, "detail": p.detail} for p in report.problems]
    lines = [f"problem: {p}" for p in report.problems]
    lines.append(
        f"{'OK' if report.ok else 'DAMAGED'}: {report.records:,} records, {report.units:,} units, "
        f"{len(problems)} problem(s)"
    )
    emit({"ok": report.ok, "records": report.records, "units": report.units, "problems": problems}, args.json, lines)
    return OK if report.ok else NOTHING
