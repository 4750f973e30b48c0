"""The name server's request handling (RocketMQ 4.9.8's ``DefaultRequestProcessor``), sans-I/O:
a :class:`~rmqnet.remoting.RemotingCommand` and the time in, the response out.

Codes served:

======  ==================================  ============================================
code    request                             answer
======  ==================================  ============================================
101     GET_KV_CONFIG (namespace, key)      QUERY_NOT_FOUND "No config item, Namespace:
                                            N Key: K" (no KV config is kept)
103     REGISTER_BROKER                     SUCCESS, haServerAddr/masterAddr for a slave;
                                            SYSTEM_ERROR "crc32 not match" on a bad CRC
104     UNREGISTER_BROKER                   SUCCESS
105     GET_ROUTEINFO_BY_TOPIC (topic)      the route, standard JSON; TOPIC_NOT_EXIST 17
                                            with Java's remark when no broker lists it
106     GET_BROKER_CLUSTER_INFO             ClusterInfo JSON
206     GET_ALL_TOPIC_LIST_FROM_NAMESERVER  {"topicList": [...]}
216     DELETE_TOPIC_IN_NAMESRV (topic,     SUCCESS: the topic's route gone (with
        clusterName?)                       clusterName: that cluster's brokers' part);
                                            mqadmin deleteTopic's second step
other   -                                   REQUEST_CODE_NOT_SUPPORTED
======  ==================================  ============================================

A missing or mistyped header field, or a body that is not what the code carries, is answered
``SYSTEM_ERROR`` with a remark naming it (Java's ``RemotingCommandException``); nothing of
the state changes then. A oneway request is processed and gets no answer (``None``).

Registration (ours, stricter than 4.9.8; answered ``NO_PERMISSION`` (16) with a remark saying
why, nothing changed): 103 and 104 pass the name server's
:class:`~rmqnet.namesrv.admission.RegistrationPolicy` (an allow list, the cluster's signature);
a REGISTER_BROKER for a broker name and id that a live registration holds at another address
is refused (a broker cannot be re-pointed: the holder must unregister, close its connection or
expire first); an UNREGISTER_BROKER of a live registration must come over the connection it
registered on, and removes only what that address holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

from ..remoting import FieldError, RemotingCommand, RequestCode, ResponseCode
from ..remoting.register import (
    RegisterBrokerBody,
    RegisterBrokerHeader,
    UnregisterBrokerHeader,
    body_crc32,
    encode_topic_list,
)
from ..remoting.request_headers import DeleteTopicFromNamesrvHeader, GetKVConfigHeader, TopicHeader
from .admission import RegistrationPolicy
from .routes import BROKER_CHANNEL_EXPIRED_TIME, RouteTable

log = logging.getLogger(__name__)

#: ``FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL)``, the tail of Java's TOPIC_NOT_EXIST remark
_APPLY_TOPIC_TIP = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


class NameServer:
    """One name server's state (:attr:`routes`) and its request handling.

    :meth:`handle` answers one request; :meth:`connection_closed` is told when a connection
    ends (a broker registered over it is dropped, Java's ``onChannelDestroy``).
    """

    def __init__(self, policy: RegistrationPolicy | None = None) -> None:
        self.routes = RouteTable()
        #: who may register (default: anyone, RocketMQ's behaviour)
        self.policy = policy or RegistrationPolicy()
        self._handlers: dict[int, Callable[[RemotingCommand, int, Hashable | None], RemotingCommand]] = {
            RequestCode.GET_KV_CONFIG: self._get_kv_config,
            RequestCode.REGISTER_BROKER: self._register_broker,
            RequestCode.UNREGISTER_BROKER: self._unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
        }

    def codes(self) -> list[int]:
        return sorted(int(c) for c in self._handlers)

    def handle(
        self, req: RemotingCommand, now_ms: int, conn: Hashable | None = None, remote: str | None = None
    ) -> RemotingCommand | None:
        """The response to ``req`` at ``now_ms`` (ms of a clock that only moves forward: the
        process's is monotonic), ``None`` for a oneway request.
        ``conn`` identifies the connection it came on (a broker registered over it is dropped
        when :meth:`connection_closed` names it), ``remote`` its peer's ``ip:port`` (for the
        registration policy's allow list). Raises nothing for what a peer sent."""
        handler = self._handlers.get(req.code)
        refusal = None
        if req.code in (RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER):
            refusal = self.policy.refusal(req, remote)
        if refusal is not None:
            what = "REGISTER_BROKER" if req.code == RequestCode.REGISTER_BROKER else "UNREGISTER_BROKER"
            log.warning("%s from %s refused: %s", what, remote or "?", refusal)
            res = req.reply(ResponseCode.NO_PERMISSION, f"{what} refused: {refusal}")
        elif handler is None:
            res = req.reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {req.code} not supported")
        else:
            try:
                res = handler(req, now_ms, conn)
            except FieldError as exc:
                res = req.reply(ResponseCode.SYSTEM_ERROR, str(exc))
        return None if req.is_oneway else res

    def connection_closed(self, conn: Hashable) -> list[str]:
        """A connection ended: the broker addresses registered over it, now dropped."""
        addrs = self.routes.drop_connection(conn)
        for addr in addrs:
            log.info("broker %s dropped: its connection closed", addr)
        return addrs

    # ------------------------------------------------------------------ handlers
    def _get_kv_config(self, req: RemotingCommand, now_ms: int, conn: Hashable | None) -> RemotingCommand:
        h = GetKVConfigHeader.read(req.ext_fields)
        return req.reply(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace} Key: {h.key}")

    def _register_broker(self, req: RemotingCommand, now_ms: int, conn: Hashable | None) -> RemotingCommand:
        h = RegisterBrokerHeader.read(req.ext_fields)
        body = req.body_bytes()
        if h.body_crc32 != 0 and body_crc32(body) != h.body_crc32:
            log.warning("REGISTER_BROKER from %s: crc32 not match", h.broker_addr)
            return req.reply(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            reg = RegisterBrokerBody.decode(body, h.compressed)
        except FieldError as exc:
            return req.reply(ResponseCode.SYSTEM_ERROR, f"Failed to decode RegisterBrokerBody: {exc}")
        holder = self.routes.holder(h.broker_name, h.broker_id)
        if holder is not None and holder != h.broker_addr:
            log.warning(
                "REGISTER_BROKER of %s id %d at %s refused: registered at %s",
                h.broker_name,
                h.broker_id,
                h.broker_addr,
                holder,
            )
            return req.reply(
                ResponseCode.NO_PERMISSION,
                f"REGISTER_BROKER refused: broker {h.broker_name} id {h.broker_id} is registered at "
                f"{holder}; {h.broker_addr} cannot take it while that registration is live (until it "
                f"unregisters, its connection closes or it expires after {BROKER_CHANNEL_EXPIRED_TIME} ms)",
            )
        first = h.broker_addr not in self.routes.live
        result = self.routes.register(
            cluster=h.cluster_name,
            broker_addr=h.broker_addr,
            broker_name=h.broker_name,
            broker_id=h.broker_id,
            ha_server_addr=h.ha_server_addr,
            topics=reg.topics,
            data_version=reg.data_version,
            conn=conn,
            now_ms=now_ms,
        )
        if first:
            log.info(
                "broker registered: %s id %d at %s, cluster %s, %d topics",
                h.broker_name,
                h.broker_id,
                h.broker_addr,
                h.cluster_name,
                len(reg.topics),
            )
        return req.reply(ResponseCode.SUCCESS, None, result.to_ext())

    def _unregister_broker(self, req: RemotingCommand, now_ms: int, conn: Hashable | None) -> RemotingCommand:
        h = UnregisterBrokerHeader.read(req.ext_fields)
        live = self.routes.live.get(h.broker_addr)
        if live is not None and live.conn is not None and live.conn != conn:
            log.warning(
                "UNREGISTER_BROKER of %s at %s refused: not the connection it registered on",
                h.broker_name,
                h.broker_addr,
            )
            return req.reply(
                ResponseCode.NO_PERMISSION,
                f"UNREGISTER_BROKER refused: {h.broker_addr} registered over "
                "another connection (a broker unregisters over its own)",
            )
        found = self.routes.unregister(
            cluster=h.cluster_name, broker_addr=h.broker_addr, broker_name=h.broker_name, broker_id=h.broker_id
        )
        log.info(
            "broker unregistered: %s id %d at %s (%s)",
            h.broker_name,
            h.broker_id,
            h.broker_addr,
            "OK" if found else "was not registered",
        )
        return req.reply(ResponseCode.SUCCESS)

    def _route(self, req: RemotingCommand, now_ms: int, conn: Hashable | None) -> RemotingCommand:
        topic = TopicHeader.read(req.ext_fields).topic
        route = self.routes.route(topic)
        if route is None:
            return req.reply(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}{_APPLY_TOPIC_TIP}",
            )
        # always standard JSON (quoted broker ids): ali-ons and the C++ client read it, and
        # Java clients from 4.9.4 ask for it (acceptStandardJsonOnly is therefore not read)
        return req.reply(ResponseCode.SUCCESS, body=route.encode())

    def _cluster_info(self, req: RemotingCommand, now_ms: int, conn: Hashable | None) -> RemotingCommand:
        return req.reply(ResponseCode.SUCCESS, body=self.routes.cluster_info().encode())

    def _topic_list(self, req: RemotingCommand, now_ms: int, conn: Hashable | None) -> RemotingCommand:
        return req.reply(ResponseCode.SUCCESS, body=encode_topic_list(self.routes.topic_list()))

    def _delete_topic(self, req: RemotingCommand, now_ms: int, conn: Hashable | None) -> RemotingCommand:
        h = DeleteTopicFromNamesrvHeader.read(req.ext_fields)
        self.routes.delete_topic(h.topic, h.cluster_name or None)
        return req.reply(ResponseCode.SUCCESS)


class BrokerExpiry:
    """``scanNotActiveBroker`` as a service: :meth:`run_once` drops the brokers whose last
    registration is older than 120 s. Java runs it every 10 s (:attr:`interval_ms`)."""

    interval_ms = 10_000

    def __init__(self, server: NameServer) -> None:
        self.server = server

    def run_once(self, now_ms: int) -> list[tuple[str, Hashable | None]]:
        """One scan at ``now_ms``: (address, connection) of each broker dropped; the caller
        closes those connections, as Java closes the expired broker's channel."""
        gone = self.server.routes.expire(now_ms)
        for addr, _ in gone:
            log.warning("broker %s expired: no registration for %d ms", addr, BROKER_CHANNEL_EXPIRED_TIME)
        return gone
