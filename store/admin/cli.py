"""``rmqlog``: inspect a store from a terminal.

    rmqlog info ROOT [--json]                 segments, published tail, topics and queue ranges
    rmqlog topic-status ROOT TOPIC [--json]   one topic's queues: min, max, messages
    rmqlog read ROOT TOPIC QUEUE [--offset N] [--count N] [--tags "A || B"] [--body text|hex|none]
    rmqlog get ROOT (--offset N | --id MSGID) one message by commitlog offset, offset msgId or
                                              client msgId (UNIQ_KEY, through the index files)
    rmqlog query ROOT TOPIC [--key K | --id MSGID] [--begin T] [--end T] [--max N] [--json]
                                              messages by key / client msgId (index files), or
                                              by store time (TOPIC "*": every topic)
    rmqlog export ROOT TOPIC --format jsonl|parquet --out PATH [--queue Q] [--from-offset N] [--to-offset N]
                  [--begin T] [--end T]       a topic's messages to a file (progress on a terminal)
    rmqlog reset-offset ROOT GROUP TOPIC (--earliest | --latest | --timestamp T) [--queue Q]
                                              a group's committed offsets set (mqadmin resetOffsetByTime)
    rmqlog lag ROOT [GROUP] [--json]          committed offsets against the queues' ends (all
    rmqlog consumer-progress ROOT [GROUP]     groups without GROUP; the second name is mqadmin's)
    rmqlog verify ROOT [--json]               check every record and unit (read-only)
    rmqlog recover ROOT --repair [--json]     open with repair: cut damage, rebuild what follows
    rmqlog dispatch ROOT [--json]             build consume-queue units for new records
    rmqlog schedule ROOT [--once] [--json]    deliver due delayed messages (one pass, or every second)
    rmqlog clean ROOT [--force] [--json]      one retention pass (--force: at any hour, as
                                              RocketMQ's manual deletion; ages still apply)

Messages print one JSON object per line (bodies as UTF-8 text with replacement characters by
default), so the output pipes into ``jq``. Only an existing store is opened (a folder without
``commitlog/`` or ``config/`` is refused, never initialized); reading adds no message and
commits no offset (``reset-offset`` commits a group's offsets, ``schedule`` delivers due
delayed messages, ``recover --repair`` repairs: the commands that change a store). Exit status: 0 ok, 1 nothing found (or, for ``verify``, problems found),
2 bad arguments or a store error; errors go to stderr, one line each. ``--json`` prints one
JSON object instead of text. argparse (the standard library's) is the framework: every
subcommand and argument has its help text (``rmqlog CMD --help``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import StoreError
from ..log.msgid import is_uniq_key, parse_offset_msg_id
from ..message_store import MessageStore


def _jsonable(row: dict[str, Any], body: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        if k == "body":
            if body == "none":
                continue
            v = v.hex() if body == "hex" else v.decode("utf-8", "replace")
        elif isinstance(v, dt.datetime):
            v = v.isoformat(timespec="milliseconds")
        elif k == "properties" and v is not None:
            v = dict(v)
        out[k] = v
    return out


def _print_rows(rows: list[dict[str, Any]], body: str) -> None:
    for row in rows:
        print(json.dumps(_jsonable(row, body), ensure_ascii=False))


def _emit(obj: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    if as_json:
        print(json.dumps(obj, ensure_ascii=False))
    else:
        for line in lines:
            print(line)


def _queues(s: MessageStore, topic: str, queues: int) -> list[dict[str, int]]:
    out = []
    for q in range(queues):
        lo, hi = s.min_offset(topic, q), s.max_offset(topic, q)
        out.append({"queueId": q, "min": lo, "max": hi, "messages": max(0, hi - lo)})
    return out


def _info(s: MessageStore, as_json: bool) -> int:
    starts = s.commitlog.segments.segment_starts()
    topics = s.topics()
    per_topic: dict[str, dict[str, Any]] = {
        name: {"writeQueues": tc.write_queue_nums, "readQueues": tc.read_queue_nums,
               "queues": _queues(s, name, tc.read_queue_nums)} for name, tc in sorted(topics.items())
    }
    info: dict[str, Any] = {
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
        f"commitlog    min {info['commitlogMin']:,}  published tail {info['publishedTail']:,}  flushed {info['flushed']:,}",
        f"topics       {len(topics)}",
    ]
    for name, t in per_topic.items():
        ranges = " ".join(f"{q['queueId']}:[{q['min']},{q['max']})" for q in t["queues"])
        lines.append(f"  {name:<24} queues {t['writeQueues']}  {ranges}")
    _emit(info, as_json, lines)
    return 0


def _topic_status(s: MessageStore, topic: str, as_json: bool) -> int:
    tc = s.topics().get(topic)
    if tc is None:
        _error(f"no topic {topic!r} in this store")
        return 1
    queues = _queues(s, topic, tc.read_queue_nums)
    lines = [f"{topic}/{q['queueId']}  min {q['min']}  max {q['max']}  messages {q['messages']}" for q in queues]
    _emit({"topic": topic, "queues": queues}, as_json, lines)
    return 0


def _groups(s: MessageStore) -> list[str]:
    return sorted({key.split("@", 1)[1] for key in s.consumer_offsets.table() if "@" in key})


def _lag(s: MessageStore, group: str | None, as_json: bool) -> int:
    groups = [group] if group is not None else _groups(s)
    topics = s.topics()
    rows: list[dict[str, Any]] = []
    for g in groups:
        for name in sorted(topics):
            for q in range(topics[name].read_queue_nums):
                committed = s.committed_offset(g, name, q)
                if committed < 0:
                    continue
                hi = s.max_offset(name, q)
                rows.append({"group": g, "topic": name, "queueId": q, "committed": committed, "max": hi,
                             "lag": max(0, hi - committed)})
    if not rows:
        _error(f"no committed offsets for group {group!r}" if group is not None else "no consumer group has committed offsets")
        return 1
    lines = [f"{r['group']}  {r['topic']}/{r['queueId']}  committed {r['committed']}  max {r['max']}  lag {r['lag']}" for r in rows]
    lines.append(f"total lag {sum(r['lag'] for r in rows)}")
    _emit({"offsets": rows, "totalLag": sum(r["lag"] for r in rows)}, as_json, lines)
    return 0


def _verify(s: MessageStore, as_json: bool) -> int:
    from tqdm import tqdm

    with tqdm(unit="B", unit_scale=True, file=sys.stderr, disable=not sys.stderr.isatty(), desc="verify") as bar:
        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        report = s.verify(progress)
    problems = [{"path": p.path, "offset": p.offset, "detail": p.detail} for p in report.problems]
    lines = [f"problem: {p}" for p in report.problems]
    lines.append(f"{'OK' if report.ok else 'DAMAGED'}: {report.records:,} records, {report.units:,} units, "
                 f"{len(problems)} problem(s)")
    _emit({"ok": report.ok, "records": report.records, "units": report.units, "problems": problems}, as_json, lines)
    return 0 if report.ok else 1


def _recover(s: MessageStore, as_json: bool) -> int:
    r = s.recovery
    obj = {} if r is None else {
        "abnormal": r.abnormal, "walkStart": r.walk_start, "logEnd": r.log_end, "end": r.end,
        "droppedBytes": r.dropped_bytes, "redispatched": r.redispatched, "stateRebuilt": r.state_rebuilt,
        "problems": list(r.problems),
    }
    if r is None:
        lines = ["store already open elsewhere: recovery was done by its first opener"]
    else:
        lines = [f"recovered ({'abnormal' if r.abnormal else 'normal'} exit): log ends at {r.end:,}, "
                 f"{r.dropped_bytes:,} B dropped, {r.redispatched:,} records re-dispatched"]
        lines += [f"problem: {p}" for p in r.problems]
    _emit(obj, as_json, lines)
    return 0


def _is_message_id(msg_id: str) -> bool:
    return parse_offset_msg_id(msg_id) is not None or is_uniq_key(msg_id)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def _non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, not {n}")
    return n


def _time_ms(text: str) -> int:
    """ms since the epoch, or an ISO 8601 time (local time when it names no zone)."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return int(dt.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time: {text!r} (ms since the epoch or ISO 8601, e.g. 2026-11-24T04:00)") from None


def _query(s: MessageStore, args: argparse.Namespace) -> int:
    if args.id is not None:
        table = s.query_by_unique_key(args.topic, args.id)
    elif args.key is not None:
        table = s.query_by_key(args.topic, args.key, args.max, args.begin, args.end)
    else:  # a time range, in one topic or ("*") every topic
        topics = None if args.topic == "*" else [args.topic]
        table = s.query_by_time(args.begin, args.end, topics=topics, max_count=args.max)
    rows = table.to_pylist()
    if args.json:
        print(json.dumps({"messages": [_jsonable(r, args.body) for r in rows]}))
    else:
        _print_rows(rows, args.body)
    return 0 if rows else 1


def _export(s: MessageStore, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .export import ExportRange, export, plan, total

    r = ExportRange(args.topic, None if args.queue is None else [args.queue], args.from_offset, args.to_offset,
                    args.begin, args.end)
    with tqdm(total=total(plan(s, r)), unit="msg", file=sys.stderr, disable=not sys.stderr.isatty(),
              desc=f"export {args.topic}") as bar:
        n = export(s, r, Path(args.out), args.format, body=args.body, progress=bar.update, jsonable=_jsonable)
    _emit({"exported": n, "out": args.out, "format": args.format}, args.json,
          [f"exported {n} message(s) of {args.topic} to {args.out} ({args.format})"])
    return 0 if n else 1


def _reset_offset(s: MessageStore, args: argparse.Namespace) -> int:
    """mqadmin resetOffsetByTime: per queue, the group's committed offset set to the earliest,
    the latest, or the first message stored at or after a time."""
    tc = s.topics().get(args.topic)
    if tc is None:
        _error(f"no topic {args.topic!r} in this store")
        return 2
    count = max(tc.read_queue_nums, tc.write_queue_nums)
    if args.queue is not None and not 0 <= args.queue < count:
        _error(f"queue {args.queue} is not a queue of topic {args.topic!r} ({count} queues)")
        return 2
    rows = []
    for q in [args.queue] if args.queue is not None else range(count):
        before = s.committed_offset(args.group, args.topic, q)
        if args.earliest:
            offset = s.min_offset(args.topic, q)
        elif args.latest:
            offset = s.max_offset(args.topic, q)
        else:
            offset = s.offset_for_timestamp(args.topic, q, args.timestamp)
        s.commit_offset(args.group, args.topic, q, offset)
        rows.append({"queueId": q, "before": before, "offset": offset})
    _emit({"group": args.group, "topic": args.topic, "queues": rows}, args.json,
          [f"{args.group} {args.topic}/{r['queueId']}: {r['before']} -> {r['offset']}" for r in rows])
    return 0


def _error(message: str) -> None:
    sys.stdout.flush()  # never interleaved into a line of the output before it
    print(f"rmqlog: {message}", file=sys.stderr)


def _schedule(s: MessageStore, once: bool, as_json: bool) -> int:
    """Scheduler passes: one (``--once``) or one a second until interrupted (Ctrl-C: exit 0)."""
    try:
        while True:
            report = s.scheduler.deliver_due()
            lines = [f"delivered {report.total} delayed message(s)"]
            lines += [f"  level {k}: {v}" for k, v in sorted(report.delivered.items())]
            if report.lost:
                lines.append(f"  {report.lost} unit(s) skipped: their records were deleted before delivery")
            _emit({"delivered": report.total, "levels": {str(k): v for k, v in report.delivered.items()}, "lost": report.lost},
                  as_json, lines)
            if once:
                return 0
            sys.stdout.flush()
            time.sleep(1.0)
    except KeyboardInterrupt:
        return 0


def _clean(s: MessageStore, force: bool, as_json: bool) -> int:
    report = s.clean_expired(force=force)
    if as_json:
        print(json.dumps(report.to_dict()))
        return 0
    print(f"deleted {len(report.segments)} commitlog segment(s), {len(report.consume_queue_files)} consume-queue "
          f"file(s), {len(report.index_files)} index file(s): {report.bytes:,} B "
          f"(reason: {report.reason or 'none due'}, disk {report.disk_used_percent:.1f}% used)")
    print(f"commitlog starts at {report.log_start:,}" + (f" (was {report.log_start_before:,})" if report.segments else ""))
    for path in report.busy:
        print(f"busy (held by a reader): {path}")
    return 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rmqlog", description="Inspect a spark-rmq (RocketMQ-format) store.",
                                 epilog="exit status: 0 ok, 1 nothing found or problems found, 2 error")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def command(name: str, help: str, *, json_flag: bool = True, aliases: Sequence[str] = (),
                reads: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, aliases=list(aliases))
        p.add_argument("root", help="the store's folder (the one holding commitlog/)")
        if json_flag:
            p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        if reads:
            p.add_argument("--read-only", action="store_true",
                           help="change nothing, not even by opening: no recovery, no dispatch, no file created "
                                "(the store as it is on disk; works on a read-only mount)")
        return p

    command("info", "segments, published and flushed positions, topics and their queue ranges", reads=True)
    p = command("topic-status", "one topic's queues: min and max offsets, messages", reads=True)
    p.add_argument("topic", help="topic name")
    p = command("read", "messages of one queue as JSON lines", json_flag=False, reads=True)
    p.add_argument("topic", help="topic name")
    p.add_argument("queue", type=_non_negative, help="queue id")
    p.add_argument("--offset", type=_non_negative, default=None, help="first queue offset (default: the queue's min)")
    p.add_argument("--count", type=_positive, default=10, help="most messages to print (at least 1; default 10)")
    p.add_argument("--tags", default="*", help='tag filter, RocketMQ syntax: "*" or "A || B" (default "*")')
    p.add_argument("--body", choices=("text", "hex", "none"), default="text", help="how bodies print (default text)")
    p = command("get", "one message by commitlog offset or message id", json_flag=False, reads=True)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--offset", type=_non_negative, help="the message's commitlog offset")
    g.add_argument("--id", help="a msgId: an offset msgId (store host and commitlog offset) or a client msgId "
                                "(UNIQ_KEY, found through the index files)")
    p.add_argument("--body", choices=("text", "hex", "none"), default="text", help="how the body prints (default text)")
    p = command("query", "messages by key or client msgId through the index files (mqadmin queryMsgByKey / "
                         "queryMsgByUniqueKey), or by store time (neither --key nor --id)", reads=True)
    p.add_argument("topic", help='topic name; "*" for every topic (a time-range query)')
    g = p.add_mutually_exclusive_group()
    g.add_argument("--key", help="a KEYS token (or a client msgId)")
    g.add_argument("--id", help="a client msgId (UNIQ_KEY: 32 or 56 hex digits)")
    p.add_argument("--begin", type=_time_ms, default=0, help="stored at or after: ms since the epoch or an ISO time (default: any)")
    p.add_argument("--end", type=_time_ms, default=None, help="stored at or before: ms since the epoch or an ISO time (default: any)")
    p.add_argument("--max", type=_positive, default=32,
                   help="most messages (default 32; a key query returns at most 64, max_msgs_num_batch)")
    p.add_argument("--body", choices=("text", "hex", "none"), default="text", help="how bodies print (default text)")
    p = command("export", "a topic's messages (a queue or every queue, an offset or time range) to JSON lines or Parquet",
                reads=True)
    p.add_argument("topic", help="topic name")
    p.add_argument("--queue", type=_non_negative, default=None, help="one queue (default: every queue of the topic)")
    p.add_argument("--from-offset", type=_non_negative, default=None, help="first queue offset (default: each queue's min)")
    p.add_argument("--to-offset", type=_non_negative, default=None, help="end queue offset, exclusive (default: each queue's max)")
    p.add_argument("--begin", type=_time_ms, default=None, help="stored at or after: ms since the epoch or an ISO time")
    p.add_argument("--end", type=_time_ms, default=None, help="stored at or before: ms since the epoch or an ISO time")
    p.add_argument("--format", choices=("jsonl", "parquet"), required=True, help="jsonl: one JSON object per line; parquet: the message table")
    p.add_argument("--out", required=True, help="the file to write (replaced if it exists)")
    p.add_argument("--body", choices=("text", "hex", "none"), default="text", help="how bodies are written in jsonl (default text)")
    p = command("reset-offset", "set a consumer group's offsets to the earliest, the latest, or a time (mqadmin resetOffsetByTime)")
    p.add_argument("group", help="consumer group")
    p.add_argument("topic", help="topic name")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--earliest", action="store_true", help="each queue's first offset")
    g.add_argument("--latest", action="store_true", help="each queue's end (skip everything stored)")
    g.add_argument("--timestamp", type=_time_ms, help="the first message stored at or after: ms since the epoch or an ISO time")
    p.add_argument("--queue", type=_non_negative, default=None, help="one queue (default: every queue of the topic)")
    p = command("lag", "committed offsets against the queues' ends, per group", aliases=("consumer-progress",), reads=True)
    p.add_argument("group", nargs="?", default=None, help="one consumer group (default: every group)")
    command("verify", "check every record (CRCs, header values, queue density) and every unit; read-only", reads=True)
    p = command("recover", "open the store with repair: damaged data is cut and what follows is rebuilt")
    p.add_argument("--repair", action="store_true", required=True, help="required: this command changes the store")
    command("dispatch", "build consume-queue units for records not yet dispatched")
    p = command("schedule", "deliver delayed messages that are due (one pass, or passes every second)")
    p.add_argument("--once", action="store_true", help="one pass, then exit (default: a pass every second until interrupted)")
    p = command("clean", "one retention pass: delete expired segments and what follows them")
    p.add_argument("--force", action="store_true", help="at any hour, not only those of delete_when")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cmd = "lag" if args.cmd == "consumer-progress" else args.cmd
    if cmd == "get" and args.id is not None and not _is_message_id(args.id):
        _error(f"not a message id: {args.id!r} (an offset msgId or a client msgId: 32 or 56 hex digits)")
        return 2
    if cmd == "query" and args.id is not None and not is_uniq_key(args.id):
        _error(f"not a client msgId: {args.id!r} (32 or 56 hex digits)")
        return 2
    if cmd == "query" and args.topic == "*" and (args.key is not None or args.id is not None):
        _error('a key or msgId query names one topic ("*" is for a time range)')
        return 2
    try:
        # never creates a store. Opening one that no other process holds recovers it (the
        # first opener does: a crashed store, or records not yet dispatched); --read-only
        # reads it as it is instead and writes nothing
        read_only = getattr(args, "read_only", False)
        with MessageStore.open(args.root, create=False, repair=cmd == "recover", read_only=read_only) as s:
            if cmd == "info":
                return _info(s, args.json)
            if cmd == "topic-status":
                return _topic_status(s, args.topic, args.json)
            if cmd == "verify":
                return _verify(s, args.json)
            if cmd == "recover":
                return _recover(s, args.json)
            if cmd == "dispatch":
                n = s.dispatch()
                _emit({"dispatched": n}, args.json, [f"dispatched {n} records"])
                return 0
            if cmd == "clean":
                return _clean(s, args.force, args.json)
            if cmd == "schedule":
                return _schedule(s, args.once, args.json)
            if cmd == "lag":
                return _lag(s, args.group, args.json)
            if cmd == "query":
                return _query(s, args)
            if cmd == "export":
                return _export(s, args)
            if cmd == "reset-offset":
                return _reset_offset(s, args)
            if cmd == "get":
                row = s.message_by_offset(args.offset) if args.offset is not None else s.message_by_id(args.id)
                if row is None:
                    _error("no message there")
                    return 1
                _print_rows([row], args.body)
                return 0
            # read
            offset = args.offset if args.offset is not None else s.min_offset(args.topic, args.queue)
            res = s.get_messages("rmqlog_cli", args.topic, args.queue, offset, max_count=args.count, tags=args.tags)
            _print_rows(res.messages.to_pylist(), args.body)
            sys.stdout.flush()
            print(f"# {res.status.name} next={res.next_begin_offset} min={res.min_offset} max={res.max_offset}", file=sys.stderr)
            return 0 if res.messages.num_rows else 1
    except StoreError as exc:
        _error(str(exc))
        return 2
    except OSError as exc:  # an --out that cannot be written
        _error(f"{exc.strerror or exc}: {exc.filename}")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
