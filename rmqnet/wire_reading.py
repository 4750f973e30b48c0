"""The ``rmqlog`` reading commands over the wire: ``info``, ``topic-status`` and ``lag`` (and
its other name ``consumer-progress``) given ``--namesrv HOST:PORT[;HOST:PORT]`` in place of a
store root, answered by the name server and the brokers it routes to (our
:class:`~rmqnet.client.Admin`), so they work from any host that reaches the cluster, across
every broker group.

    rmqlog info --namesrv ADDRS                 clusters, brokers, every topic's queues per broker
    rmqlog topic-status --namesrv ADDRS TOPIC   a topic's queues on every broker: min, max, messages
    rmqlog lag --namesrv ADDRS GROUP [--topic T ...]
                                                a group's committed offsets against the queues' ends

Output follows the store's commands (``--json``: one object, camelCase keys), with a queue
named by broker as well (``T/broker-a/0``: over the wire a queue id is per broker). Exit
statuses as the store's: 0 done, 1 nothing found, 2 what was asked is wrong (an unknown
topic, named with the known ones), 3 the cluster cannot be asked (no name server answers, a
broker fails).

``lag`` needs a GROUP here (the brokers do not list groups over the wire) and reads each
queue's offset with QUERY_CONSUMER_OFFSET (14): a queue the group never committed on is left
out where the broker says so (QUERY_NOT_FOUND), but RocketMQ's brokers answer 0 for a queue
that still starts at 0, which then counts as committed 0. Topics: those given with
``--topic``, else every topic the name servers route except RocketMQ's system ones (``TBW102``,
``SCHEDULE_TOPIC_XXXX``, ``RMQ_SYS_*``, ``%RETRY%``/``%DLQ%`` of other groups).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from .client import Admin, BrokerError, ClientError, TopicNotFoundError
from .remoting.route import TopicRouteData

#: the store command's exit statuses (rmqlog.admin.exits)
OK, NOTHING, USAGE, CANNOT = 0, 1, 2, 3
COMMANDS = ("info", "topic-status", "lag", "consumer-progress")
_SYSTEM = ("TBW102", "SCHEDULE_TOPIC_XXXX", "OFFSET_MOVED_EVENT", "BenchmarkTest", "SELF_TEST_TOPIC")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rmqlog", description="The reading commands over the wire (--namesrv).")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--namesrv", required=True, metavar="ADDRS", help="name servers, HOST:PORT;HOST:PORT")
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        p.add_argument("--timeout", type=float, default=3.0, metavar="S", help="seconds per request (default 3)")
        return p

    command("info", "clusters, brokers, and every topic's queues on every broker")
    p = command("topic-status", "one topic's queues on every broker: min, max, messages")
    p.add_argument("topic", help="topic name")
    for name in ("lag", "consumer-progress"):
        p = command(name, "a group's committed offsets against the queues' ends")
        p.add_argument("group", help="consumer group")
        p.add_argument("--topic", action="append", default=None, help="a topic (repeatable; default: every topic)")
    return ap


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
    masters = {b.broker_name: b.master_addr() for b in route.broker_datas}
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        addr = masters.get(q.broker_name)
        if not addr:
            continue
        for qid in range(q.read_queue_nums):
            lo, hi = admin.min_offset(addr, topic, qid), admin.max_offset(addr, topic, qid)
            out.append({"brokerName": q.broker_name, "queueId": qid, "min": lo, "max": hi, "messages": max(0, hi - lo)})
    return out


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
        for name, b in sorted(cluster.broker_addr_table.items())}
    clusters = {k: sorted(v) for k, v in sorted(cluster.cluster_addr_table.items())}
    namesrv = ";".join(admin.namesrv_addrs)
    obj = {"namesrv": namesrv, "clusters": clusters, "brokers": brokers, "topics": topics}
    lines = [f"namesrv      {namesrv}", f"clusters     {len(clusters)}"]
    lines += [f"  {name:<24} {' '.join(names)}" for name, names in clusters.items()]
    lines.append(f"brokers      {len(brokers)}")
    lines += [f"  {name:<24} " + " ".join(f"{k}={v}" for k, v in b["addrs"].items()) for name, b in brokers.items()]
    lines.append(f"topics       {len(topics)}")
    for name, t in topics.items():
        ranges = " ".join(f"{q['brokerName']}/{q['queueId']}:[{q['min']},{q['max']})" for q in t["queues"])
        lines.append(f"  {name:<24} {ranges}")
    _emit(obj, args.json, lines)
    return OK


def topic_status(admin: Admin, args: argparse.Namespace) -> int:
    queues = _queues(admin, args.topic, _route(admin, args.topic))
    lines = [f"{args.topic}/{q['brokerName']}/{q['queueId']}  min {q['min']}  max {q['max']}  messages {q['messages']}"
             for q in queues]
    _emit({"topic": args.topic, "queues": queues}, args.json, lines)
    return OK


def _user_topic(topic: str, group: str) -> bool:
    if topic in _SYSTEM or topic.startswith("RMQ_SYS_"):
        return False
    if topic.startswith(("%RETRY%", "%DLQ%")):
        return topic.split("%", 2)[2] == group
    return True


def lag(admin: Admin, args: argparse.Namespace) -> int:
    topics = args.topic if args.topic else [t for t in sorted(admin.topic_list()) if _user_topic(t, args.group)]
    rows: list[dict[str, Any]] = []
    for topic in topics:
        if args.topic:
            route = _route(admin, topic)
        else:
            try:
                route = admin.route(topic)
            except TopicNotFoundError:  # unregistered since the topic list was asked
                continue
        masters = {b.broker_name: b.master_addr() for b in route.broker_datas}
        for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
            addr = masters.get(q.broker_name)
            for qid in range(q.read_queue_nums if addr else 0):
                assert addr is not None
                committed = admin.query_offset(addr, args.group, topic, qid)
                if committed is None or committed < 0:
                    continue
                hi = admin.max_offset(addr, topic, qid)
                rows.append({"group": args.group, "topic": topic, "brokerName": q.broker_name, "queueId": qid,
                             "committed": committed, "max": hi, "lag": max(0, hi - committed)})
    if not rows:
        _error(f"consumer group {args.group!r} has no committed offsets on the brokers")
        return NOTHING
    total = sum(r["lag"] for r in rows)
    lines = [f"{r['group']}  {r['topic']}/{r['brokerName']}/{r['queueId']}  committed {r['committed']}  "
             f"max {r['max']}  lag {r['lag']}" for r in rows]
    lines.append(f"total lag {total}")
    _emit({"offsets": rows, "totalLag": total}, args.json, lines)
    return OK


def main(argv: Sequence[str]) -> int:
    """A reading command over the wire (``rmqnet.cli`` saw ``--namesrv``): its exit status."""
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as exc:  # --help (0) or a wrong argument (2)
        return int(exc.code) if isinstance(exc.code, int) else USAGE
    handler = {"info": info, "topic-status": topic_status, "lag": lag, "consumer-progress": lag}[args.cmd]
    try:
        admin = Admin(args.namesrv, timeout_s=args.timeout)
    except ValueError as exc:
        _error(str(exc))
        return USAGE
    try:
        return handler(admin, args)
    except _Usage as exc:
        _error(str(exc))
        return USAGE
    except (BrokerError, ClientError) as exc:
        _error(str(exc))
        return CANNOT
    except BrokenPipeError:  # the reader went away (| head)
        return OK
    except OSError as exc:  # no name server or broker answers (refused, timed out)
        _error(f"the cluster cannot be asked: {type(exc).__name__}: {exc}")
        return CANNOT
    finally:
        admin.close()
