"""``rmqlog dlq`` and ``rmqlog dlq-resend``: a consumer group's dead letters (``%DLQ%<group>``,
where the broker's CONSUMER_SEND_MSG_BACK puts a message past its ``maxReconsumeTimes``).

    rmqlog dlq ROOT GROUP [--offset N] [--count N] [--body text|hex|none] [--json]
        the dead letters as JSON lines (``properties`` hold ``RETRY_TOPIC``: the topic it was
        first sent to, ``ORIGIN_MESSAGE_ID``: its first msgId; ``reconsumeTimes``: deliveries
        it failed); a summary by original topic on stderr (``--json``: in the object)
    rmqlog dlq-resend ROOT GROUP [--offset N] [--count N] [--dry-run] [--json]
        each one sent again to its original topic as a new message (``reconsumeTimes`` 0, any
        queue; body, flag, tags, keys, ``UNIQ_KEY``, ``ORIGIN_MESSAGE_ID`` and the user's
        properties kept; the retry's and the delay's dropped: :func:`rmqlog.log.send_back.resend_table`)

Re-sending is idempotent per group: the put is the store's idempotent put with writer
``rmqlog-dlq-resend/<group>`` and, as sequence, the dead-letter queue offset of the last one
re-sent; a later run starts after that offset (what was re-sent is never re-sent, even after a
crash between the put and the answer), so re-send in offset order. A dead letter without
``RETRY_TOPIC`` (sent to the topic by a client, not by a send-back) is reported and skipped.
Exit statuses: 0 done, 1 no dead letter in the range, 2 a bad group or range, 3 the store
cannot do it (a topic that no longer exists, a full disk).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from ..errors import InvalidGroupError
from ..log.send_back import resend_table
from ..message_store import MessageStore
from ..paths import validate_group
from .exits import NOTHING, OK, USAGE, CliError
from .render import emit, messages

DLQ_PREFIX = "%DLQ%"
RESEND_WRITER = "rmqlog-dlq-resend/"


def _range(s: MessageStore, args: argparse.Namespace) -> tuple[str, int, int]:
    """(the DLQ topic, first queue offset, end offset) of the command's range."""
    try:
        validate_group(args.group)
    except InvalidGroupError as exc:
        raise CliError(str(exc), USAGE) from None
    topic = DLQ_PREFIX + args.group
    if topic not in s.topics():
        dead = sorted(t[len(DLQ_PREFIX) :] for t in s.topics() if t.startswith(DLQ_PREFIX))
        raise CliError(
            f"group {args.group!r} has no dead letters in {s.paths.root} (no topic {topic}); "
            f"groups with dead letters: {', '.join(dead) or 'none'}",
            USAGE,
        )
    lo, hi = s.min_offset(topic, 0), s.max_offset(topic, 0)
    start = lo if args.offset is None else max(lo, args.offset)
    return topic, start, min(hi, start + args.count)


def _origins(table: object) -> dict[str, int]:
    props = table.column("properties").to_pylist()  # type: ignore[attr-defined]
    return dict(Counter(dict(p).get("RETRY_TOPIC", "?") for p in props))


def dead_letters(s: MessageStore, args: argparse.Namespace) -> int:
    topic, start, end = _range(s, args)
    table = s.read_queue(topic, 0, start, end) if end > start else s.read_queue(topic, 0, start, start)
    origins = _origins(table)
    messages(
        table, args.body, args.json, group=args.group, topic=topic, fromOffset=start, toOffset=end, origins=origins
    )
    if not args.json:
        where = ", ".join(f"{t}: {n}" for t, n in sorted(origins.items())) or "none"
        print(
            f"# {table.num_rows} dead letter(s) of {args.group} at {topic} offsets {start}..{end} "
            f"(of {s.min_offset(topic, 0)}..{s.max_offset(topic, 0)}); first sent to: {where}",
            file=sys.stderr,
        )
    return OK if table.num_rows else NOTHING


def resend(s: MessageStore, args: argparse.Namespace) -> int:
    topic, start, end = _range(s, args)
    writer = RESEND_WRITER + args.group
    done = s.writer_sequence(writer)
    skipped_done = 0
    if done is not None and start <= done:
        skipped_done = min(end, done + 1) - start
        start = min(end, done + 1)
    units = s.read_queue(topic, 0, start, end) if end > start else None
    if units is None or units.num_rows == 0:
        emit(
            {"group": args.group, "resent": 0, "alreadyResent": skipped_done, "noOrigin": 0, "topics": {}},
            args.json,
            [f"nothing to re-send for {args.group} ({skipped_done} already re-sent)"],
        )
        return NOTHING
    records, found = s.wire.wire_records(units.column("commitLogOffset").to_numpy())
    table, has = resend_table(records)
    no_origin = units.column("queueOffset").to_numpy()[found][~has].tolist()
    topics = dict(Counter(table.column("topic").to_pylist()))
    last = int(units.column("queueOffset")[units.num_rows - 1].as_py())
    if not args.dry_run and table.num_rows:
        s.wire.put_wire(table, writer=writer, sequence=last)
    report = {
        "group": args.group,
        "resent": table.num_rows,
        "dryRun": bool(args.dry_run),
        "fromOffset": start,
        "toOffset": last + 1,
        "alreadyResent": skipped_done,
        "noOrigin": len(no_origin),
        "topics": topics,
    }
    verb = "would re-send" if args.dry_run else "re-sent"
    lines = [
        f"{verb} {table.num_rows} dead letter(s) of {args.group} (offsets {start}..{last + 1}): "
        + (", ".join(f"{t}: {n}" for t, n in sorted(topics.items())) or "none")
    ]
    if skipped_done:
        lines.append(f"{skipped_done} already re-sent before (offsets below {start})")
    if no_origin:
        lines.append(f"skipped {len(no_origin)} without RETRY_TOPIC (queue offsets {no_origin[:10]})")
    emit(report, args.json, lines)
    return OK if table.num_rows else NOTHING


def add_commands(command: object, non_negative: object, positive: object) -> None:
    """Add ``dlq`` and ``dlq-resend`` through the CLI's ``command(name, help, ...)`` helper."""
    p = command(
        "dlq",
        "a consumer group's dead letters (%%DLQ%%GROUP) as JSON lines",
        aliases=("dead-letters",),  # type: ignore[operator]
        reads=True,
    )
    p.add_argument("group", help="consumer group")
    p.add_argument("--offset", type=non_negative, default=None, help="first queue offset (default: the first)")
    p.add_argument("--count", type=positive, default=10, help="most messages (default 10)")
    p.add_argument("--body", choices=("text", "hex", "none"), default="text", help="how bodies print (default text)")
    p = command("dlq-resend", "send a group's dead letters again to the topics they were first sent to")  # type: ignore[operator]
    p.add_argument("group", help="consumer group")
    p.add_argument(
        "--offset", type=non_negative, default=None, help="first queue offset (default: the first not re-sent)"
    )
    p.add_argument("--count", type=positive, default=1000, help="most messages (default 1000)")
    p.add_argument("--dry-run", action="store_true", help="say what would be re-sent, change nothing")
