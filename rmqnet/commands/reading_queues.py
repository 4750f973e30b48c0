"""The reading commands over the wire that report queues and offsets (:mod:`.reading` holds
their arguments): ``info``, ``topic-status``, ``lag`` and ``pop-status``; and what the message
commands (:mod:`.reading_messages`) share with them: a topic's route, or the known topics.

``lag`` needs a GROUP here (the brokers do not list groups over the wire). Without ``--topic``
it asks every broker group (its master, else a slave) for the group's progress with
GET_CONSUME_STATS (208) and no topic: the topics the group has committed offsets of (RocketMQ's
``whichTopicByConsumer``; its retry topic among them), every queue of them with the broker's
end (a queue of such a topic the group never committed on counts from 0, as ``mqadmin
consumerProgress`` counts it). With ``--topic`` it reads each queue's offset with
QUERY_CONSUMER_OFFSET (14): a queue the group never committed on is left out where the broker
says so (QUERY_NOT_FOUND), but RocketMQ's brokers answer 0 for a queue that still starts at 0,
which then counts as committed 0.

``pop-status`` (network only) asks the master of every broker group of the topic's route for
the POP group's messages of the topic (and its POP retry topic) handed out and not acked
(GET_POP_INFLIGHT, 200950, ours: RocketMQ counts them only in its metrics): per queue each
message's offset, how long ago it was handed out and in how long it is visible again (a
negative time: due, the broker hands it out again at its next revive round); ``--max`` per
broker (default 1000; the total is counted in full). Nothing in flight exits 1.
"""

from __future__ import annotations

import argparse
from typing import Any

from rmqlog.admin.exits import NOTHING, OK, CliError
from rmqlog.admin.render import emit, error

from ..client import Admin, TopicNotFoundError
from ..remoting.route import TopicRouteData


def _queues(admin: Admin, topic: str, route: TopicRouteData) -> list[dict[str, Any]]:
    """Every readable queue of ``topic`` on every broker (by broker name): min, max, messages."""
    out = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if not addressed(route, q.broker_name):
            continue
        for qid in range(q.read_queue_nums):  # each group's master, else its slave (rmqnet.client.Admin)
            lo, hi = admin.min_offset(q.broker_name, topic, qid), admin.max_offset(q.broker_name, topic, qid)
            out.append({"brokerName": q.broker_name, "queueId": qid, "min": lo, "max": hi, "messages": max(0, hi - lo)})
    return out


def addressed(route: TopicRouteData, name: str) -> bool:
    """Whether broker group ``name`` has an address in ``route`` (its master, or a slave)."""
    return any(b.broker_name == name and b.broker_addrs for b in route.broker_datas)


def route_of(admin: Admin, topic: str) -> TopicRouteData:
    """``topic``'s route; an unknown topic refused (exit 2) naming the known ones, as the store's commands do."""
    try:
        return admin.route(topic)
    except TopicNotFoundError:
        known = sorted(admin.topic_list())
        shown = ", ".join(known[:20]) + (f" ... ({len(known)} in all)" if len(known) > 20 else "") if known else "none"
        raise CliError(f"no topic {topic!r} routed by the name server; topics: {shown}") from None


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
    emit(obj, args.json, lines)
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
    queues = _queues(admin, args.topic, route_of(admin, args.topic))
    lines = [
        f"{args.topic}/{q['brokerName']}/{q['queueId']}  min {q['min']}  max {q['max']}  messages {q['messages']}"
        for q in queues
    ]
    emit({"topic": args.topic, "queues": queues}, args.json, lines)
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
        route = route_of(admin, topic)
        for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
            name = q.broker_name
            for qid in range(q.read_queue_nums if addressed(route, name) else 0):
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
        error(f"consumer group {args.group!r} has no committed offsets on the brokers")
        return NOTHING
    total = sum(r["lag"] for r in rows)
    lines = [
        f"{r['group']}  {r['topic']}/{r['brokerName']}/{r['queueId']}  committed {r['committed']}  "
        f"max {r['max']}  lag {r['lag']}"
        for r in rows
    ]
    lines.append(f"total lag {total}")
    emit({"offsets": rows, "totalLag": total}, args.json, lines)
    return OK


def pop_status(admin: Admin, args: argparse.Namespace) -> int:
    route = route_of(admin, args.topic)
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
        error(f"consumer group {args.group!r} has no POP message of {args.topic!r} in flight")
        return NOTHING
    lines = [
        f"{args.group}  {r['topic']}/{r['brokerName']}/{r['queueId']}  offset {r['offset']}  "
        f"in flight {r['inflightMs']} ms  visible again in {r['visibleInMs']} ms"
        for r in rows
    ]
    lines.append(f"total in flight {total}" + (f" ({len(rows)} listed)" if len(rows) < total else ""))
    emit({"group": args.group, "topic": args.topic, "messages": rows, "total": total}, args.json, lines)
    return OK
