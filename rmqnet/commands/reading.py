"""The ``rmqlog`` reading commands over the wire: ``info``, ``topic-status``, ``lag`` (and its
other name ``consumer-progress``), ``read``, ``get``, ``query`` and ``dlq`` given ``--namesrv
HOST:PORT[;HOST:PORT]`` in place of a store root, answered by the name server and the brokers
it routes to (our :class:`~rmqnet.client.Admin`), so they work from any host that reaches the
cluster, across every broker group.

    rmqlog info --namesrv ADDRS                 clusters, brokers, every topic's queues per broker
    rmqlog topic-status --namesrv ADDRS TOPIC   a topic's queues on every broker: min, max, messages
    rmqlog lag --namesrv ADDRS GROUP [--topic T ...]
                                                a group's committed offsets against the queues' ends
    rmqlog read --namesrv ADDRS TOPIC QUEUE [--broker NAME] [--offset N] [--count N] [--tags T] [--body B]
                                                a queue's messages (PULL_MESSAGE, no commit)
    rmqlog query --namesrv ADDRS TOPIC (--key K | --id MSGID) [--begin T] [--end T] [--max N] [--body B]
                                                messages by key or msgId on every broker (12, 33)
    rmqlog get --namesrv ADDRS --id MSGID [--topic TOPIC] [--body B]
                                                one message by msgId (33; a client msgId: 12, in TOPIC)
    rmqlog dlq --namesrv ADDRS GROUP [--offset N] [--count N] [--body B]
                                                a group's dead letters (%DLQ%GROUP queue 0) on every broker
    rmqlog pop-status --namesrv ADDRS --group G --topic T [--max N]
                                                a POP group's messages in flight (handed out, not acked)

Output, errors and exit statuses are the store's commands' (:mod:`rmqlog.admin.render`,
``--json``: one object, camelCase keys; :mod:`rmqlog.admin.exits`), with a queue named by
broker as well (``T/broker-a/0``: over the wire a queue id is per broker). Messages print
through the store's command's own function, one JSON object per line. ``read`` reports the
pull's status (FOUND, NO_NEW_MSG, NO_MATCHED_MSG, OFFSET_ILLEGAL: the client's names) where the
store reports its own; it needs ``--broker`` when the topic is on several brokers. ``query``
by store time (no key, or topic ``*``) is not served over the wire (RocketMQ has no such
request). An unknown topic is named with the known ones (2); a cluster that cannot be asked
exits 3 (:mod:`.failures`). The commands: :mod:`.reading_queues` (``info``, ``topic-status``,
``lag``, ``pop-status``) and :mod:`.reading_messages` (``read``, ``get``, ``query``, ``dlq``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from rmqlog.admin.exits import USAGE
from rmqlog.admin.render import ArgumentParser, error
from rmqlog.times import parse_time_ms
from rmqlog.values import arg_type, parse_int

from ..client import Admin
from ..remoting.address import address_arg, parse_addresses
from ..remoting.credentials import CredentialsError
from .failures import run
from .options import add_common, add_credentials, credentials_of, parse
from .reading_messages import dead_letters, get, query, read
from .reading_queues import info, lag, pop_status, topic_status


def _parser() -> ArgumentParser:
    ap = ArgumentParser(prog="rmqlog", description="The reading commands over the wire (--namesrv).")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument(
            "--namesrv",
            required=True,
            type=address_arg(parse_addresses, text=True),
            metavar="ADDRS",
            help="name servers, HOST:PORT;HOST:PORT",
        )
        add_common(p)
        add_credentials(p)
        return p

    command("info", "clusters, brokers, and every topic's queues on every broker")
    p = command("topic-status", "one topic's queues on every broker: min, max, messages")
    p.add_argument("topic", help="topic name")
    for name in ("lag", "consumer-progress"):
        p = command(name, "a group's committed offsets against the queues' ends")
        p.add_argument("group", help="consumer group")
        p.add_argument("--topic", action="append", default=None, help="a topic (repeatable; default: every topic)")
    p = command("read", "messages of one queue from an offset (a pull; nothing committed)")
    p.add_argument("topic", help="topic name")
    p.add_argument("queue", type=_count(0), help="queue id")
    p.add_argument("--broker", default=None, help="the queue's broker (needed when the topic is on several)")
    p.add_argument("--offset", type=_count(0), default=None, help="first queue offset (default: the queue's min)")
    p.add_argument("--count", type=_count(1), default=10, help="most messages to print (default 10)")
    p.add_argument("--tags", default="*", help='tag filter: "*" or "A || B" (default "*")')
    p.add_argument("--body", choices=("text", "hex", "none"), default="text", help="how bodies print (default text)")
    p = command("query", "messages by key or client msgId, from every broker of the topic")
    p.add_argument("topic", help="topic name")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--key", help="a KEYS token")
    g.add_argument("--id", help="a client msgId (UNIQ_KEY) or an offset msgId (as ali-ons prints it)")
    p.add_argument("--begin", type=_time, default=0, help="stored at or after: ms since the epoch or ISO 8601 (UTC)")
    p.add_argument("--end", type=_time, default=None, help="stored at or before: ms since the epoch or ISO 8601 (UTC)")
    p.add_argument("--max", type=_count(1), default=32, help="most messages per broker (default 32)")
    p.add_argument("--body", choices=("text", "hex", "none"), default="text", help="how bodies print (default text)")
    p = command(
        "get",
        "one message by msgId: an offset msgId from the broker it names (VIEW_MESSAGE_BY_ID), "
        "or a client msgId in --topic's index",
    )
    p.add_argument(
        "--id",
        required=True,
        help="an offset msgId (as a send's result and ali-ons print it) or a client msgId (UNIQ_KEY; needs --topic)",
    )
    p.add_argument("--topic", default=None, help="the message's topic (needed for a client msgId)")
    p.add_argument("--body", choices=("text", "hex", "none"), default="text", help="how the body prints (default text)")
    for name in ("dlq", "dead-letters"):
        p = command(name, "a consumer group's dead letters (%DLQ%GROUP) on every broker")
        p.add_argument("group", help="consumer group")
        p.add_argument("--offset", type=_count(0), default=None, help="first queue offset (default: each broker's min)")
        p.add_argument("--count", type=_count(1), default=10, help="most messages per broker (default 10)")
        p.add_argument(
            "--body", choices=("text", "hex", "none"), default="text", help="how bodies print (default text)"
        )
    p = command("pop-status", "a POP group's messages of a topic handed out and not acked, on every broker")
    p.add_argument("--group", required=True, help="consumer group")
    p.add_argument("--topic", required=True, help="topic name (its POP retry topic included)")
    p.add_argument(
        "--max",
        type=arg_type(parse_int, 1, 10_000),
        default=1000,
        help="most messages listed per broker, 1..10000 (default 1000)",
    )
    return ap


def _count(low: int) -> Any:
    """An integer argument from ``low`` (:func:`rmqlog.values.parse_int`: ASCII digits only)."""
    return arg_type(parse_int, low)


def _time(text: str) -> int:
    try:
        return parse_time_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("time: ")) from None


HANDLERS = {
    "info": info,
    "topic-status": topic_status,
    "lag": lag,
    "consumer-progress": lag,
    "read": read,
    "get": get,
    "query": query,
    "dlq": dead_letters,
    "dead-letters": dead_letters,
    "pop-status": pop_status,
}


def main(argv: Sequence[str]) -> int:
    """A reading command over the wire (``rmqnet.cli`` saw ``--namesrv``): its exit status."""
    args = parse(_parser(), argv)
    if isinstance(args, int):
        return args
    handler = HANDLERS[args.cmd]
    try:
        ak, sk = credentials_of(args)
        admin = Admin(args.namesrv, timeout_s=args.timeout, access_key=ak, secret_key=sk)
    except (ValueError, CredentialsError) as exc:
        error(str(exc))
        return USAGE
    try:
        return run(lambda: handler(admin, args), "the cluster")
    finally:
        admin.close()
