"""``rmqlog``: inspect a store from a terminal.

    rmqlog info ROOT                          segments, published tail, topics and queue ranges
    rmqlog read ROOT TOPIC QUEUE [--offset N] [--count N] [--tags "A || B"] [--body text|hex|none]
    rmqlog get ROOT (--offset N | --id MSGID) one message by commitlog offset or offset msgId
    rmqlog lag ROOT GROUP                     a group's committed offsets against the queues' ends
    rmqlog dispatch ROOT                      build consume-queue units for new records
    rmqlog clean ROOT [--force] [--json]      one retention pass (--force: at any hour, as
                                              RocketMQ's manual deletion; ages still apply)

Messages print one JSON object per line (bodies as UTF-8 text with replacement characters by
default), so the output pipes into ``jq``. Only an existing store is opened (a folder without
``commitlog/`` or ``config/`` is refused, never initialized); reading adds no message and
commits no offset. Exit status: 0 ok, 1 nothing found, 2 bad arguments or a store error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import StoreError
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


def _info(s: MessageStore) -> int:
    starts = s.commitlog.segments.segment_starts()
    print(f"store        {s.paths.root}")
    print(f"segments     {len(starts)} x {s.commitlog.segment_size:,} B"
          + (f"  (first {starts[0]:020d}, last {starts[-1]:020d})" if starts else ""))
    print(f"commitlog    min {s.commitlog.min_offset():,}  published tail {s.published_tail():,}")
    topics = s.topics()
    print(f"topics       {len(topics)}")
    for name in sorted(topics):
        tc = topics[name]
        ranges = [f"{q}:[{s.min_offset(name, q)},{s.max_offset(name, q)})" for q in range(tc.read_queue_nums)]
        print(f"  {name:<24} queues {tc.write_queue_nums}  " + " ".join(ranges))
    return 0


def _lag(s: MessageStore, group: str) -> int:
    topics = s.topics()
    found = False
    for name in sorted(topics):
        for q in range(topics[name].read_queue_nums):
            committed = s.committed_offset(group, name, q)
            if committed < 0:
                continue
            found = True
            hi = s.max_offset(name, q)
            print(f"{name}/{q}  committed {committed}  max {hi}  lag {max(0, hi - committed)}")
    return 0 if found else 1


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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rmqlog", description="Inspect a spark-rmq (RocketMQ-format) store.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("info", help="segments, tail, topics and queue ranges")
    p.add_argument("root")
    p = sub.add_parser("read", help="messages of one queue as JSON lines")
    p.add_argument("root")
    p.add_argument("topic")
    p.add_argument("queue", type=int)
    p.add_argument("--offset", type=int, default=None, help="first queue offset (default: the queue's min)")
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--tags", default="*")
    p.add_argument("--body", choices=("text", "hex", "none"), default="text")
    p = sub.add_parser("get", help="one message by commitlog offset or msgId")
    p.add_argument("root")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--offset", type=int)
    g.add_argument("--id")
    p.add_argument("--body", choices=("text", "hex", "none"), default="text")
    p = sub.add_parser("lag", help="a consumer group's committed offsets and lag")
    p.add_argument("root")
    p.add_argument("group")
    p = sub.add_parser("dispatch", help="build consume-queue units for new records")
    p.add_argument("root")
    p = sub.add_parser("clean", help="one retention pass: delete expired segments and what follows them")
    p.add_argument("root")
    p.add_argument("--force", action="store_true", help="at any hour, not only those of delete_when")
    p.add_argument("--json", action="store_true", help="print what was deleted as one JSON object")
    args = ap.parse_args(argv)

    try:
        with MessageStore.open(args.root, create=False) as s:  # never creates a store
            if args.cmd == "info":
                return _info(s)
            if args.cmd == "dispatch":
                print(f"dispatched {s.dispatch()} records")
                return 0
            if args.cmd == "clean":
                return _clean(s, args.force, args.json)
            if args.cmd == "lag":
                return _lag(s, args.group)
            if args.cmd == "get":
                row = s.message_by_offset(args.offset) if args.offset is not None else s.message_by_id(args.id)
                if row is None:
                    print("rmqlog: no message there", file=sys.stderr)
                    return 1
                _print_rows([row], args.body)
                return 0
            # read
            offset = args.offset if args.offset is not None else s.min_offset(args.topic, args.queue)
            res = s.get_messages("rmqlog_cli", args.topic, args.queue, offset, max_count=max(1, args.count), tags=args.tags)
            _print_rows(res.messages.to_pylist(), args.body)
            print(f"# {res.status.name} next={res.next_begin_offset} min={res.min_offset} max={res.max_offset}", file=sys.stderr)
            return 0 if res.messages.num_rows else 1
    except StoreError as exc:
        print(f"rmqlog: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
