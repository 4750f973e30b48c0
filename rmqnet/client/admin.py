"""Admin requests (RocketMQ 4.9.8's ``MQClientAPIImpl`` / ``MQAdminImpl``): routes, queue
offsets, consumer offsets, topic creation, queries by key and by message id.

A queue's or a group's offsets are asked of a broker group named by its broker name in the
topic's route: the address of :mod:`rmqnet.client.failover`'s rule (queue offsets: the
lowest id, the master while it is there; consumer offsets: the master, else a slave); one
that fails at the link is marked down and the group's next address is asked at once
(:meth:`RemoteClient.on_broker`), so a group whose master was killed answers from its slave.
Named by an address (``"host:port"``, a route's ``brokerAddrs``), the question goes to that
broker alone (a tool checking one replica). Queries by key go to every broker group in the
topic's route (each at its first address up) and their answers are joined, as
``MQAdminImpl.queryMessage`` does (with its client-side filter: the key among the message's
KEYS, or the UNIQ_KEY equal to it). Topic creation goes to masters only.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqlog import MESSAGE_SCHEMA, Clock

from ..remoting import RemotingCommand, RequestCode, ResponseCode
from ..remoting.admin_bodies import (
    ConsumeStats,
    QueueKey,
    TopicOffset,
    decode_consume_stats,
    decode_consumer_connection,
    decode_subscription_groups,
    decode_topic_stats,
    parse_properties,
    properties_text,
)
from ..remoting.errors import FieldError
from ..remoting.names import PERM_RW
from ..remoting.register import ClusterInfo, decode_topic_list
from ..remoting.route import loads_fastjson
from ..transport import Limits
from .errors import BrokerError, ClientError, NoRouteError
from .failover import DOWN_MS, admin_ids, offset_ids
from .loop import call
from .records import decode_records
from .remote import RemoteClient

#: ``MixAll.UNIQUE_MSG_QUERY_FLAG``
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


def parse_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """The broker address and commitlog offset of an offset message id
    (``MessageDecoder.decodeMessageId``): 32 hex digits (IPv4 4 bytes, port 4, offset 8) or 56
    (IPv6 16, port 4, offset 8), a port in 1..65535 and an offset from 0. ``ValueError`` for
    anything else."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"not an offset message id (hex): {msg_id!r}") from None
    if len(raw) == 16:
        host = socket.inet_ntop(socket.AF_INET, raw[:4])
    elif len(raw) == 28:
        host = "[" + socket.inet_ntop(socket.AF_INET6, raw[:16]) + "]"
    else:
        raise ValueError(f"not an offset message id (32 or 56 hex digits): {msg_id!r}")
    port = int.from_bytes(raw[-12:-8], "big")
    offset = int.from_bytes(raw[-8:], "big", signed=True)
    if not 0 < port < 65536 or offset < 0:  # a client msgId (UNIQ_KEY) has 32 hex digits too
        raise ValueError(f"not an offset message id (port {port}, offset {offset}): {msg_id!r}")
    return f"{host}:{port}", offset


def _offset(res: RemotingCommand, name: str = "offset") -> int:
    v = res.ext_fields.get(name)
    try:
        return int(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ClientError(f"the answer to request code {res.code} has no integer {name!r} (got {v!r})") from None


class Admin(RemoteClient):
    """``Admin(namesrv)``: blocking methods; ``a``-prefixed coroutines for the ones the
    asyncio side needs most. ``route`` is :meth:`RemoteClient.route`. ``broker`` (module
    docstring): a broker name of the topic's route (its master, else a slave), or an
    address (that broker alone)."""

    def __init__(
        self,
        namesrv: str = "127.0.0.1:9876",
        *,
        timeout_s: float = 3.0,
        limits: Limits | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        clock: Clock | None = None,
        down_ms: int = DOWN_MS,
    ) -> None:
        super().__init__(
            namesrv,
            timeout_s=timeout_s,
            limits=limits,
            clock=clock,
            access_key=access_key,
            secret_key=secret_key,
            down_ms=down_ms,
        )

    # ---- queue offsets -----------------------------------------------------------------

    async def _queue_value(self, code: int, broker: str, topic: str, ext: dict[str, Any], name: str = "offset") -> int:
        async def send(addr: str) -> int:
            return _offset(await self.invoke(addr, RemotingCommand(code, ext_fields={"topic": topic, **ext})), name)

        return await self.on_broker(topic, broker, admin_ids, send)

    def max_offset(self, broker: str, topic: str, queue_id: int) -> int:
        """The queue's max offset (code 30: the offset the next message gets)."""
        return call(self._queue_value(RequestCode.GET_MAX_OFFSET, broker, topic, {"queueId": queue_id}))

    async def amax_offset(self, broker: str, topic: str, queue_id: int) -> int:
        return await self._queue_value(RequestCode.GET_MAX_OFFSET, broker, topic, {"queueId": queue_id})

    def min_offset(self, broker: str, topic: str, queue_id: int) -> int:
        """The queue's min offset (code 31)."""
        return call(self._queue_value(RequestCode.GET_MIN_OFFSET, broker, topic, {"queueId": queue_id}))

    async def amin_offset(self, broker: str, topic: str, queue_id: int) -> int:
        return await self._queue_value(RequestCode.GET_MIN_OFFSET, broker, topic, {"queueId": queue_id})

    def search_offset(self, broker: str, topic: str, queue_id: int, ts_ms: int) -> int:
        """The offset of the queue's first message stored at or after ``ts_ms`` (code 29)."""
        return call(
            self._queue_value(
                RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, broker, topic, {"queueId": queue_id, "timestamp": ts_ms}
            )
        )

    def earliest_store_time(self, broker: str, topic: str, queue_id: int) -> int:
        """The store time (ms) of the queue's first message (code 32)."""
        return call(
            self._queue_value(RequestCode.GET_EARLIEST_MSG_STORETIME, broker, topic, {"queueId": queue_id}, "timestamp")
        )

    # ---- consumer offsets --------------------------------------------------------------

    async def _query_offset(self, broker: str, group: str, topic: str, queue_id: int) -> int | None:
        async def send(addr: str) -> int | None:
            cmd = RemotingCommand(
                RequestCode.QUERY_CONSUMER_OFFSET,
                ext_fields={"consumerGroup": group, "topic": topic, "queueId": queue_id},
            )
            res = await self.invoke(addr, cmd, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
            return None if res.code == ResponseCode.QUERY_NOT_FOUND else _offset(res)

        return await self.on_broker(topic, broker, offset_ids, send)

    def query_offset(self, broker: str, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset of the queue (code 14: the master, else a slave);
        ``None`` when the broker has none (QUERY_NOT_FOUND)."""
        return call(self._query_offset(broker, group, topic, queue_id))

    async def aquery_offset(self, broker: str, group: str, topic: str, queue_id: int) -> int | None:
        return await self._query_offset(broker, group, topic, queue_id)

    async def _update_offset(self, broker: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        async def send(addr: str) -> None:
            cmd = RemotingCommand(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                ext_fields={"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset},
            )
            await self.invoke(addr, cmd)

        await self.on_broker(topic, broker, offset_ids, send)

    def update_offset(self, broker: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store the group's offset of the queue (code 15, answered: not oneway): on the
        master, else (gone, or out of reach) on a slave, which keeps it until its
        SlaveSynchronize copies the master's offsets over it again (docs/replication.md)."""
        call(self._update_offset(broker, group, topic, queue_id, offset))

    # ---- topics ------------------------------------------------------------------------

    async def _create_topic(
        self, broker: str, topic: str, queues: int, perm: int, order: bool, read_queues: int | None = None
    ) -> None:
        cmd = RemotingCommand(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            ext_fields={
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": read_queues or queues,
                "writeQueueNums": queues,
                "perm": perm,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": order,
            },
        )
        await self.invoke(broker, cmd)
        self._routes.pop(topic, None)

    def create_topic(
        self,
        broker_addr: str,
        topic: str,
        queues: int,
        *,
        perm: int = PERM_RW,
        order: bool = False,
        read_queues: int | None = None,
    ) -> None:
        """Create (or update) ``topic`` on the broker with ``queues`` write queues and
        ``read_queues`` read queues (default: as many) (code 17)."""
        call(self._create_topic(broker_addr, topic, queues, perm, order, read_queues))

    async def _cluster_info(self) -> ClusterInfo:
        last: Exception | None = None
        for addr in self.namesrv_addrs:
            try:
                res = await self.invoke(addr, RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO))
            except (OSError, BrokerError) as exc:
                last = exc
                continue
            return ClusterInfo.decode(res.body_bytes())
        assert last is not None
        raise last

    async def _topic_list(self) -> list[str]:
        last: Exception | None = None
        for addr in self.namesrv_addrs:
            try:
                res = await self.invoke(addr, RemotingCommand(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
            except (OSError, BrokerError) as exc:
                last = exc
                continue
            return decode_topic_list(res.body_bytes())
        assert last is not None
        raise last

    def topic_list(self) -> list[str]:
        """Every topic the name servers route (code 206, the first that answers)."""
        return call(self._topic_list())

    def cluster_info(self) -> ClusterInfo:
        """The name servers' brokers by name and broker names by cluster (code 106, the first
        name server that answers)."""
        return call(self._cluster_info())

    async def _create_topic_in_cluster(
        self, cluster: str, topic: str, queues: int, perm: int, order: bool
    ) -> list[str]:
        info = await self._cluster_info()
        names = info.cluster_addr_table.get(cluster)
        if not names:
            raise NoRouteError(f"no broker in cluster {cluster!r} (clusters: {sorted(info.cluster_addr_table)})")
        masters = sorted(
            a for n in names if n in info.broker_addr_table and (a := info.broker_addr_table[n].master_addr())
        )
        for addr in masters:
            await self._create_topic(addr, topic, queues, perm, order)
        return masters

    def create_topic_in_cluster(
        self, cluster: str, topic: str, queues: int, *, perm: int = PERM_RW, order: bool = False
    ) -> list[str]:
        """Create (or update) ``topic`` with ``queues`` queues on the master of every broker
        group of ``cluster`` (``mqadmin updateTopic -c``: the cluster's masters from the name
        server's cluster info, code 17 to each); the masters' addresses. Its route spreads
        over them once each has registered the topic (its next registration round).
        Raises :class:`NoRouteError` (no such cluster), :class:`BrokerError`."""
        return call(self._create_topic_in_cluster(cluster, topic, queues, perm, order))

    async def _delete_topic(self, broker_addr: str, topic: str) -> None:
        await self.invoke(broker_addr, RemotingCommand(RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields={"topic": topic}))
        self._routes.pop(topic, None)

    def delete_topic(self, broker_addr: str, topic: str) -> None:
        """Delete ``topic`` on the broker at ``broker_addr`` (code 215: its config and every
        group's offsets of it; the name servers drop it from that broker's route at its next
        registration). Raises :class:`BrokerError` (a system topic, a bad name, a slave)."""
        call(self._delete_topic(broker_addr, topic))

    async def _delete_topic_in_cluster(self, cluster: str, topic: str) -> list[str]:
        info = await self._cluster_info()
        names = info.cluster_addr_table.get(cluster)
        if not names:
            raise NoRouteError(f"no broker in cluster {cluster!r} (clusters: {sorted(info.cluster_addr_table)})")
        masters = sorted(
            a for n in names if n in info.broker_addr_table and (a := info.broker_addr_table[n].master_addr())
        )
        for addr in masters:
            await self._delete_topic(addr, topic)
        for ns in self.namesrv_addrs:
            await self.invoke(
                ns,
                RemotingCommand(
                    RequestCode.DELETE_TOPIC_IN_NAMESRV, ext_fields={"topic": topic, "clusterName": cluster}
                ),
            )
        return masters

    def delete_topic_in_cluster(self, cluster: str, topic: str) -> list[str]:
        """``mqadmin deleteTopic -c``: 215 to the master of every broker group of ``cluster``,
        then DELETE_TOPIC_IN_NAMESRV (216) to every name server (the cluster's part of the
        route gone at once); the masters' addresses. Raises :class:`NoRouteError` (no such
        cluster), :class:`BrokerError`."""
        return call(self._delete_topic_in_cluster(cluster, topic))

    def topic_configs(self, broker_addr: str) -> dict[str, dict[str, Any]]:
        """Every topic config of the broker at ``broker_addr`` (code 21), by name, as RocketMQ's
        ``TopicConfig`` JSON (``readQueueNums``, ``writeQueueNums``, ``perm``, ``order``...)."""
        res = call(self.invoke(broker_addr, RemotingCommand(RequestCode.GET_ALL_TOPIC_CONFIG)))
        body = _decoded(res, loads_fastjson)
        table = body.get("topicConfigTable") if isinstance(body, dict) else None
        if not isinstance(table, dict):
            raise ClientError(f"{broker_addr}: the answer to code 21 has no topicConfigTable")
        return {str(k): v for k, v in table.items()}

    def group_configs(self, broker_addr: str) -> dict[str, dict[str, Any]]:
        """Every subscription group of the broker at ``broker_addr`` (code 201), by name, as
        RocketMQ's ``SubscriptionGroupConfig`` JSON (``consumeEnable``, ``retryMaxTimes``...)."""
        res = call(self.invoke(broker_addr, RemotingCommand(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)))
        return _decoded(res, decode_subscription_groups)[0]

    def consumer_offsets(self, broker_addr: str) -> dict[tuple[str, str], dict[int, int]]:
        """Every committed offset of the broker at ``broker_addr`` (code 43, what a slave
        syncs: ``ConsumerOffsetSerializeWrapper``): (topic, group) -> queue id -> offset."""
        res = call(self.invoke(broker_addr, RemotingCommand(RequestCode.GET_ALL_CONSUMER_OFFSET)))
        return _decoded(res, _offset_table)

    def create_group(self, broker_addr: str, group: str, **fields: Any) -> None:
        """``mqadmin updateSubGroup -b``: create or replace ``group``'s config on the broker at
        ``broker_addr`` (code 200); ``fields`` by RocketMQ's names (``consumeEnable=False``,
        ``retryMaxTimes=3``...; the others take RocketMQ's defaults). Raises
        :class:`BrokerError` naming a bad name or field, or from a slave."""
        body = json.dumps({**fields, "groupName": group}).encode()
        call(self.invoke(broker_addr, RemotingCommand(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)))

    def delete_group(self, broker_addr: str, group: str, *, remove_offset: bool = False) -> None:
        """``mqadmin deleteSubGroup -b``: remove ``group``'s config from the broker at
        ``broker_addr`` (code 207), with ``remove_offset`` its committed offsets too. Raises
        :class:`BrokerError` (a bad name, a slave)."""
        ext = {"groupName": group, "removeOffset": "true" if remove_offset else "false"}
        call(self.invoke(broker_addr, RemotingCommand(RequestCode.DELETE_SUBSCRIPTIONGROUP, ext_fields=ext)))

    def topic_stats(self, broker_addr: str, topic: str) -> dict[QueueKey, TopicOffset]:
        """Each write queue of ``topic`` on the broker at ``broker_addr``: min and max offset, the
        store time of its last message (code 202). Raises :class:`BrokerError` (TOPIC_NOT_EXIST)."""
        res = call(
            self.invoke(broker_addr, RemotingCommand(RequestCode.GET_TOPIC_STATS_INFO, ext_fields={"topic": topic}))
        )
        return _decoded(res, decode_topic_stats)

    def consume_stats(self, broker_addr: str, group: str, topic: str | None = None) -> ConsumeStats:
        """``group``'s progress on the broker at ``broker_addr`` (code 208): per read queue the
        broker's and the group's offsets and the store time of the last message consumed, and
        the messages it pulled per second over the last minute; ``topic`` ``None``: every
        topic the group committed offsets of."""
        ext = {"consumerGroup": group, **({"topic": topic} if topic else {})}
        res = call(self.invoke(broker_addr, RemotingCommand(RequestCode.GET_CONSUME_STATS, ext_fields=ext)))
        return _decoded(res, decode_consume_stats)

    def pop_inflight(self, broker_addr: str, group: str, topic: str, max_num: int = 1000) -> dict[str, Any]:
        """``group``'s POP messages of ``topic`` (and its POP retry topics) handed out and not
        acked on the broker at ``broker_addr`` (code 200950, ours: ``rmqnet.broker.pop_inflight``):
        ``brokerName``, ``now``, ``total`` and the first ``max_num`` ``messages``."""
        ext = {"consumerGroup": group, "topic": topic, "maxNum": max_num}
        res = call(self.invoke(broker_addr, RemotingCommand(RequestCode.GET_POP_INFLIGHT, ext_fields=ext)))
        return _decoded(res, json.loads)

    def consumer_connections(self, broker_addr: str, group: str) -> dict[str, Any] | None:
        """``group``'s live consumers on the broker at ``broker_addr`` (code 203:
        ``ConsumerConnection`` JSON: ``connectionSet``, ``subscriptionTable``, ``consumeType``,
        ``messageModel``, ``consumeFromWhere``); ``None`` when none is online (206)."""
        cmd = RemotingCommand(RequestCode.GET_CONSUMER_CONNECTION_LIST, ext_fields={"consumerGroup": group})
        res = call(self.invoke(broker_addr, cmd, ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE)))
        return None if res.code == ResponseCode.CONSUMER_NOT_ONLINE else _decoded(res, decode_consumer_connection)

    def broker_config(self, broker_addr: str) -> dict[str, str]:
        """The configuration of the broker at ``broker_addr`` (code 26), key -> value text."""
        res = call(self.invoke(broker_addr, RemotingCommand(RequestCode.GET_BROKER_CONFIG)))
        return _decoded(res, lambda body: parse_properties(body.decode("utf-8")))

    def runtime_info(self, broker_addr: str) -> dict[str, str]:
        """The runtime figures of the broker at ``broker_addr`` (code 28, ``KVTable``): key ->
        value text (``brokerVersionDesc``, ``putTps``, ``commitLogMaxOffset``...)."""
        res = call(self.invoke(broker_addr, RemotingCommand(RequestCode.GET_BROKER_RUNTIME_INFO)))
        return _decoded(res, _kv_table)

    def update_broker_config(self, broker_addr: str, values: dict[str, str]) -> None:
        """Change keys of the broker's configuration (code 25); all or nothing. Raises
        :class:`BrokerError` for a key that is unknown, read at start only (NO_PERMISSION) or
        a bad value, naming it."""
        body = properties_text({str(k): str(v) for k, v in values.items()}).encode()
        call(self.invoke(broker_addr, RemotingCommand(RequestCode.UPDATE_BROKER_CONFIG, body=body)))

    # ---- queries -----------------------------------------------------------------------

    async def _query_by_key(self, topic: str, key: str, max_num: int, begin: int, end: int, unique: bool) -> pa.Table:
        route = await self._route(topic)
        tables = []

        async def send(addr: str) -> RemotingCommand:
            cmd = RemotingCommand(
                RequestCode.QUERY_MESSAGE,
                ext_fields={
                    "topic": topic,
                    "key": key,
                    "maxNum": max_num,
                    "beginTimestamp": begin,
                    "endTimestamp": end,
                    UNIQUE_KEY_QUERY: unique,
                },
            )
            return await self.invoke(addr, cmd, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))

        for b in route.broker_datas:
            res = await self.on_broker(topic, b.broker_name, admin_ids, send)
            if res.code == ResponseCode.SUCCESS and res.body:
                tables.append(decode_records(res.body_bytes()))
        if not tables:
            return MESSAGE_SCHEMA.empty_table()
        table = pa.concat_tables(tables)
        return table.filter(_matches(table, key, unique))

    def query_by_key(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = 2**63 - 1, *, unique: bool = False
    ) -> pa.Table:
        """Messages of ``topic`` with ``key`` among their KEYS (``unique``: whose UNIQ_KEY is
        ``key``), stored between ``begin`` and ``end`` (ms), at most ``max_num`` per broker
        (code 12: every broker group, at its first address up); an empty table when none.
        Raises :class:`TopicNotFoundError`, :class:`BrokerError`."""
        return call(self._query_by_key(topic, key, max_num, begin, end, unique))

    async def _view_by_id(self, offset_msg_id: str) -> pa.Table:
        addr, offset = parse_offset_msg_id(offset_msg_id)
        res = await self.invoke(addr, RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": offset}))
        return decode_records(res.body_bytes())

    def view_by_id(self, offset_msg_id: str) -> pa.Table:
        """The message (a one-row table) of an offset message id, asked of the broker the id
        names (code 33). Raises ``ValueError`` (not an id), :class:`BrokerError`."""
        return call(self._view_by_id(offset_msg_id))


def _kv_table(body: bytes) -> dict[str, str]:
    """``KVTable`` JSON (``{"table": {key: value}}``) as a dict of strings."""
    table = loads_fastjson(body).get("table")
    if not isinstance(table, dict):
        raise ValueError("no table")
    return {str(k): str(v) for k, v in table.items()}


def _decoded(res: RemotingCommand, decode: Any) -> Any:
    """``decode(body)``; :class:`ClientError` naming the request when the body is not what it says."""
    try:
        return decode(res.body_bytes())
    except (FieldError, ValueError, UnicodeDecodeError) as exc:
        raise ClientError(f"an answer (code {res.code}) does not hold the body it should: {exc}") from None


def _offset_table(body: bytes) -> dict[tuple[str, str], dict[int, int]]:
    """43's body (fastjson's bare integer keys read too) as (topic, group) -> queue -> offset."""
    obj = loads_fastjson(body)
    table = obj.get("offsetTable") if isinstance(obj, dict) else None
    if not isinstance(table, dict):
        raise ValueError("no offsetTable object")
    out: dict[tuple[str, str], dict[int, int]] = {}
    for key, queues in table.items():
        topic, sep, group = str(key).partition("@")
        if not sep or not isinstance(queues, dict):
            raise ValueError(f"offsetTable entry {str(key)[:80]!r} is not topic@group -> queues")
        out[(topic, group)] = {int(q): int(o) for q, o in queues.items()}
    return out


def _matches(table: pa.Table, key: str, unique: bool) -> pa.Array:
    n = table.num_rows
    if unique:
        uniq = pc.map_lookup(table.column("properties").combine_chunks(), "UNIQ_KEY", "first")
        return pc.fill_null(pc.equal(uniq, key), False)
    keys = table.column("keys").combine_chunks()
    flat = pc.list_flatten(keys)
    parents = pc.list_parent_indices(keys).to_numpy(zero_copy_only=False)
    hit = pc.fill_null(pc.equal(flat, key), False).to_numpy(zero_copy_only=False)
    rows = np.zeros(n, bool)
    rows[parents[hit]] = True
    return pa.array(rows)
