"""The broker: one store, its topics, the processor table and the services the process runs.

:class:`Broker` is what every processor receives as its first argument (RocketMQ's
``BrokerController``). It holds no socket and no event loop: the transport calls
``broker.table.process(broker, peer, request)`` for each request, and the process
(:mod:`rmqnet.broker.launch`) calls ``run_once(now_ms)`` of each of :attr:`Broker.services` on
a timer. Tests build one over a store and call handlers directly.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

from rmqlog import Clock, MessageStore, SystemClock

from .config import BrokerConfig
from .consumer_offsets import ConsumerOffsetTable
from .dispatch import ProcessorTable
from .processors import PROCESSOR_MODULES
from .state import StatePersistService
from .subscription_groups import SubscriptionGroupTable
from .topics import TopicManager


class BrokerService(Protocol):
    """A broker service: one round of its work as of ``now_ms`` (the clock's wall time)."""

    def run_once(self, now_ms: int) -> Any: ...


class Broker:
    """A broker over ``store`` (opened by the caller, who closes it after :meth:`stop`).

    Attributes: ``store``, ``config`` (:class:`BrokerConfig`; UPDATE_BROKER_CONFIG replaces it
    as a whole, :mod:`rmqnet.broker.admin_config`: a key it may change is read from here at
    use, never from a copy), ``clock``, ``table``
    (:class:`ProcessorTable`), ``address`` (advertised ``ip:port``), ``topics``
    (:class:`TopicManager`), ``consumer_offsets`` (:class:`ConsumerOffsetTable`),
    ``subscription_groups`` (:class:`SubscriptionGroupTable`), ``state`` (their
    :class:`StatePersistService`, one of the services), ``services`` (objects with
    ``run_once(now_ms)``), ``started_ms``
    (the clock's wall time at construction), ``stopping`` (set by :meth:`begin_stop`: sends are
    refused from then on). Processor modules (:data:`PROCESSOR_MODULES`) add their own.
    """

    def __init__(self, store: MessageStore, config: BrokerConfig, *, clock: Clock | None = None,
                 address: str | None = None) -> None:
        self.store = store
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.address = address or config.advertised(config.listen_port)
        self.table = ProcessorTable()
        self.services: list[BrokerService] = []
        self.started_ms = self.clock.wall_ms()
        self.stopping = False
        #: called by :meth:`begin_stop`, in order (the hold service answers its held pulls there,
        #: so that the server's wait for requests in flight does not wait out their timeouts)
        self.stop_listeners: list[Callable[[], object]] = []
        self.topics = TopicManager(store, config, self.clock)
        #: the state tables in memory (:mod:`rmqnet.broker.state`), persisted by ``state``
        self.consumer_offsets = ConsumerOffsetTable(store)
        self.topics.offsets = self.consumer_offsets
        self.subscription_groups = SubscriptionGroupTable(store)
        self.state = StatePersistService(lambda: self.config.flush_consumer_offset_interval, [
            ("consumer offsets", self.consumer_offsets.persist), ("subscription groups", self.subscription_groups.persist),
            ("topics", self.topics.persist)])
        self.services.append(self.state)
        for name in PROCESSOR_MODULES:
            module = importlib.import_module(f"{__package__}.{name}")
            module.install(self)

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
