"""The ``rmqlog`` admin commands against one broker, by address (``--broker HOST:PORT``), as
``mqadmin`` asks them (our :class:`~rmqnet.client.Admin`):

    rmqlog topic-list --broker ADDR              the broker's topics: queues, perm, order
    rmqlog topic-create --broker ADDR TOPIC [--queues N] [--read-queues N] [--perm N] [--order]
                                                 create or update a topic (17; mqadmin updateTopic -b)
    rmqlog topic-delete --broker ADDR TOPIC      delete a topic: its config and groups' offsets (215)
    rmqlog topic-stats --broker ADDR TOPIC       each queue's min and max offset, last update (202)
    rmqlog consumer-status --broker ADDR GROUP [--topic T]
                                                 a group's progress per queue, its TPS, its live
                                                 consumers (208 + 203; mqadmin consumerProgress)
    rmqlog broker-config --broker ADDR [--set KEY=VALUE ...]
                                                 the broker's config (26), or keys changed (25)
    rmqlog group-list --broker ADDR              the broker's subscription groups (201)
    rmqlog group-create --broker ADDR GROUP [--disable] [--retry-max-times N] [--retry-queues N]
                                                 create or update a group (200; mqadmin updateSubGroup -b)
    rmqlog group-delete --broker ADDR GROUP [--remove-offset]
                                                 delete a group, with its offsets (207; mqadmin deleteSubGroup -b)

Output, errors and exit statuses follow the store's commands (:mod:`rmqlog.admin.render`,
:mod:`rmqlog.admin.exits`): text by default, ``--json`` one object with camelCase keys; queues
named ``topic/broker/id``; times ISO 8601 in UTC to the millisecond (the JSON also has the ms).
A group with no offsets and no consumers is nothing found (1); a broker's refusal (an unknown
topic, a system topic, a key that cannot be changed, a bad value, its ACL) exits 2 with its
remark printed; a broker that cannot be asked (refused, timed out) 3 (:mod:`.failures`).
Names are checked by the broker (never used as paths there); ``--set`` is checked as a whole
by the broker, so nothing changes unless every key can. Credentials: :mod:`.options`.
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Sequence
from typing import Any

from rmqlog.admin.exits import NOTHING, OK, USAGE
from rmqlog.admin.render import ArgumentParser, emit, error
from rmqlog.values import arg_type, parse_int

from ..client import Admin
from ..remoting.address import address_arg
from ..remoting.credentials import CredentialsError
from ..remoting.names import PERM_RW
from .failures import run
from .options import add_common, add_credentials, credentials_of, parse


def _count(low: int, high: int) -> Any:
    """An integer argument in ``[low, high]`` (:func:`rmqlog.values.parse_int`: ASCII digits only)."""
    return arg_type(parse_int, low, high)


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text!r}")
    return key.strip(), value.strip()


def _parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="rmqlog", description="Admin commands against one broker (--broker).")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument(
            "--broker", required=True, type=address_arg(text=True), metavar="HOST:PORT", help="the broker's address"
        )
        add_common(p)
        add_credentials(p)
        return p

    command("topic-list", "the broker's topics with their queues, perm and order flag")
    p = command("topic-create", "create or update a topic on the broker (mqadmin updateTopic -b)")
    p.add_argument("topic", help="topic name")
    p.add_argument("--queues", type=_count(1, 65535), default=8, help="write queues (default 8)")
    p.add_argument("--read-queues", type=_count(1, 65535), default=None, help="read queues (default: as --queues)")
    p.add_argument(
        "--perm", type=_count(0, 7), default=PERM_RW, help="perm bits: 4 read, 2 write, 1 inherit (default 6)"
    )
    p.add_argument("--order", action="store_true", help="an ordered topic")
    p = command("topic-delete", "delete a topic on the broker: its config and every group's offsets of it")
    p.add_argument("topic", help="topic name")
    p = command("topic-stats", "a topic's queues on the broker: min and max offset, last update")
    p.add_argument("topic", help="topic name")
    p = command("consumer-status", "a group's progress per queue, its consume TPS and its live consumers")
    p.add_argument("group", help="consumer group")
    p.add_argument("--topic", default=None, help="one topic (default: every topic the group committed offsets of)")
    p = command("broker-config", "the broker's configuration, or --set keys of it")
    p.add_argument(
        "--set",
        type=_pair,
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="change a key (repeatable; all or nothing; only keys the broker reads per request)",
    )
    command("group-list", "the broker's subscription groups with their consume, retry and broadcast settings")
    p = command("group-create", "create or update a subscription group on the broker (mqadmin updateSubGroup -b)")
    p.add_argument("group", help="consumer group")
    p.add_argument("--disable", action="store_true", help="consumeEnable=false: its pulls are refused (NO_PERMISSION)")
    p.add_argument(
        "--retry-max-times",
        type=_count(0, 65535),
        default=16,
        metavar="N",
        help="retryMaxTimes: deliveries before a message goes to %%DLQ%%GROUP (default 16)",
    )
    p.add_argument(
        "--retry-queues",
        type=_count(1, 65535),
        default=1,
        metavar="N",
        help="retryQueueNums: queues of %%RETRY%%GROUP (default 1)",
    )
    p.add_argument(
        "--orderly",
        action="store_true",
        help="consumeMessageOrderly=true: a FIFO group (RocketMQ 5's: its gRPC receives pop in order)",
    )
    p = command("group-delete", "delete a subscription group on the broker (mqadmin deleteSubGroup -b)")
    p.add_argument("group", help="consumer group")
    p.add_argument("--remove-offset", action="store_true", help="remove the group's committed offsets too")
    return ap


def _iso(ms: int) -> str | None:
    if ms <= 0:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def topic_list(admin: Admin, args: argparse.Namespace) -> int:
    configs = admin.topic_configs(args.broker)
    topics = [
        {
            "topic": name,
            "readQueueNums": c.get("readQueueNums"),
            "writeQueueNums": c.get("writeQueueNums"),
            "perm": c.get("perm"),
            "order": bool(c.get("order")),
        }
        for name, c in sorted(configs.items())
    ]
    lines = [
        f"{t['topic']:<32} read {t['readQueueNums']}  write {t['writeQueueNums']}  perm {t['perm']}"
        + ("  order" if t["order"] else "")
        for t in topics
    ]
    emit({"broker": args.broker, "topics": topics}, args.json, lines)
    return OK


def topic_create(admin: Admin, args: argparse.Namespace) -> int:
    admin.create_topic(
        args.broker, args.topic, args.queues, perm=args.perm, order=args.order, read_queues=args.read_queues
    )
    read = args.read_queues or args.queues
    emit(
        {
            "broker": args.broker,
            "topic": args.topic,
            "readQueueNums": read,
            "writeQueueNums": args.queues,
            "perm": args.perm,
            "order": args.order,
        },
        args.json,
        [
            f"topic {args.topic} on {args.broker}: read {read}, write {args.queues}, perm {args.perm}"
            + (", order" if args.order else "")
        ],
    )
    return OK


def topic_delete(admin: Admin, args: argparse.Namespace) -> int:
    admin.delete_topic(args.broker, args.topic)
    emit(
        {"broker": args.broker, "topic": args.topic, "deleted": True},
        args.json,
        [f"topic {args.topic} deleted on {args.broker}"],
    )
    return OK


def topic_stats(admin: Admin, args: argparse.Namespace) -> int:
    stats = admin.topic_stats(args.broker, args.topic)
    queues = [
        {
            "brokerName": q.broker_name,
            "queueId": q.queue_id,
            "min": o.min_offset,
            "max": o.max_offset,
            "messages": max(0, o.max_offset - o.min_offset),
            "lastUpdateTimestamp": o.last_update_timestamp,
            "lastUpdate": _iso(o.last_update_timestamp),
        }
        for q, o in sorted(stats.items())
    ]
    lines = [
        f"{args.topic}/{q['brokerName']}/{q['queueId']}  min {q['min']}  max {q['max']}  messages "
        f"{q['messages']}  last {q['lastUpdate'] or '-'}"
        for q in queues
    ]
    emit({"topic": args.topic, "queues": queues}, args.json, lines)
    return OK


def consumer_status(admin: Admin, args: argparse.Namespace) -> int:
    stats = admin.consume_stats(args.broker, args.group, args.topic)
    conns = admin.consumer_connections(args.broker, args.group)
    rows: list[dict[str, Any]] = [
        {
            "topic": q.topic,
            "brokerName": q.broker_name,
            "queueId": q.queue_id,
            "brokerOffset": w.broker_offset,
            "consumerOffset": w.consumer_offset,
            "lag": max(0, w.broker_offset - w.consumer_offset),
            "lastTimestamp": w.last_timestamp,
            "lastConsumed": _iso(w.last_timestamp),
        }
        for q, w in sorted(stats.offset_table.items())
    ]
    clients = (
        []
        if conns is None
        else [
            {
                "clientId": c.get("clientId"),
                "clientAddr": c.get("clientAddr"),
                "language": c.get("language"),
                "version": c.get("version"),
            }
            for c in conns.get("connectionSet", [])
        ]
    )
    if not rows and not clients:
        error(f"consumer group {args.group!r} has no offsets and no live consumer on {args.broker}")
        return NOTHING
    total = sum(r["lag"] for r in rows)
    obj = {
        "group": args.group,
        "broker": args.broker,
        "offsets": rows,
        "totalLag": total,
        "consumeTps": stats.consume_tps,
        "online": conns is not None,
        "connections": clients,
        "consumeType": None if conns is None else conns.get("consumeType"),
        "messageModel": None if conns is None else conns.get("messageModel"),
    }
    lines = [
        f"{args.group}  {r['topic']}/{r['brokerName']}/{r['queueId']}  broker {r['brokerOffset']}  consumer "
        f"{r['consumerOffset']}  lag {r['lag']}  last {r['lastConsumed'] or '-'}"
        for r in rows
    ]
    lines.append(f"total lag {total}  consume tps {stats.consume_tps:.2f}")
    lines.append(f"consumers {len(clients)}" + ("" if conns is not None else " (not online)"))
    lines += [f"  {c['clientId']}  {c['clientAddr']}  {c['language']}  v{c['version']}" for c in clients]
    emit(obj, args.json, lines)
    return OK


def broker_config(admin: Admin, args: argparse.Namespace) -> int:
    if args.set:
        changes = dict(args.set)
        admin.update_broker_config(args.broker, changes)
        emit({"broker": args.broker, "updated": changes}, args.json, [f"{k}={v}" for k, v in sorted(changes.items())])
        return OK
    config = admin.broker_config(args.broker)
    emit(
        {"broker": args.broker, "config": dict(sorted(config.items()))},
        args.json,
        [f"{k}={v}" for k, v in sorted(config.items())],
    )
    return OK


def group_list(admin: Admin, args: argparse.Namespace) -> int:
    configs = admin.group_configs(args.broker)
    groups = [
        {
            "groupName": name,
            "consumeEnable": c.get("consumeEnable"),
            "retryMaxTimes": c.get("retryMaxTimes"),
            "retryQueueNums": c.get("retryQueueNums"),
            "consumeBroadcastEnable": c.get("consumeBroadcastEnable"),
            "consumeMessageOrderly": bool(c.get("consumeMessageOrderly")),
        }
        for name, c in sorted(configs.items())
    ]
    lines = [
        f"{g['groupName']:<32} {'consume' if g['consumeEnable'] else 'disabled'}  retry {g['retryMaxTimes']} "
        f"on {g['retryQueueNums']} queue(s){'  orderly' if g['consumeMessageOrderly'] else ''}"
        for g in groups
    ]
    emit({"broker": args.broker, "groups": groups}, args.json, lines)
    return OK


def group_create(admin: Admin, args: argparse.Namespace) -> int:
    fields = {
        "consumeEnable": not args.disable,
        "retryMaxTimes": args.retry_max_times,
        "retryQueueNums": args.retry_queues,
        "consumeMessageOrderly": args.orderly,
    }
    admin.create_group(args.broker, args.group, **fields)
    emit(
        {"broker": args.broker, "groupName": args.group, **fields},
        args.json,
        [
            f"group {args.group} on {args.broker}: {'consume' if not args.disable else 'disabled'}, "
            f"retry {args.retry_max_times} on {args.retry_queues} queue(s){', orderly' if args.orderly else ''}"
        ],
    )
    return OK


def group_delete(admin: Admin, args: argparse.Namespace) -> int:
    admin.delete_group(args.broker, args.group, remove_offset=args.remove_offset)
    emit(
        {"broker": args.broker, "groupName": args.group, "deleted": True, "offsetsRemoved": args.remove_offset},
        args.json,
        [f"group {args.group} deleted on {args.broker}" + (", with its offsets" if args.remove_offset else "")],
    )
    return OK


HANDLERS = {
    "topic-list": topic_list,
    "topic-create": topic_create,
    "topic-delete": topic_delete,
    "topic-stats": topic_stats,
    "consumer-status": consumer_status,
    "broker-config": broker_config,
    "group-list": group_list,
    "group-create": group_create,
    "group-delete": group_delete,
}


def main(argv: Sequence[str]) -> int:
    """An admin command against one broker: its exit status."""
    args = parse(_parser(), argv)
    if isinstance(args, int):
        return args
    try:
        ak, sk = credentials_of(args)
        # the client needs a name server address; these commands ask the broker alone
        admin = Admin(args.broker, timeout_s=args.timeout, access_key=ak, secret_key=sk)
    except (ValueError, CredentialsError) as exc:
        error(str(exc) if isinstance(exc, CredentialsError) else f"--broker: {exc}")
        return USAGE
    try:
        return run(lambda: HANDLERS[args.cmd](admin, args), f"the broker at {args.broker}")
    finally:
        admin.close()
