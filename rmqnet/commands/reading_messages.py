"""The reading commands over the wire that print messages (:mod:`.reading` holds their
arguments): ``read`` (a pull, nothing committed), ``get`` and ``query`` (by msgId or key),
``dlq`` (a group's dead letters). Messages print through the store command's
:func:`rmqlog.admin.render.messages`: the same lines as ``rmqlog read ROOT``.

``get`` and ``query --id`` take either kind of msgId: a client msgId (UNIQ_KEY) is looked up in
a topic's index on every broker of it (QUERY_MESSAGE, unique); an offset msgId (what a send's
result and ali-ons print, 32 hex digits as well) is asked of the broker whose address it holds
(VIEW_MESSAGE_BY_ID, 33). What finds nothing says why on stderr and exits 1.

``dlq`` (also ``dead-letters``) pulls ``%DLQ%<group>`` queue 0 on every broker of its route
(from ``--offset``, else each one's min offset) and prints the messages with a summary by
original topic (``RETRY_TOPIC``), as the store's ``dlq`` does. Re-sending dead letters
(``dlq-resend``) works on a store path only: a client's send cannot carry a stored record's
sysFlag (a compressed body), born time and host, which the store's own put keeps.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import pyarrow as pa

from rmqlog import MESSAGE_SCHEMA, is_uniq_key
from rmqlog.admin.exits import NOTHING, OK, CliError
from rmqlog.admin.render import error, messages

from ..client import Admin, BrokerError, ClientError, PullConsumer, parse_offset_msg_id
from ..remoting.names import dlq_topic
from .reading_queues import addressed, route_of


def _consumer(admin: Admin) -> PullConsumer:
    """A pull consumer of ``admin``'s name servers, timeout and credentials (it commits nothing)."""
    return PullConsumer(
        "rmqlog_cli",
        ";".join(admin.namesrv_addrs),
        timeout_s=admin.timeout_s,
        access_key=admin.credentials and admin.credentials[0],
        secret_key=admin.credentials and admin.credentials[1],
    )


def read(admin: Admin, args: argparse.Namespace) -> int:
    route = route_of(admin, args.topic)
    brokers = sorted(q.broker_name for q in route.queue_datas if args.queue < q.read_queue_nums)
    if args.broker is None and len(brokers) > 1:
        raise CliError(
            f"topic {args.topic!r} has queue {args.queue} on brokers {', '.join(brokers)}: name one (--broker)"
        )
    name = args.broker if args.broker is not None else (brokers[0] if brokers else None)
    if name not in brokers:
        raise CliError(
            f"queue {args.queue} of topic {args.topic!r} is on no broker named {name!r}; "
            f"brokers: {', '.join(brokers) or 'none'}"
        )
    if not addressed(route, name):
        raise CliError(f"broker {name!r} has no address in the route of {args.topic!r}")
    offset = args.offset if args.offset is not None else admin.min_offset(name, args.topic, args.queue)
    with _consumer(admin) as consumer:
        res = consumer.pull(args.topic, args.queue, offset, args.count, subscription=args.tags, broker_name=name)
    status = {
        "status": res.status,
        "nextOffset": res.next_begin_offset,
        "minOffset": res.min_offset,
        "maxOffset": res.max_offset,
    }
    messages(res.messages, args.body, args.json, **status)
    if not args.json:
        print(f"# {res.status} next={res.next_begin_offset} min={res.min_offset} max={res.max_offset}", file=sys.stderr)
    return OK if res.messages.num_rows else NOTHING


def query(admin: Admin, args: argparse.Namespace) -> int:
    if args.topic == "*":
        raise CliError('a query by store time ("*") is not served over the wire: name a topic and a key or msgId')
    route_of(admin, args.topic)
    if args.id is not None:
        table, why = _by_id(admin, args.id, args.topic, args.max, args.begin, args.end)
    else:
        end = args.end if args.end is not None else 2**63 - 1
        table = admin.query_by_key(args.topic, args.key, args.max, args.begin, end)
        why = f"no message with key {args.key!r} in topic {args.topic!r} on any broker (QUERY_MESSAGE, the index files)"
    messages(table, args.body, args.json)
    if not table.num_rows:
        error(why)
    return OK if table.num_rows else NOTHING


def get(admin: Admin, args: argparse.Namespace) -> int:
    if args.topic is not None:
        route_of(admin, args.topic)
    table, why = _by_id(admin, args.id, args.topic, 1, 0, None)
    messages(table.slice(0, 1), args.body, args.json)
    if not table.num_rows:
        error(why)
    return OK if table.num_rows else NOTHING


def _by_id(
    admin: Admin, msg_id: str, topic: str | None, max_num: int, begin: int, end: int | None
) -> tuple[pa.Table, str]:
    """The message of ``msg_id`` and, when there is none, why: a client msgId (UNIQ_KEY) asked
    of every broker of ``topic`` (QUERY_MESSAGE, unique), then an offset msgId (what a send's
    result and ali-ons print: the same 32 hex digits) asked of the broker whose address it
    holds (VIEW_MESSAGE_BY_ID, 33), kept only if it is a message of ``topic``."""
    try:
        addr, offset = parse_offset_msg_id(msg_id)
    except ValueError:
        if not is_uniq_key(msg_id):
            raise CliError(
                f"not a message id: {msg_id!r} (an offset msgId or a client msgId: 32 or 56 hex digits)"
            ) from None
        addr, offset = "", -1
    reasons = []
    if topic is not None and is_uniq_key(msg_id):
        table = admin.query_by_key(topic, msg_id, max_num, begin, end if end is not None else 2**63 - 1, unique=True)
        if table.num_rows:
            return table, ""
        reasons.append(f"no broker of topic {topic!r} indexes client msgId {msg_id}")
    elif topic is None:
        reasons.append("a client msgId is looked up in a topic's index: give --topic")
    if addr:
        try:
            table = admin.view_by_id(msg_id)
        except BrokerError as exc:
            reasons.append(
                f"as an offset msgId it names commitlog offset {offset} of the broker at {addr}, which answers: {exc}"
            )
        except (OSError, ClientError) as exc:
            reasons.append(f"as an offset msgId it names the broker at {addr}, which cannot be asked: {exc}")
        else:
            if topic is None or (table.num_rows and table.column("topic")[0].as_py() == topic):
                return table, ""
            reasons.append(
                f"as an offset msgId it is a message of topic {table.column('topic')[0].as_py()!r}, not of {topic!r}"
            )
    return MESSAGE_SCHEMA.empty_table(), f"no message with msgId {msg_id}: " + "; ".join(reasons)


def dead_letters(admin: Admin, args: argparse.Namespace) -> int:
    topic = dlq_topic(args.group)
    route = route_of(admin, topic)
    tables: list[pa.Table] = []
    with _consumer(admin) as consumer:
        for name in sorted({q.broker_name for q in route.queue_datas if q.read_queue_nums}):
            if not addressed(route, name):
                continue
            offset = args.offset if args.offset is not None else admin.min_offset(name, topic, 0)
            tables.append(consumer.pull(topic, 0, offset, args.count, broker_name=name).messages)
    table = pa.concat_tables(tables) if tables else MESSAGE_SCHEMA.empty_table()
    origins = (
        dict(Counter(dict(p).get("RETRY_TOPIC", "?") for p in table.column("properties").to_pylist()))
        if table.num_rows
        else {}
    )
    messages(table, args.body, args.json, group=args.group, topic=topic, origins=origins)
    if not args.json:
        where = ", ".join(f"{t}: {n}" for t, n in sorted(origins.items())) or "none"
        print(f"# {table.num_rows} dead letter(s) of {args.group}; first sent to: {where}", file=sys.stderr)
    return OK if table.num_rows else NOTHING
