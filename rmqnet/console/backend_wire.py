"""The console's answers from a cluster (:class:`WireBackend`): the name servers and the
brokers they route to, asked through our client (:class:`~rmqnet.client.Admin`,
:class:`~rmqnet.client.PullConsumer`, :class:`~rmqnet.client.Producer`), signed with the
console's credentials when it has some (``aclEnable``).

What each page asks: the cluster page the name server's cluster info and every broker's
runtime info (106, 28: :func:`rmqnet.client.cluster_status.cluster_status`); the topic list
206; a topic its route (105), every queue's min and max (202 per broker group) and the groups
with committed offsets of it (43: every master's offset table, one request each); a group
every master's GET_CONSUME_STATS (208) and live consumers (203); messages pulls (11, no
commit), queries by key (12) and VIEW_MESSAGE_BY_ID (33). Groups are listed from the masters'
subscription groups (201) and offset tables (43). No call reads more than a page of messages.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from rmqlog import is_uniq_key

from ..client import (
    Admin,
    BrokerError,
    ClientError,
    Producer,
    PullConsumer,
    TopicNotFoundError,
    parse_offset_msg_id,
)
from ..client.cluster_status import cluster_status
from ..remoting import ResponseCode
from ..remoting.names import dlq_topic
from ..remoting.route import TopicRouteData
from .backend import BadRequest, ConsoleBackend, NotFound, Refused, Unavailable, message_dicts

T = TypeVar("T")
#: properties a re-sent dead letter does not keep: where its retries went (the store's
#: ``RESEND_DROPPED``), what a pull or the broker added, and what the producer sets anew
RESEND_DROPPED = frozenset(
    {
        "RETRY_TOPIC",
        "DELAY",
        "REAL_TOPIC",
        "REAL_QID",
        "WAIT",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "CLUSTER",
        "TAGS",
        "KEYS",
        "UNIQ_KEY",
    }
)
#: MessageSysFlag.COMPRESSED_FLAG: a body our client would send as if it were plain
COMPRESSED = 0x1
#: the producer group of the console's test messages, and the consumer group of its pulls
#: (nothing is committed: pulls carry no commit flag)
CONSOLE_GROUP = "rmqlog_console"


@contextmanager
def _answers(what: str) -> Iterator[None]:
    """The client's errors as the console's kinds, naming ``what`` was asked."""
    try:
        yield
    except TopicNotFoundError as exc:
        raise NotFound(f"{what}: {exc}") from None
    except BrokerError as exc:
        if exc.code in (ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST):
            raise NotFound(f"{what}: {exc}") from None
        raise Refused(f"{what}: the broker refused it: {exc}") from None
    except ValueError as exc:
        raise BadRequest(f"{what}: {exc}") from None
    except (ClientError, OSError) as exc:
        raise Unavailable(f"{what}: the cluster cannot be asked: {type(exc).__name__}: {exc}") from None


class WireBackend(ConsoleBackend):
    can_admin = True

    def __init__(
        self, namesrv: str, *, timeout_s: float = 3.0, access_key: str | None = None, secret_key: str | None = None
    ) -> None:
        self.namesrv = namesrv
        self.source = f"namesrv {namesrv}"
        keys: dict[str, Any] = {"timeout_s": timeout_s, "access_key": access_key, "secret_key": secret_key}
        self.admin = Admin(namesrv, **keys)
        self._keys = keys
        self._consumer: PullConsumer | None = None
        self._producer: Producer | None = None
        self._made = threading.Lock()  # the pages' calls come from worker threads: one client each

    def close(self) -> None:
        for c in (self._consumer, self._producer):
            if c is not None:
                c.close()
        self.admin.close()

    def _pull(self) -> PullConsumer:
        with self._made:
            if self._consumer is None:
                self._consumer = PullConsumer(CONSOLE_GROUP, self.namesrv, **self._keys)
            return self._consumer

    def _send(self) -> Producer:
        with self._made:
            if self._producer is None:
                self._producer = Producer(CONSOLE_GROUP, self.namesrv, **self._keys)
            return self._producer

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        with _answers(what):
            return fn(*args, **kw)

    def _route(self, topic: str) -> TopicRouteData:
        return self._call(f"topic {topic!r}", self.admin.route, topic)

    def _masters(self) -> list[tuple[str, str]]:
        """(broker name, address) of every broker group: its master, else its first slave."""
        info = self._call("the cluster", self.admin.cluster_info)
        out = []
        for name, b in sorted(info.broker_addr_table.items()):
            if b.broker_addrs:
                out.append((name, b.broker_addrs.get(0) or b.broker_addrs[min(b.broker_addrs)]))
        return out

    # ---- reading ----------------------------------------------------------------------

    def cluster(self) -> dict[str, Any]:
        return self._call("the cluster", cluster_status, self.admin, self.namesrv)

    def topic_names(self) -> list[str]:
        return self._call("the topic list", self.admin.topic_list)

    def topic(self, topic: str) -> dict[str, Any]:
        route = self._route(topic)
        queues: list[dict[str, Any]] = []
        for b in sorted(route.broker_datas, key=lambda b: b.broker_name):
            addr = b.broker_addrs.get(0) or (b.broker_addrs[min(b.broker_addrs)] if b.broker_addrs else None)
            if addr is None:
                continue
            stats = self._call(f"topic {topic!r} on {b.broker_name}", self.admin.topic_stats, addr, topic)
            for key, o in sorted(stats.items()):
                queues.append(
                    {
                        "brokerName": key.broker_name or b.broker_name,
                        "queueId": key.queue_id,
                        "min": o.min_offset,
                        "max": o.max_offset,
                        "messages": max(0, o.max_offset - o.min_offset),
                        "lastUpdate": o.last_update_timestamp,
                    }
                )
        return {
            "topic": topic,
            "queues": queues,
            "messages": sum(q["messages"] for q in queues),
            "route": route.to_json(),
        }

    def _offsets(self) -> dict[tuple[str, str], dict[str, dict[int, int]]]:
        """Every broker group's committed offsets (43): (topic, group) -> broker -> queue -> offset."""
        out: dict[tuple[str, str], dict[str, dict[int, int]]] = {}
        for name, addr in self._masters():
            for key, queues in self._call(f"the offsets on {name}", self.admin.consumer_offsets, addr).items():
                out.setdefault(key, {})[name] = queues
        return out

    def committed_offsets(self, topic: str) -> dict[str, dict[tuple[str, int], int]]:
        return {
            group: {(b, qid): o for b, queues in brokers.items() for qid, o in queues.items()}
            for (t, group), brokers in sorted(self._offsets().items())
            if t == topic
        }

    def _named(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Messages found by key or id with the broker group that stores them (by store host)."""
        info = self._call("the cluster", self.admin.cluster_info)
        names = {addr: name for name, b in info.broker_addr_table.items() for addr in b.broker_addrs.values()}
        for m in messages:
            m["brokerName"] = m["brokerName"] or names.get(m.get("storeHost") or "")
        return messages

    def group_names(self) -> list[str]:
        names = {group for _topic, group in self._offsets()}
        for _name, addr in self._masters():
            names.update(self._call("the subscription groups", self.admin.group_configs, addr))
        return sorted(names)

    def group(self, group: str) -> dict[str, Any]:
        rows: list[dict[str, Any]] = []
        members: list[dict[str, Any]] = []
        subscriptions: dict[str, str] = {}
        config: dict[str, Any] | None = None
        tps = 0.0
        for name, addr in self._masters():
            stats = self._call(f"group {group!r} on {name}", self.admin.consume_stats, addr, group)
            tps += stats.consume_tps
            for q, w in sorted(stats.offset_table.items()):
                rows.append(
                    {
                        "topic": q.topic,
                        "brokerName": q.broker_name or name,
                        "queueId": q.queue_id,
                        "committed": w.consumer_offset,
                        "max": w.broker_offset,
                        "lag": max(0, w.broker_offset - w.consumer_offset),
                        "lastTimestamp": w.last_timestamp,
                    }
                )
            conns = self._call(f"group {group!r}'s consumers on {name}", self.admin.consumer_connections, addr, group)
            if conns:
                for c in conns.get("connectionSet", []):
                    if isinstance(c, dict) and c.get("clientId") not in {m.get("clientId") for m in members}:
                        members.append({k: c.get(k) for k in ("clientId", "clientAddr", "language", "version")})
                for t, sub in (conns.get("subscriptionTable") or {}).items():
                    subscriptions[str(t)] = str(sub.get("subString", "*")) if isinstance(sub, dict) else str(sub)
            if config is None:
                config = self._call("the subscription groups", self.admin.group_configs, addr).get(group)
        if config is None and not rows and not members:
            raise NotFound(f"no consumer group {group!r} on any broker (no config, offsets or consumers)")
        return {
            "group": group,
            "offsets": rows,
            "totalLag": sum(r["lag"] for r in rows),
            "consumeTps": round(tps, 2),
            "members": members,
            "subscriptions": [{"topic": t, "expression": e} for t, e in sorted(subscriptions.items())],
            "config": config or {},
        }

    def _brokers_of(self, route: TopicRouteData, topic: str, queue: int | None = None) -> list[str]:
        addressed = {b.broker_name for b in route.broker_datas if b.broker_addrs}
        return sorted(
            q.broker_name
            for q in route.queue_datas
            if q.broker_name in addressed and (queue is None or queue < q.read_queue_nums)
        )

    def browse(self, topic: str, broker: str | None, queue: int, offset: int | None, count: int) -> dict[str, Any]:
        route = self._route(topic)
        brokers = self._brokers_of(route, topic, queue)
        if broker is None and len(brokers) == 1:
            broker = brokers[0]
        if broker not in brokers:
            raise BadRequest(
                f"queue {queue} of topic {topic!r} is on broker(s) {', '.join(brokers) or 'none'}"
                + ("" if broker is None else f", not on {broker!r}")
                + ": name one"
            )
        assert broker is not None
        if offset is None:
            offset = self._call(f"{topic}/{broker}/{queue}", self.admin.min_offset, broker, topic, queue)
        res = self._call(
            f"{topic}/{broker}/{queue} at {offset}", self._pull().pull, topic, queue, offset, count, broker_name=broker
        )
        return {
            "messages": message_dicts(res.messages, broker),
            "brokerName": broker,
            "queueId": queue,
            "offset": offset,
            "status": res.status,
            "nextOffset": res.next_begin_offset,
            "minOffset": res.min_offset,
            "maxOffset": res.max_offset,
        }

    def by_key(self, topic: str, key: str, count: int) -> list[dict[str, Any]]:
        self._route(topic)
        return self._named(
            message_dicts(self._call(f"key {key!r} in {topic!r}", self.admin.query_by_key, topic, key, count))
        )

    def by_id(self, topic: str | None, msg_id: str) -> list[dict[str, Any]]:
        reasons = []
        if is_uniq_key(msg_id):
            if topic is None:
                reasons.append("a client msgId is looked up in a topic's index: give the topic")
            else:
                self._route(topic)
                table = self._call(f"msgId {msg_id}", self.admin.query_by_key, topic, msg_id, 1, unique=True)
                if table.num_rows:
                    return self._named(message_dicts(table.slice(0, 1)))
                reasons.append(f"no broker of topic {topic!r} indexes client msgId {msg_id}")
        try:
            addr, offset = parse_offset_msg_id(msg_id)
        except ValueError:
            if not is_uniq_key(msg_id):
                raise BadRequest(
                    f"not a message id: {msg_id!r} (an offset msgId or a client msgId: hex digits)"
                ) from None
        else:
            try:
                table = self._call(f"msgId {msg_id}", self.admin.view_by_id, msg_id)
            except (Refused, NotFound, Unavailable) as exc:
                reasons.append(f"as an offset msgId (commitlog offset {offset} of {addr}): {exc}")
            else:
                if topic is None or (table.num_rows and table.column("topic")[0].as_py() == topic):
                    return self._named(message_dicts(table.slice(0, 1)))
                reasons.append(f"as an offset msgId it is a message of topic {table.column('topic')[0].as_py()!r}")
        raise NotFound(f"no message with msgId {msg_id}: " + "; ".join(reasons))

    def time_queues(self, topic: str) -> list[tuple[str, int]]:
        route = self._route(topic)
        return [
            (b, qid)
            for b in sorted(set(self._brokers_of(route, topic)))
            for qid in range(max(q.read_queue_nums for q in route.queue_datas if q.broker_name == b))
        ]

    def offset_at(self, topic: str, broker: str, queue: int, ms: int) -> int:
        return self._call(f"{topic}/{broker}/{queue}", self.admin.search_offset, broker, topic, queue, ms)

    def read(self, topic: str, broker: str, queue: int, offset: int, count: int) -> list[dict[str, Any]]:
        res = self._call(
            f"{topic}/{broker}/{queue}", self._pull().pull, topic, queue, offset, count, broker_name=broker
        )
        return message_dicts(res.messages, broker)

    # ---- admin ------------------------------------------------------------------------

    def _master_addrs(self) -> list[str]:
        info = self._call("the cluster", self.admin.cluster_info)
        return sorted(a for b in info.broker_addr_table.values() if (a := b.master_addr()))

    def create_topic(self, topic: str, queues: int, perm: int) -> list[str]:
        masters = self._master_addrs()
        for addr in masters:
            self._call(f"creating {topic!r} on {addr}", self.admin.create_topic, addr, topic, queues, perm=perm)
        return masters

    def delete_topic(self, topic: str) -> list[str]:
        info = self._call("the cluster", self.admin.cluster_info)
        done: list[str] = []
        for cluster in sorted(info.cluster_addr_table):
            done += self._call(f"deleting {topic!r}", self.admin.delete_topic_in_cluster, cluster, topic)
        return done

    def send_test(self, topic: str, body: bytes, tags: str | None, keys: str | None) -> dict[str, Any]:
        res = self._call(f"sending to {topic!r}", self._send().send, topic, body, tags=tags, keys=keys)
        return {
            "status": res.status,
            "msgId": res.msg_id,
            "offsetMsgId": res.offset_msg_id,
            "brokerName": res.broker_name,
            "queueId": res.queue_id,
            "queueOffset": res.queue_offset,
        }

    def reset_offset(self, group: str, topic: str, offset: int | None, ts_ms: int | None) -> list[dict[str, Any]]:
        """Every queue of ``topic`` on every broker group: the group's offset set to ``offset``
        (kept within the queue's [min, max]) or to the first message stored at or after
        ``ts_ms`` (UPDATE_CONSUMER_OFFSET, 15, on the master). RocketMQ's old path
        (``resetOffsetByTimestampOld``): a consumer online commits its own offsets over it,
        so stop the group's consumers first."""
        route = self._route(topic)
        done = []
        for broker in self._brokers_of(route, topic):
            nums = max(q.read_queue_nums for q in route.queue_datas if q.broker_name == broker)
            for qid in range(nums):
                where = f"{topic}/{broker}/{qid}"
                lo = self._call(where, self.admin.min_offset, broker, topic, qid)
                hi = self._call(where, self.admin.max_offset, broker, topic, qid)
                to = (
                    min(max(offset, lo), hi)
                    if offset is not None
                    else self._call(where, self.admin.search_offset, broker, topic, qid, ts_ms or 0)
                )
                self._call(f"resetting {group!r} on {where}", self.admin.update_offset, broker, group, topic, qid, to)
                done.append({"brokerName": broker, "queueId": qid, "offset": to})
        return done

    def resend_dead_letters(self, group: str, msg_ids: list[str]) -> list[dict[str, Any]]:
        """As the store's ``dlq-resend`` keeps them: body, flag, tags, keys, ``ORIGIN_MESSAGE_ID``
        (the first msgId, or this one) and the user's properties, as a new message (a new
        client msgId; born time and host are the console's). Not idempotent: each call sends
        again. A compressed body is skipped (the client would send it as plain)."""
        dlq = dlq_topic(group)
        out: list[dict[str, Any]] = []
        for msg_id in msg_ids:
            try:
                parse_offset_msg_id(msg_id)
            except ValueError:
                raise BadRequest(f"not an offset msgId: {msg_id!r}") from None
            [row] = self._call(f"dead letter {msg_id}", self.admin.view_by_id, msg_id).to_pylist()
            props = dict(row.get("properties") or {})
            origin = props.get("RETRY_TOPIC")
            if row["topic"] != dlq:
                out.append({"msgId": msg_id, "skipped": f"a message of {row['topic']!r}, not of {dlq!r}"})
            elif not origin:
                out.append({"msgId": msg_id, "skipped": "no RETRY_TOPIC: not sent there by a consumer's send-back"})
            elif (row.get("sysFlag") or 0) & COMPRESSED:
                out.append({"msgId": msg_id, "skipped": "a compressed body: re-send it with `rmqlog dlq-resend ROOT`"})
            else:
                kept = {k: v for k, v in props.items() if k not in RESEND_DROPPED and not k.startswith("RMQLOG_")}
                kept.setdefault("ORIGIN_MESSAGE_ID", msg_id)
                res = self._call(
                    f"re-sending {msg_id} to {origin!r}",
                    self._send().send,
                    origin,
                    row["body"],
                    tags=row.get("tags"),
                    keys=row.get("keys") or None,
                    properties=kept,
                    flag=row.get("flag") or 0,
                )
                out.append({"msgId": msg_id, "topic": origin, "newMsgId": res.msg_id, "status": res.status})
        return out

    def delete_group(self, group: str) -> list[str]:
        masters = self._master_addrs()
        for addr in masters:
            self._call(f"deleting group {group!r} on {addr}", self.admin.delete_group, addr, group, remove_offset=True)
        return masters
