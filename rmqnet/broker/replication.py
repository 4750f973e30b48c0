"""The broker's part in master/slave replication, by ``brokerRole`` (RocketMQ 4.9.8's
``BrokerRole``, ``HAService``, ``CommitLog.submitReplicaRequest``).

(role: HA service; sends; pulls)
- ``ASYNC_MASTER``: :class:`rmqnet.ha.HAServer` on ``haListenPort``; answered after the put (and the flush under
  ``SYNC_FLUSH``); served
- ``SYNC_MASTER``: the same; answered once a slave acknowledged the put's end (below); END_TRANSACTION too, SUCCESS
  whatever the wait gave (:mod:`rmqnet.broker.transactions`); served
- ``SLAVE``: :class:`rmqnet.ha.HAClient` to its master; refused: ``SERVICE_NOT_AVAILABLE`` with RocketMQ's remark
  ("...messages are put to the slave...": ``DefaultMessageStore.checkStoreStatus``); served (commit offsets not stored:
  ``PullMessageProcessor``)

``SYNC_MASTER`` (``submitReplicaRequest``, for messages whose ``WAIT`` property is not
``false``): with a slave connected and less than ``haSlaveFallbehindMax`` behind the put's end
(``isSlaveOK``), the reply waits until a slave acknowledged that end; after ``slaveTimeout``
ms it is ``FLUSH_SLAVE_TIMEOUT`` (12); with no slave in reach it is ``SLAVE_NOT_AVAILABLE``
(11) at once. Both carry the msgId and offsets: the message is stored on the master (a client
reports them as a send status, not a failure). The put's end is the store's published tail
right after the put (a bound that covers every row of it).

A slave's master: ``haMasterAddress``, else the ``haServerAddr`` the name server answers a
slave's registration with (RocketMQ's ``updateMasterHAServerAddrPeriodically``), taken
after each registration round. The master advertises ``brokerIP1:<bound HA port>`` as its
``haServerAddr`` (RocketMQ: ``brokerIP2:haListenPort``). When ``haListenPort`` is not set and
its default (``listenPort + 1``) is taken, the master listens on a free port instead (the
registration carries it); a configured ``haListenPort`` that is taken fails the start.

Who is a slave (:meth:`Replication.admission`, :mod:`rmqnet.ha.auth`): a master streams only
to a peer on ``haSlaveAllowList`` when it is set, and, with ``aclEnable`` or cluster
credentials (``innerClientAuthenticationCredentials``) set, only to one that proves an
``admin`` account of its ACL or those credentials (a RocketMQ 4.x slave, which cannot, only by
being on the allow list). With none of the three set, any peer is a slave (RocketMQ 4.9.8's
behaviour, kept for clusters that configure nothing; the master warns at start). A slave with
cluster credentials proves them at each connection.

:class:`Replication` is a part of every broker (``broker.replication``), is one of its
services (``run_once(now_ms)``: the HA server's housekeeping, the slave's connection and
reports), and is started and closed by the broker process (:meth:`Replication.start`,
:meth:`Replication.close`); a broker built without starting it (tests of other parts) has no
HA service, and a ``SYNC_MASTER`` send then finds no slave.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import logging
from typing import TYPE_CHECKING, Any

from ..ha import HAClient, HAServer
from ..ha.auth import SlaveAdmission
from ..remoting import RemotingCommand, ResponseCode
from .acl_address import address_pattern
from .codes import SERVICE_NOT_AVAILABLE_REMARK
from .config import SLAVE, SYNC_MASTER, host_port

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)


class Replication:
    """A broker's HA side (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.role = broker.config.broker_role
        self.server: HAServer | None = None
        self.client: HAClient | None = None
        #: the ``haServerAddr`` this broker registers (a master's, once started)
        self.ha_server_addr: str | None = None

    @property
    def sync_master(self) -> bool:
        return self.role == SYNC_MASTER

    @property
    def slave(self) -> bool:
        return self.role == SLAVE

    async def start(self, host: str = "127.0.0.1", port: int | None = None) -> None:
        """Start the role's HA service: a master listens on ``host:port`` (default
        ``BrokerConfig.ha_port`` of the broker's port), a slave connects at its first round."""
        cfg = self.config
        store = self.broker.store
        if self.slave:
            self.client = HAClient(
                store,
                cfg.ha_master_address,
                clock=self.broker.clock,
                heartbeat_ms=cfg.ha_send_heartbeat_interval,
                housekeeping_ms=cfg.ha_housekeeping_interval,
                credentials=cfg.inner_credentials,
            )
            if cfg.inner_credentials is None and cfg.acl_enable:
                log.warning(
                    "HA: this slave has no innerClientAuthenticationCredentials: a master with aclEnable "
                    "streams to it only if its address is on the master's haSlaveAllowList"
                )
            return
        if port is None:
            port = cfg.ha_port(cfg.listen_port)
        server = HAServer(
            store,
            host=host,
            port=port,
            clock=self.broker.clock,
            batch_size=cfg.ha_transfer_batch_size,
            heartbeat_ms=cfg.ha_send_heartbeat_interval,
            fallbehind_max=cfg.ha_slave_fallbehind_max,
            housekeeping_ms=cfg.ha_housekeeping_interval,
            admission=self.admission(),
        )
        if server.admission.open:
            log.warning(
                "HA: any peer of the HA port is taken as a slave (aclEnable=false, and neither "
                "haSlaveAllowList nor innerClientAuthenticationCredentials is set)"
            )
        try:
            bound = await server.start()
        except OSError as exc:
            if cfg.ha_listen_port is not None or port == 0 or exc.errno != errno.EADDRINUSE:
                raise
            # the derived default (listenPort + 1) is taken (a restart on a fixed port, a client's
            # ephemeral port): any free port, since the registration carries the one bound
            log.warning("HA port %d is in use; listening on a free port instead (haServerAddr says which)", port)
            server.port = 0
            bound = await server.start()
        self.server = server
        advertise = cfg.broker_ip1 if host in ("0.0.0.0", "::") else host
        self.ha_server_addr = host_port(advertise, bound)

    def admission(self) -> SlaveAdmission:
        """The master's rule for who is a slave (see the module docstring), from the config and
        the ACL as they are now."""
        cfg = self.config
        allowed = address_pattern(cfg.ha_slave_allow_list) if cfg.ha_slave_allow_list is not None else None
        own = cfg.inner_credentials
        acl = self.broker.acl
        if acl is None and own is None:
            return SlaveAdmission(allowed)

        def secret_of(key: str) -> str | None:
            if own is not None and hmac.compare_digest(
                key.encode("utf-8", "surrogatepass"), own[0].encode("utf-8", "surrogatepass")
            ):
                return own[1]
            account = acl.config.accounts.get(key) if acl is not None else None
            return account.secret_key if account is not None and account.admin else None

        return SlaveAdmission(allowed, secret_of, require_proof=True)

    async def close(self) -> None:
        if self.server is not None:
            await self.server.stop()
        if self.client is not None:
            await self.client.close()

    def run_once(self, now_ms: int) -> None:
        if self.server is not None:
            self.server.run_once(now_ms)
        client = self.client
        if client is not None:
            if not self.config.ha_master_address:
                learned = self._registered_master()
                if learned:
                    client.set_master(learned)
            client.run_once(now_ms)

    def _registered_master(self) -> str | None:
        """The master's HA address the name servers answered the last registration with."""
        registrar = self.broker.registrar
        if registrar is not None:
            for res in registrar.results.values():
                if res.ha_server_addr:
                    return res.ha_server_addr
        return None

    # ----------------------------------------------------------------- sends
    def refuse_send(self, req: RemotingCommand, extra: dict[str, str]) -> RemotingCommand | None:
        """A slave's answer to a send (``SERVICE_NOT_AVAILABLE``); ``None`` on a master."""
        if not self.slave:
            return None
        return req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, SERVICE_NOT_AVAILABLE_REMARK, extra)

    def appended(self) -> None:
        """The master's log grew: wake the HA writers now (not at the dispatcher's signal)."""
        if self.server is not None:
            self.server.notify_appended()

    def gate(self, reply: RemotingCommand, end: int) -> RemotingCommand | asyncio.Future[Any]:
        """``SYNC_MASTER``: ``reply`` (a SUCCESS of a put ending at ``end``) as it may be sent:
        at once ``SLAVE_NOT_AVAILABLE``, or a future that is ``reply`` once a slave holds
        ``end``, ``FLUSH_SLAVE_TIMEOUT`` after ``slaveTimeout``."""
        server = self.server
        if server is None or not server.slave_ok(end):
            return _recode(reply, ResponseCode.SLAVE_NOT_AVAILABLE)
        if server.push_offset >= end:
            return reply
        server.notify_appended()

        async def wait() -> RemotingCommand:
            ok = await server.wait_for_replica(end, self.config.slave_timeout / 1000)
            return reply if ok else _recode(reply, ResponseCode.FLUSH_SLAVE_TIMEOUT)

        return asyncio.ensure_future(wait())


def _recode(reply: RemotingCommand, code: int) -> RemotingCommand:
    """``reply`` with another code, the same fields (msgId, offsets): the message is stored."""
    out = RemotingCommand(
        code,
        reply.opaque,
        flag=reply.flag,
        remark=reply.remark,
        ext_fields=dict(reply.ext_fields),
        language=reply.language,
        version=reply.version,
    )
    return out
