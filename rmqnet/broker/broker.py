"""The broker: one store, its state tables, its services and its processor table, declared.

:class:`Broker` is what every processor receives as its first argument (RocketMQ's
``BrokerController``). Every part is a typed field, built in :meth:`Broker.__init__` in the
order the parts need each other; the request codes and their handlers are one table,
:func:`rmqnet.broker.processors.processor_table`. It holds no socket and no event loop: the
transport calls ``broker.table.process(broker, peer, request)`` for each request, and the
process (:mod:`rmqnet.broker.launch`) calls ``run_once(now_ms)`` of each of
:attr:`Broker.services` on a timer and :meth:`Broker.close` at a clean stop. Tests build one
over a store and call handlers directly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from rmqlog import Clock, MessageStore, SystemClock

from . import pop_remoting, pull
from .acl import AccessValidator
from .acl_files import load_home
from .admin_stats import GetNums
from .config import BrokerConfig
from .consumer_offsets import ConsumerOffsetTable
from .consumers import ClientRegistry
from .dispatch import ProcessorTable
from .holds import PullHoldService
from .locks import QueueLocks
from .metrics import BrokerMetrics, RateSampler
from .pop import PopService
from .pop_remoting import PopHoldService
from .processors import processor_table
from .registration import Registrar
from .replication import Replication
from .send import SendService
from .send_back import SendBackService
from .slave_sync import SlaveSynchronize
from .state import StatePersistService
from .subscription_groups import SubscriptionGroupTable
from .topics import TopicManager
from .transaction_check import TransactionCheckService
from .transactions import TransactionService

log = logging.getLogger(__name__)


class BrokerService(Protocol):
    """A broker service: one round of its work as of ``now_ms`` (the clock's wall time)."""

    def run_once(self, now_ms: int) -> object: ...


class Broker:
    """A broker over ``store`` (opened by the caller, who closes it after :meth:`close`).

    ``config`` (:class:`BrokerConfig`) is replaced as a whole by UPDATE_BROKER_CONFIG
    (:mod:`rmqnet.broker.admin_config`): a key it may change is read from ``broker.config`` at
    use, never from a copy. ``address`` is the advertised ``ip:port``; ``started_ms`` the
    clock's wall time at construction; ``stopping`` is set by :meth:`begin_stop` (sends are
    refused from then on). The other fields are listed, with what each needs, in
    :meth:`__init__`.
    """

    def __init__(
        self,
        store: MessageStore,
        config: BrokerConfig,
        *,
        clock: Clock | None = None,
        address: str | None = None,
        background_persist: bool = False,
    ) -> None:
        """Build every part, in this order (each needs only what is above it);
        ``background_persist``: the state tables' persist rounds run in a thread of their own
        (the broker's process; :mod:`rmqnet.broker.state`). Raises what
        the parts raise at start: the store's errors (an unreadable table file), the ACL's
        :class:`~rmqnet.broker.acl_files.AclConfigError` with ``aclEnable=true``."""
        self.store = store
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.address = address or config.advertised(config.listen_port)
        self.started_ms = self.clock.wall_ms()
        self.stopping = False
        #: called by :meth:`begin_stop`, in order (the hold service answers its held pulls there,
        #: so that the server's wait for requests in flight does not wait out their timeouts)
        self.stop_listeners: list[Callable[[], object]] = []

        # ---- the state tables, in memory (RocketMQ's TopicConfigManager, ConsumerOffsetManager,
        # SubscriptionGroupManager), persisted together on a schedule (rmqnet.broker.state)
        self.topics = TopicManager(store, lambda: self.config, self.clock)  # subscribes to the store's arrivals first
        self.consumer_offsets = ConsumerOffsetTable(store)
        self.topics.offsets = self.consumer_offsets  # a topic's delete forgets its offsets
        self.subscription_groups = SubscriptionGroupTable(store, self.clock)
        self.state = StatePersistService(
            lambda: self.config.flush_consumer_offset_interval,
            [
                ("consumer offsets", self.consumer_offsets.persist),
                ("subscription groups", self.subscription_groups.persist),
                ("topics", self.topics.persist),
            ],
            background=background_persist,
        )

        # ---- the services of the request families (their codes: rmqnet.broker.processors)
        #: sends (10, 310, 320): batched puts, the group commit
        self.sender = SendService(self)
        #: send-backs (36): retries and dead letters
        self.send_back = SendBackService(self)
        #: half messages and END_TRANSACTION (37); reads the op queue's ended transactions now
        self.transactions = TransactionService(self)
        #: the check-back of open transactions (CHECK_TRANSACTION_STATE 39 sent to producers)
        self.transaction_check = TransactionCheckService(self, self.transactions)
        #: messages pulled per group and topic (GET_CONSUME_STATS' consumeTps; the pull records)
        self.get_nums = GetNums()
        #: the configuration's DataVersion (GET_BROKER_CONFIG; UPDATE_BROKER_CONFIG moves it)
        self.config_version: dict[str, int] = {"counter": 0, "timestamp": self.clock.wall_ms()}
        #: the client registry (34, 35, 38; NOTIFY_CONSUMER_IDS_CHANGED 40 sent), expiry on its rounds
        self.consumers = ClientRegistry()
        #: held pulls (long polling), woken by the store's arrival signal (after the topics')
        self.holds = PullHoldService(pull.rerun_held)
        store.wire.on_arrival(self.holds.notify_arrivals)
        # at a stop the held pulls are answered before the server waits for requests in flight
        # (else each holds the stop for the whole grace period and its client sees the connection drop)
        self.stop_listeners.append(self.holds.close)
        #: queue locks of orderly consumption (41, 42); its rounds drop the expired
        self.queue_locks = QueueLocks()
        #: RocketMQ's plain ACL checked before every handler (``aclEnable``; None: off). Reads
        #: the ACL files under ``$ROCKETMQ_HOME`` now: an error there stops the start
        self.acl: AccessValidator | None = AccessValidator(load_home()) if config.acl_enable else None
        #: ``brokerRole``'s HA side (started by the process: :meth:`Replication.start`)
        self.replication = Replication(self)
        #: a SLAVE's copy of its master's topics, offsets and delay offsets (None on a master)
        self.slave_sync: SlaveSynchronize | None = SlaveSynchronize(self) if config.slave else None
        #: held pops (long polling of 200050), woken by the store's arrival signal and by
        #: orderly acks that free a queue
        self.pop_holds = PopHoldService(pop_remoting.rerun_held, lambda: self.pop.synced())
        store.wire.on_arrival(self.pop_holds.notify_arrivals)
        self.stop_listeners.append(self.pop_holds.close)
        #: POP consumption (200050, 200051, 200053 and the gRPC endpoint's receive, ack and
        #: change): checkpoints in the store's POP log, loaded now; its rounds revive
        self.pop = PopService(self)
        #: the registration with the name servers: added by the process once the HA address
        #: is known (:meth:`add_registrar`; None: not registering)
        self.registrar: Registrar | None = None

        #: the figures of /metrics and of the runtime info's rates (rmqnet.broker.metrics)
        self.metrics = BrokerMetrics(self)
        #: stored and pulled messages per second over 10 s, 1 min, 10 min (putTps, getTransferedTps)
        self.rates = RateSampler(self)
        #: the open connections now (set by the process: its server's count; None: not known)
        self.connection_count: Callable[[], int] | None = None

        #: what the process runs every round (:meth:`run_services`), in this order
        self.services: list[BrokerService] = [
            self.state,
            self.transaction_check,
            self.consumers,
            self.holds,
            self.queue_locks,
            self.get_nums,
            self.replication,
            self.pop_holds,
            self.pop,
            self.rates,
        ]
        if self.slave_sync is not None:
            self.services.append(self.slave_sync)
        #: request code -> handler, and the hooks before every handler (the ACL's)
        self.table: ProcessorTable = processor_table(self)

    def add_registrar(self, registrar: Registrar) -> None:
        """Register with the name servers from now on: ``registrar`` is :attr:`registrar` and
        runs with the services (a slave learns its master's addresses from its answers)."""
        self.registrar = registrar
        self.services.append(registrar)

    def run_services(self, now_ms: int | None = None) -> None:
        """One round of every service as of ``now_ms`` (default: the clock's wall time). A
        failing service does not stop the others; the first error is raised after all ran."""
        now = self.clock.wall_ms() if now_ms is None else now_ms
        first: BaseException | None = None
        for service in list(self.services):
            try:
                service.run_once(now)
            except Exception as exc:  # every service gets its round (the process logs the error)
                first = first or exc
        if first is not None:
            raise first

    def begin_stop(self) -> None:
        """From now on refuse new sends (SERVICE_NOT_AVAILABLE); requests in flight finish;
        then every stop listener runs (once: a second call does nothing)."""
        if self.stopping:
            return
        self.stopping = True
        for listener in self.stop_listeners:
            listener()

    async def close(self) -> None:
        """At a clean stop, after the requests in flight were answered: the state tables' last
        persist, any pull still held answered, the HA service stopped, any pop still held
        answered, the POP log synced and closed, the slave's sync stopped, the registrar's
        unregistration, in that order; one failing does not stop the others (its error is
        logged). The store is the caller's to close."""
        closes: list[Callable[[], object]] = [
            self.state.close,
            self.holds.close,
            self.replication.close,
            self.pop_holds.close,
            self.pop.close,
        ]
        if self.slave_sync is not None:
            closes.append(self.slave_sync.close)
        if self.registrar is not None:
            closes.append(self.registrar.close)
        for close in closes:
            try:
                result = close()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("stopping a broker service failed")
