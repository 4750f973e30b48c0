"""The ``rmqlog`` reading commands over the wire: ``info``, ``topic-status``, ``lag`` (and its
other name ``consumer-progress``), ``read``, ``get``, ``query`` and ``dlq`` given ``--namesrv HOST:PORT[;HOST:PORT]`` in
place of a
store root, answered by the name server and the brokers it routes to (our
:class:`~rmqnet.client.Admin`), so they work from any host that reaches the cluster, across
every broker group.

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

Output follows the store's commands (``--json``: one object, camelCase keys), with a queue
named by broker as well (``T/broker-a/0``: over the wire a queue id is per broker). Messages
print as the store's command prints them, one JSON object per line (:func:`message_line`:
``json.dumps`` of the row as ``rmqlog.admin.jsonl.row_dict`` makes it; a test compares both
outputs for the same records). ``read`` reports the pull's status (FOUND, NO_NEW_MSG,
NO_MATCHED_MSG, OFFSET_ILLEGAL: the client's names) where the store reports its own; it needs
``--broker`` when the topic is on several brokers. ``query`` by store time (no key, or topic
``*``) is not served over the wire (RocketMQ has no such request). Exit
statuses as the store's: 0 done, 1 nothing found, 2 what was asked is wrong (an unknown
topic, named with the known ones), 3 the cluster cannot be asked (no name server answers, a
broker fails).

``lag`` needs a GROUP here (the brokers do not list groups over the wire). Without ``--topic``
it asks every broker group (its master, else a slave) for the group's progress with
GET_CONSUME_STATS (208) and no topic: the topics the group has committed offsets of (RocketMQ's
``whichTopicByConsumer``; its retry topic among them), every queue of them with the broker's
end (a queue of such a topic the group never committed on counts from 0, as ``mqadmin
consumerProgress`` counts it). With ``--topic`` it reads each queue's offset with
QUERY_CONSUMER_OFFSET (14): a queue the group never committed on is left out where the broker
says so (QUERY_NOT_FOUND), but RocketMQ's brokers answer 0 for a queue that still starts at 0,
which then counts as committed 0.

``get`` and ``query --id`` take either kind of msgId: a client msgId (UNIQ_KEY) is looked up in
a topic's index on every broker of it (QUERY_MESSAGE, unique); an offset msgId (what a send's
result and ali-ons print, 32 hex digits as well) is asked of the broker whose address it holds
(VIEW_MESSAGE_BY_ID, 33). What finds nothing says why on stderr and exits 1.

``dlq`` (also ``dead-letters``) pulls ``%DLQ%<group>`` queue 0 on every broker of its route
(from ``--offset``, else each one's min offset) and prints the messages with a summary by
original topic (``RETRY_TOPIC``), as the store's ``dlq`` does. Re-sending dead letters
(``dlq-resend``) works on a store path only: a client's send cannot carry a stored record's
sysFlag (a compressed body), born time and host, which the store's own put keeps.

``pop-status`` (network only) asks the master of every broker group of the topic's route for
the POP group's messages of the topic (and its POP retry topic) handed out and not acked
(GET_POP_INFLIGHT, 200950, ours: RocketMQ counts them only in its metrics): per queue each
message's offset, how long ago it was handed out and in how long it is visible again (a
negative time: due, the broker hands it out again at its next revive round); ``--max`` per
broker (default 1000; the total is counted in full). Nothing in flight exits 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from rmqlog import MESSAGE_SCHEMA, is_uniq_key
from rmqlog.times import parse_time_ms
from rmqlog.values import arg_type, parse_int, parse_number

from .client import (
    Admin,
    BrokerError,
    ClientError,
    PullConsumer,
    TopicNotFoundError,
    parse_offset_msg_id,
)
from .remoting.address import address_arg, parse_addresses
from .remoting.credentials import CredentialsError
from .remoting.names import dlq_topic
from .remoting.route import TopicRouteData
from .wire_admin import add_credentials, credentials_of, refusal_text

#: the store command's exit statuses (rmqlog.admin.exits)
OK, NOTHING, USAGE, CANNOT = 0, 1, 2, 3
COMMANDS = (
    "info",
    "topic-status",
    "lag",
    "consumer-progress",
    "read",
    "get",
    "query",
    "dlq",
    "dead-letters",
    "pop-status",
)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rmqlog", description="The reading commands over the wire (--namesrv).")
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
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        p.add_argument(
            "--timeout",
            type=arg_type(parse_number, 0.001, 3600.0),
            default=3.0,
            metavar="S",
            help="seconds per request (default 3)",
        )
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


def message_line(row: dict[str, Any], body: str) -> str:
    """One message (a row of ``Table.to_pylist()``) as the store's command prints it."""
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
    return json.dumps(out, ensure_ascii=False)


def _messages(table: pa.Table, body: str, as_json: bool, **extra: Any) -> None:
    rows = [message_line(r, body) for r in table.to_pylist()]  # a command's page of messages (--count, --max)
    if as_json:
        head = json.dumps(extra, ensure_ascii=False)[1:-1]
        print('{"messages": [' + ", ".join(rows) + "]" + (", " + head if head else "") + "}")
    else:
        for line in rows:
            print(line)


def _emit(obj: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    if as_json:
        print(json.dumps(obj, ensure_ascii=False))
    else:
        for line in lines:
            print(line)


def _error(message: str) -> None:
    sys.stdout.flush()
    print(f"rmqlog: {message}", file=sys.stderr)


def _queues(admin: Admin, topic: str, route: TopicRouteData) -> list[dict[str, Any]]:
    """Every readable queue of ``topic`` on every broker (by broker name): min, max, messages."""
    out = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if not _addressed(route, q.broker_name):
            continue
        for qid in range(q.read_queue_nums):  # each group's master, else its slave (rmqnet.client.Admin)
            lo, hi = admin.min_offset(q.broker_name, topic, qid), admin.max_offset(q.broker_name, topic, qid)
            out.append({"brokerName": q.broker_name, "queueId": qid, "min": lo, "max": hi, "messages": max(0, hi - lo)})
    return out


def _addressed(route: TopicRouteData, name: str) -> bool:
    """Whether broker group ``name`` has an address in ``route`` (its master, or a slave)."""
    return any(b.broker_name == name and b.broker_addrs for b in route.broker_datas)


def _route(admin: Admin, topic: str) -> TopicRouteData:
    try:
        return admin.route(topic)
    except TopicNotFoundError:
        known = sorted(admin.topic_list())
        shown = ", ".join(known[:20]) + (f" ... ({len(known)} in all)" if len(known) > 20 else "") if known else "none"
        raise _Usage(f"no topic {topic!r} routed by the name server; topics: {shown}") from None


class _Usage(Exception):
    pass


def info(admin: Admin, args: argparse.Namespace) -> int:
    cluster = admin.cluster_info()
    topics: dict[str, Any] = {}
    for topic in sorted(admin.topic_list()):
        try:
            topics[topic] = {"queues": _queues(admin, topic, admin.route(topic))}
        except TopicNotFoundError:  # unregistered between the two questions
            continue
    brokers: dict[str, dict[str, Any]] = {
        name: {"cluster": b.cluster, "addrs": {str(k): v for k, v in sorted(b.broker_addrs.items())}}
        for name, b in sorted(cluster.broker_addr_table.items())
    }
    clusters = {k: sorted(v) for k, v in sorted(cluster.cluster_addr_table.items())}
    namesrv = ";".join(admin.namesrv_addrs)
    obj = {"namesrv": namesrv, "clusters": clusters, "brokers": brokers, "topics": topics}
    lines = [f"namesrv      {namesrv}", f"clusters     {len(clusters)}"]
    lines += [f"  {name:<24} {' '.join(names)}" for name, names in clusters.items()]
    lines.append(f"brokers      {len(brokers)}")
    lines += [f"  {name:<24} " + " ".join(f"{k}={v}" for k, v in b["addrs"].items()) for name, b in brokers.items()]
    lines.append(f"topics       {len(topics)}")
    for name, t in topics.items():
        lines.append(f"  {name:<24} {queue_ranges(t['queues'])}")
    _emit(obj, args.json, lines)
    return OK


def queue_ranges(queues: list[dict[str, Any]]) -> str:
    """A topic's queues as text, ``broker/queueId:[min,max)`` each, a run of consecutive queues
    of one broker with the same range written once (``broker-a/0-1023:[0,0)``: a system
    topic's 1,024 empty queues are one item, not a line of 1,024)."""
    items: list[str] = []
    run: list[Any] = []  # [broker, first qid, last qid, min, max]
    for q in queues:
        b, qid, lo, hi = q["brokerName"], q["queueId"], q["min"], q["max"]
        if run and run[0] == b and run[2] + 1 == qid and (run[3], run[4]) == (lo, hi):
            run[2] = qid
            continue
        if run:
            items.append(_run_text(run))
        run = [b, qid, qid, lo, hi]
    if run:
        items.append(_run_text(run))
    return " ".join(items)


def _run_text(run: list[Any]) -> str:
    b, first, last, lo, hi = run
    return f"{b}/{first}{'' if first == last else f'-{last}'}:[{lo},{hi})"


def topic_status(admin: Admin, args: argparse.Namespace) -> int:
    queues = _queues(admin, args.topic, _route(admin, args.topic))
    lines = [
        f"{args.topic}/{q['brokerName']}/{q['queueId']}  min {q['min']}  max {q['max']}  messages {q['messages']}"
        for q in queues
    ]
    _emit({"topic": args.topic, "queues": queues}, args.json, lines)
    return OK


def _group_lag(admin: Admin, group: str) -> list[dict[str, Any]]:
    """The group's offsets on every broker group (its master, else a slave) by GET_CONSUME_STATS
    (208) without a topic: the topics the group has committed offsets of, as the broker knows
    them (RocketMQ's ``whichTopicByConsumer``), each of their queues with the broker's end."""
    rows: list[dict[str, Any]] = []
    for name, b in sorted(admin.cluster_info().broker_addr_table.items()):
        if not b.broker_addrs:
            continue
        addr = b.broker_addrs.get(0) or b.broker_addrs[min(b.broker_addrs)]
        stats = admin.consume_stats(addr, group)
        for q, w in sorted(stats.offset_table.items()):
            rows.append(
                {
                    "group": group,
                    "topic": q.topic,
                    "brokerName": q.broker_name or name,
                    "queueId": q.queue_id,
                    "committed": w.consumer_offset,
                    "max": w.broker_offset,
                    "lag": max(0, w.broker_offset - w.consumer_offset),
                }
            )
    return rows


def lag(admin: Admin, args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = [] if args.topic else _group_lag(admin, args.group)
    for topic in args.topic or []:
        route = _route(admin, topic)
        for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
            name = q.broker_name
            for qid in range(q.read_queue_nums if _addressed(route, name) else 0):
                committed = admin.query_offset(name, args.group, topic, qid)
                if committed is None or committed < 0:
                    continue
                hi = admin.max_offset(name, topic, qid)
                rows.append(
                    {
                        "group": args.group,
                        "topic": topic,
                        "brokerName": q.broker_name,
                        "queueId": qid,
                        "committed": committed,
                        "max": hi,
                        "lag": max(0, hi - committed),
                    }
                )
    if not rows:
        _error(f"consumer group {args.group!r} has no committed offsets on the brokers")
        return NOTHING
    total = sum(r["lag"] for r in rows)
    lines = [
        f"{r['group']}  {r['topic']}/{r['brokerName']}/{r['queueId']}  committed {r['committed']}  "
        f"max {r['max']}  lag {r['lag']}"
        for r in rows
    ]
    lines.append(f"total lag {total}")
    _emit({"offsets": rows, "totalLag": total}, args.json, lines)
    return OK


def read(admin: Admin, args: argparse.Namespace) -> int:
    route = _route(admin, args.topic)
    brokers = sorted(q.broker_name for q in route.queue_datas if args.queue < q.read_queue_nums)
    if args.broker is None and len(brokers) > 1:
        raise _Usage(
            f"topic {args.topic!r} has queue {args.queue} on brokers {', '.join(brokers)}: name one (--broker)"
        )
    name = args.broker if args.broker is not None else (brokers[0] if brokers else None)
    if name not in brokers:
        raise _Usage(
            f"queue {args.queue} of topic {args.topic!r} is on no broker named {name!r}; "
            f"brokers: {', '.join(brokers) or 'none'}"
        )
    if not _addressed(route, name):
        raise _Usage(f"broker {name!r} has no address in the route of {args.topic!r}")
    offset = args.offset if args.offset is not None else admin.min_offset(name, args.topic, args.queue)
    with PullConsumer(
        "rmqlog_cli",
        ";".join(admin.namesrv_addrs),
        timeout_s=admin.timeout_s,
        access_key=admin.credentials and admin.credentials[0],
        secret_key=admin.credentials and admin.credentials[1],
    ) as consumer:
        res = consumer.pull(args.topic, args.queue, offset, args.count, subscription=args.tags, broker_name=name)
    status = {
        "status": res.status,
        "nextOffset": res.next_begin_offset,
        "minOffset": res.min_offset,
        "maxOffset": res.max_offset,
    }
    _messages(res.messages, args.body, args.json, **status)
    if not args.json:
        print(f"# {res.status} next={res.next_begin_offset} min={res.min_offset} max={res.max_offset}", file=sys.stderr)
    return OK if res.messages.num_rows else NOTHING


def query(admin: Admin, args: argparse.Namespace) -> int:
    if args.topic == "*":
        raise _Usage('a query by store time ("*") is not served over the wire: name a topic and a key or msgId')
    _route(admin, args.topic)
    if args.id is not None:
        table, why = _by_id(admin, args.id, args.topic, args.max, args.begin, args.end)
    else:
        end = args.end if args.end is not None else 2**63 - 1
        table = admin.query_by_key(args.topic, args.key, args.max, args.begin, end)
        why = f"no message with key {args.key!r} in topic {args.topic!r} on any broker (QUERY_MESSAGE, the index files)"
    _messages(table, args.body, args.json)
    if not table.num_rows:
        _error(why)
    return OK if table.num_rows else NOTHING


def get(admin: Admin, args: argparse.Namespace) -> int:
    if args.topic is not None:
        _route(admin, args.topic)
    table, why = _by_id(admin, args.id, args.topic, 1, 0, None)
    _messages(table.slice(0, 1), args.body, args.json)
    if not table.num_rows:
        _error(why)
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
            raise _Usage(
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
    route = _route(admin, topic)
    tables: list[pa.Table] = []
    with PullConsumer(
        "rmqlog_cli",
        ";".join(admin.namesrv_addrs),
        timeout_s=admin.timeout_s,
        access_key=admin.credentials and admin.credentials[0],
        secret_key=admin.credentials and admin.credentials[1],
    ) as consumer:
        for name in sorted({q.broker_name for q in route.queue_datas if q.read_queue_nums}):
            if not _addressed(route, name):
                continue
            offset = args.offset if args.offset is not None else admin.min_offset(name, topic, 0)
            tables.append(consumer.pull(topic, 0, offset, args.count, broker_name=name).messages)
    table = pa.concat_tables(tables) if tables else pa.table({})
    origins = (
        dict(Counter(dict(p).get("RETRY_TOPIC", "?") for p in table.column("properties").to_pylist()))
        if table.num_rows
        else {}
    )
    _messages(table, args.body, args.json, group=args.group, topic=topic, origins=origins)
    if not args.json:
        where = ", ".join(f"{t}: {n}" for t, n in sorted(origins.items())) or "none"
        print(f"# {table.num_rows} dead letter(s) of {args.group}; first sent to: {where}", file=sys.stderr)
    return OK if table.num_rows else NOTHING


def pop_status(admin: Admin, args: argparse.Namespace) -> int:
    route = _route(admin, args.topic)
    rows: list[dict[str, Any]] = []
    total = 0
    for b in sorted(route.broker_datas, key=lambda b: b.broker_name):
        addr = b.broker_addrs.get(0)
        if addr is None:  # a slave keeps no POP state: the group's master alone answers
            continue
        got = admin.pop_inflight(addr, args.group, args.topic, args.max)
        total += int(got["total"])
        now = int(got["now"])
        for m in got["messages"]:
            deadline = int(m["popTime"]) + int(m["invisibleTime"])
            rows.append(
                {
                    "brokerName": got["brokerName"],
                    "topic": m["topic"],
                    "queueId": m["queueId"],
                    "offset": m["offset"],
                    "popTime": m["popTime"],
                    "invisibleTime": m["invisibleTime"],
                    "attempt": m["attempt"],
                    "inflightMs": now - int(m["popTime"]),
                    "visibleInMs": deadline - now,
                }
            )
    if not rows:
        _error(f"consumer group {args.group!r} has no POP message of {args.topic!r} in flight")
        return NOTHING
    lines = [
        f"{args.group}  {r['topic']}/{r['brokerName']}/{r['queueId']}  offset {r['offset']}  "
        f"in flight {r['inflightMs']} ms  visible again in {r['visibleInMs']} ms"
        for r in rows
    ]
    lines.append(f"total in flight {total}" + (f" ({len(rows)} listed)" if len(rows) < total else ""))
    _emit({"group": args.group, "topic": args.topic, "messages": rows, "total": total}, args.json, lines)
    return OK


def main(argv: Sequence[str]) -> int:
    """A reading command over the wire (``rmqnet.cli`` saw ``--namesrv``): its exit status."""
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as exc:  # --help (0) or a wrong argument (2)
        return int(exc.code) if isinstance(exc.code, int) else USAGE
    handler = {
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
    }[args.cmd]
    try:
        ak, sk = credentials_of(args)
        admin = Admin(args.namesrv, timeout_s=args.timeout, access_key=ak, secret_key=sk)
    except (ValueError, CredentialsError) as exc:
        _error(str(exc))
        return USAGE
    try:
        return handler(admin, args)
    except _Usage as exc:
        _error(str(exc))
        return USAGE
    except BrokerError as exc:
        _error(refusal_text(exc))
        return CANNOT
    except ClientError as exc:
        _error(str(exc))
        return CANNOT
    except BrokenPipeError:  # the reader went away (| head)
        return OK
    except OSError as exc:  # no name server or broker answers (refused, timed out)
        _error(f"the cluster cannot be asked: {type(exc).__name__}: {exc}")
        return CANNOT
    finally:
        admin.close()
