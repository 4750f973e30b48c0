"""``rmqlog``: inspect and maintain a store from a terminal.

    rmqlog info ROOT                          segments, published tail, topics and queue ranges
    rmqlog topic-status ROOT TOPIC            one topic's queues: min, max, messages
    rmqlog read ROOT TOPIC QUEUE [--offset N] [--count N] [--tags "A || B"] [--body text|hex|none]
    rmqlog get ROOT (--offset N | --id MSGID) one message by commitlog offset, offset msgId or
                                              client msgId (UNIQ_KEY, through the index files)
    rmqlog query ROOT TOPIC [--key K | --id MSGID] [--begin T] [--end T] [--max N]
                                              messages by key / msgId (a client msgId through the
                                              index files, else an offset msgId), or by store
                                              time (TOPIC "*": every topic); none: said, exit 1
    rmqlog export ROOT TOPIC --format jsonl|parquet --out PATH|- [--queue Q] [--from-offset N]
                  [--to-offset N] [--begin T] [--end T]   a topic's messages to a file or stdout
    rmqlog reset-offset ROOT GROUP TOPIC (--earliest | --latest | --timestamp T) [--queue Q] [--create]
                                              a group's committed offsets set (mqadmin resetOffsetByTime)
    rmqlog lag ROOT [GROUP]                   committed offsets against the queues' ends (all
    rmqlog consumer-progress ROOT [GROUP]     groups without GROUP; the second name is mqadmin's)
    rmqlog verify ROOT                        check every record and unit (read-only)
    rmqlog recover ROOT --repair              open with repair: cut damage, rebuild what follows
    rmqlog dispatch ROOT                      build consume-queue units for new records
    rmqlog schedule ROOT [--once]             deliver due delayed and timed messages
    rmqlog clean ROOT [--force]               one retention pass
    rmqlog dlq ROOT GROUP [--offset N] [--count N]
                                              a group's dead letters (%DLQ%GROUP) as JSON lines
    rmqlog dlq-resend ROOT GROUP [--offset N] [--count N] [--dry-run]
                                              re-send them to the topics they were first sent to

Every command takes ``--json`` (one JSON object, camelCase keys) and ``--config FILE`` (a
RocketMQ broker.conf: the store's settings, e.g. the retention rules ``clean`` applies); the
reading ones (info, topic-status, read, get, query, export, lag, verify, dlq) take ``--read-only``
(nothing in the store changes, not even by opening it); those of :data:`WIRE_READING` name
``--namesrv`` in their help (the ``rmqlog`` entry point serves them over the wire, and lists its
network commands in ``rmqlog --help`` through ``main(extra_commands=)``). Every value is
parsed by :mod:`rmqlog.values` (exactly valid or refused, exit 2). Messages print one JSON object per
line (:mod:`rmqlog.admin.jsonl`), so the output pipes into ``jq``. Times are ms since the
epoch or ISO 8601, and a time without a zone is UTC (:mod:`rmqlog.times`).

Only an existing store is opened (never created), and no command writes inside the store it
reads: an output path inside the root, links resolved, is refused before anything is opened
(:mod:`rmqlog.admin.outpath`). A wrong topic, queue or group gets one message naming the
known ones, with the same exit status in every command. Exit statuses
(:mod:`rmqlog.admin.exits`): 0 done, 1 nothing found or problems found, 2 what was asked is
wrong, 3 the store cannot do it. The commands live in :mod:`rmqlog.admin.reading`,
:mod:`rmqlog.admin.changing`, :mod:`rmqlog.admin.export` and :mod:`rmqlog.admin.dead_letters`; this module holds the
arguments
(argparse: help for every subcommand and argument) and the dispatch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ..config import StoreConfig
from ..errors import InvalidArgumentError, StoreError
from ..log.msgid import is_uniq_key, parse_offset_msg_id
from ..message_store import MessageStore
from ..times import parse_time_ms
from ..values import arg_type, parse_int
from . import changing, dead_letters, reading
from .exits import HELP, STORE, CliError, code_for
from .outpath import check_outside, open_output
from .render import ArgumentParser, emit, error


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spark-rmq")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _is_message_id(msg_id: str) -> bool:
    return parse_offset_msg_id(msg_id) is not None or is_uniq_key(msg_id)


#: a count of at least 1, and an offset, a queue id or a count from 0 (rmqlog.values: ASCII
#: digits only, so "1_0", " 5" and "٥" are refused as argparse's error, exit 2)
_positive = arg_type(parse_int, 1)
_non_negative = arg_type(parse_int, 0)


def _time(text: str) -> int:
    """A time argument: :func:`rmqlog.times.parse_time_ms` (no zone: UTC)."""
    try:
        return parse_time_ms(text)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("time: ")) from None


#: the reading commands the ``rmqlog`` command also serves over the wire, given ``--namesrv``
#: (by the network package, which the store never imports: their help names the option)
WIRE_READING = ("info", "topic-status", "read", "get", "query", "lag", "dlq")


def _parser(extra_commands: Sequence[tuple[str, str]] = ()) -> argparse.ArgumentParser:
    """The command's arguments; ``extra_commands`` (name, help) are listed with the others in
    ``--help`` (the commands another package serves: the ``rmqlog`` entry point's network
    commands) and parse as nothing more than their name."""
    ap = ArgumentParser(
        prog="rmqlog",
        description="Inspect and maintain a spark-rmq (RocketMQ-format) store. "
        "Times are ms since the epoch or ISO 8601; a time without a zone is UTC.",
        epilog=HELP,
    )
    ap.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def command(
        name: str, help: str, *, aliases: Sequence[str] = (), json_flag: bool = True, reads: bool = False
    ) -> argparse.ArgumentParser:
        # help= is %-formatted by argparse (a literal % written %%), description= is not
        p = sub.add_parser(name, help=help, description=help.replace("%%", "%"), aliases=list(aliases), epilog=HELP)
        p.add_argument("root", help="the store's folder (the one holding commitlog/)")
        if name in WIRE_READING:
            p.add_argument(
                "--namesrv",
                metavar="ADDRS",
                default=None,
                help="read through these name servers (HOST:PORT;HOST:PORT) and their brokers instead "
                f"of a store's folder: ROOT is then not given (rmqlog {name} --namesrv ADDRS --help)",
            )
        p.add_argument(
            "--config",
            metavar="FILE",
            default=None,
            help="a RocketMQ broker.conf (Java properties) with the store's settings, e.g. the retention "
            "rules clean applies (default: the defaults of rmqlog.StoreConfig)",
        )
        if json_flag:
            p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        if reads:
            p.add_argument(
                "--read-only",
                action="store_true",
                help="change nothing, not even by opening: no recovery, no dispatch, no file created "
                "(the store as it is on disk; works on a read-only mount)",
            )
        return p

    command("info", "segments, published and flushed positions, topics and their queue ranges", reads=True)
    p = command("topic-status", "one topic's queues: min and max offsets, messages", reads=True)
    p.add_argument("topic", help="topic name")
    p = command(
        "read", "messages of one queue as JSON lines (--json: one object, with the status and next offset)", reads=True
    )
    p.add_argument("topic", help="topic name")
    p.add_argument("queue", type=_non_negative, help="queue id")
    p.add_argument("--offset", type=_non_negative, default=None, help="first queue offset (default: the queue's min)")
    p.add_argument("--count", type=_positive, default=10, help="most messages to print (at least 1; default 10)")
    p.add_argument("--tags", default="*", help='tag filter, RocketMQ syntax: "*" or "A || B" (default "*")')
    p.add_argument("--body", choices=("text", "hex", "none"), default="text", help="how bodies print (default text)")
    p = command("get", "one message by commitlog offset or message id, as a JSON line", reads=True)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--offset", type=_non_negative, help="the message's commitlog offset")
    g.add_argument(
        "--id",
        help="a msgId: an offset msgId (store host and commitlog offset) or a client msgId "
        "(UNIQ_KEY, found through the index files)",
    )
    p.add_argument("--body", choices=("text", "hex", "none"), default="text", help="how the body prints (default text)")
    p = command(
        "query",
        "messages by key or client msgId through the index files (mqadmin queryMsgByKey / "
        "queryMsgByUniqueKey), or by store time (neither --key nor --id)",
        reads=True,
    )
    p.add_argument("topic", help='topic name; "*" for every topic (a time-range query)')
    g = p.add_mutually_exclusive_group()
    g.add_argument("--key", help="a KEYS token (or a client msgId)")
    g.add_argument(
        "--id",
        help="a msgId: a client msgId (UNIQ_KEY: 32 or 56 hex digits, through the index files) "
        "or an offset msgId (store host and commitlog offset, as ali-ons prints it)",
    )
    p.add_argument(
        "--begin",
        type=_time,
        default=0,
        help="stored at or after: ms since the epoch or ISO 8601, no zone: UTC (default: any)",
    )
    p.add_argument(
        "--end",
        type=_time,
        default=None,
        help="stored at or before: ms since the epoch or ISO 8601, no zone: UTC (default: any)",
    )
    p.add_argument(
        "--max",
        type=_positive,
        default=32,
        help="most messages (default 32; a key query returns at most 64, max_msgs_num_batch)",
    )
    p.add_argument("--body", choices=("text", "hex", "none"), default="text", help="how bodies print (default text)")
    p = command(
        "export",
        "a topic's messages (a queue or every queue, an offset or time range) to JSON lines or Parquet",
        reads=True,
    )
    p.add_argument("topic", help="topic name")
    p.add_argument("--queue", type=_non_negative, default=None, help="one queue (default: every queue of the topic)")
    p.add_argument(
        "--from-offset", type=_non_negative, default=None, help="first queue offset (default: each queue's min)"
    )
    p.add_argument(
        "--to-offset", type=_non_negative, default=None, help="end queue offset, exclusive (default: each queue's max)"
    )
    p.add_argument(
        "--begin", type=_time, default=None, help="stored at or after: ms since the epoch or ISO 8601, no zone: UTC"
    )
    p.add_argument(
        "--end", type=_time, default=None, help="stored at or before: ms since the epoch or ISO 8601, no zone: UTC"
    )
    p.add_argument(
        "--format",
        choices=("jsonl", "parquet"),
        required=True,
        help="jsonl: one JSON object per line; parquet: the message table",
    )
    p.add_argument(
        "--out",
        required=True,
        help="the file to write (replaced if it exists; - for stdout); never inside the store, links resolved",
    )
    p.add_argument(
        "--body", choices=("text", "hex", "none"), default="text", help="how bodies are written in jsonl (default text)"
    )
    p = command(
        "reset-offset",
        "set a consumer group's offsets to the earliest, the latest, or a time (mqadmin resetOffsetByTime)",
    )
    p.add_argument("group", help="consumer group")
    p.add_argument("topic", help="topic name")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--earliest", action="store_true", help="each queue's first offset")
    g.add_argument("--latest", action="store_true", help="each queue's end (skip everything stored)")
    g.add_argument(
        "--timestamp",
        type=_time,
        help="the first message stored at or after: ms since the epoch or ISO 8601, no zone: UTC",
    )
    p.add_argument("--queue", type=_non_negative, default=None, help="one queue (default: every queue of the topic)")
    p.add_argument(
        "--create",
        action="store_true",
        help="the group may be new (without it, a group with no committed offset is refused: a misspelt name)",
    )
    p = command(
        "lag", "committed offsets against the queues' ends, per group", aliases=("consumer-progress",), reads=True
    )
    p.add_argument("group", nargs="?", default=None, help="one consumer group (default: every group)")
    command("verify", "check every record (CRCs, header values, queue density) and every unit; read-only", reads=True)
    p = command("recover", "open the store with repair: damaged data is cut and what follows is rebuilt")
    p.add_argument("--repair", action="store_true", required=True, help="required: this command changes the store")
    command("dispatch", "build consume-queue units for records not yet dispatched")
    p = command("schedule", "deliver delayed and timed messages that are due (one pass, or passes every second)")
    p.add_argument(
        "--once",
        action="store_true",
        help="one pass, then exit (default: a pass every second until interrupted, printing what is "
        "delivered and a summary a minute while nothing is)",
    )
    p = command("clean", "one retention pass: delete expired segments and what follows them")
    p.add_argument("--force", action="store_true", help="at any hour, not only those of delete_when")
    dead_letters.add_commands(command, _non_negative, _positive)
    for name, help in extra_commands:
        sub.add_parser(name, help=help, description=help.replace("%%", "%"))
    return ap


def _export(s: MessageStore, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .export import ExportRange, export, plan, total

    reading.require_queue(s, args.topic, args.queue)
    r = ExportRange(
        args.topic, None if args.queue is None else [args.queue], args.from_offset, args.to_offset, args.begin, args.end
    )
    with (
        tqdm(
            total=total(plan(s, r)),
            unit="msg",
            file=sys.stderr,
            disable=not sys.stderr.isatty(),
            desc=f"export {args.topic}",
        ) as bar,
        open_output(args.out, s.paths.root) as out,
    ):
        n = export(s, r, out, args.format, body=args.body, progress=bar.update)
    shown = "stdout" if args.out == "-" else args.out
    report = {"exported": n, "out": args.out, "format": args.format}
    if args.out == "-":  # the data went to stdout: the summary goes to stderr
        if args.json or not n:
            error(f"exported {n} message(s) of {args.topic} to stdout ({args.format})")
    else:
        emit(report, args.json, [f"exported {n} message(s) of {args.topic} to {shown} ({args.format})"])
    return 0 if n else 1


COMMANDS: dict[str, Callable[[MessageStore, argparse.Namespace], int]] = {
    "info": reading.info,
    "topic-status": reading.topic_status,
    "read": reading.read,
    "get": reading.get,
    "query": reading.query,
    "lag": reading.lag,
    "verify": reading.verify,
    "export": _export,
    "recover": changing.recover,
    "dispatch": changing.dispatch,
    "schedule": changing.schedule,
    "clean": changing.clean,
    "reset-offset": changing.reset_offset,
    "dlq": dead_letters.dead_letters,
    "dlq-resend": dead_letters.resend,
}


def _check(cmd: str, args: argparse.Namespace) -> None:
    """What can be refused before the store is opened."""
    if cmd == "get" and args.id is not None and not _is_message_id(args.id):
        raise CliError(f"not a message id: {args.id!r} (an offset msgId or a client msgId: 32 or 56 hex digits)")
    if cmd == "query" and args.id is not None and not _is_message_id(args.id):
        raise CliError(
            f"not a message id: {args.id!r} (an offset msgId, as ali-ons and RocketMQ's send results print "
            "it, or a client msgId: 32 or 56 hex digits)"
        )
    if cmd == "query" and args.topic == "*" and (args.key is not None or args.id is not None):
        raise CliError('a key or msgId query names one topic ("*" is for a time range)')
    if cmd == "export":
        check_outside(args.out, args.root)  # before the store is opened (and recovered) at all


def main(argv: Sequence[str] | None = None, *, extra_commands: Sequence[tuple[str, str]] = ()) -> int:
    """The store's commands (``argv``: the arguments after ``rmqlog``); ``extra_commands``:
    (name, help) of commands the caller serves itself, listed in ``--help``. The exit status."""
    args = _parser(extra_commands).parse_args(argv)
    if getattr(args, "namesrv", None) is not None:  # only when reached without the network package
        error("--namesrv is served by the rmqlog command (pip's entry point, rmqnet.cli), not by python -m rmqlog")
        return 2
    cmd = {"consumer-progress": "lag", "dead-letters": "dlq"}.get(args.cmd, args.cmd)
    try:
        _check(cmd, args)
        config = StoreConfig.from_properties(args.config) if args.config is not None else None
        # never creates a store. Opening one that no other process holds recovers it (the
        # first opener does: a crashed store, or records not yet dispatched); --read-only
        # reads it as it is instead and writes nothing
        read_only = getattr(args, "read_only", False)
        with MessageStore.open(args.root, config, create=False, repair=cmd == "recover", read_only=read_only) as s:
            return COMMANDS[cmd](s, args)
    except CliError as exc:
        error(str(exc))
        return exc.code
    except StoreError as exc:
        error(str(exc))
        return code_for(exc)
    except BrokenPipeError:  # the reader went away (| head): not an error of ours
        return 0
    except OSError as exc:  # an --out that cannot be written, an I/O error
        error(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        return STORE


if __name__ == "__main__":
    raise SystemExit(main())
