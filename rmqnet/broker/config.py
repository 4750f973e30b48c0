"""The broker's configuration: RocketMQ 4.9.8's ``BrokerConfig`` keys of ``broker.conf`` that
this broker reads, plus the store's (:class:`rmqlog.StoreConfig`, read from the same file).

``broker.conf`` is a Java properties file; keys are ``BrokerConfig``'s camelCase setter names
(``brokerClusterName``, ``autoCreateTopicEnable``...), values parsed as Java parses them
(``true``/``false``, decimal integers). The file is read once by the store's reader
(:func:`rmqlog.config.read_properties`): the store's keys go to
:meth:`rmqlog.StoreConfig.from_properties`, the broker's to :class:`BrokerConfig`'s fields
below. Defaults are RocketMQ's, except ``brokerIP1`` (RocketMQ: the host's first address; here
``127.0.0.1``, so a broker is reachable only from this host unless configured otherwise) and
``brokerName`` (RocketMQ: the host name; here too).

Guarantees: a value that does not parse or is out of range raises
:class:`rmqlog.ConfigError` naming the file, the key and the value; an unknown key is
logged by the store's reader and otherwise ignored, as RocketMQ ignores it.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import socket
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rmqlog import ASYNC_FLUSH, SYNC_FLUSH, ConfigError, StoreConfig
from rmqlog.config import read_properties
from rmqlog.values import (
    InvalidValueError,
    parse_bool,
    parse_enum,
    parse_int,
)

from ..remoting.acl_address import AclPatternError, address_pattern
from ..remoting.address import AddressError, join_host_port, parse_addresses, parse_host_port
from ..remoting.credentials import CredentialsError
from ..remoting.credentials import parse_credentials as _parse_credentials

#: RocketMQ's ``MixAll.DEFAULT_TRACE_REGION_ID``: the ``MSG_REGION`` of every send reply
DEFAULT_REGION = "DefaultRegion"


def _host_name() -> str:
    # RocketMQ's default brokerName is the host name (BrokerConfig.localHostName)
    name = socket.gethostname() or "DEFAULT_BROKER"
    return name if re.fullmatch(r"[%|a-zA-Z0-9_.-]+", name) else "DEFAULT_BROKER"


@dataclass(frozen=True)
class BrokerConfig:
    """The broker's settings (RocketMQ's names in snake_case; times in ms).

    - ``broker_cluster_name`` (``brokerClusterName``, "DefaultCluster"), ``broker_name``
      (``brokerName``), ``broker_id`` (``brokerId``, 0 = master): how the broker registers.
    - ``listen_port`` (``listenPort``, 10911), ``broker_ip1`` (``brokerIP1``): where it listens
      and the address it advertises (``brokerIP1:port``).
    - ``grpc_listen_port`` (``grpcListenPort``; None: no gRPC endpoint; 0: a free port): RocketMQ
      5's gRPC protocol for its 5.x clients (:mod:`rmqnet.broker.grpc_server`), on the remoting
      port's host. RocketMQ 5 serves it from its proxy (``grpcServerPort`` 8081, started in
      the broker's process only with ``--enable-proxy``): off unless asked for, here too.
    - RocketMQ 5 proxy's receive keys (:mod:`rmqnet.broker.grpc_consumers`):
      ``min_invisible_time_mills_for_recv`` (``minInvisibleTimeMillsForRecv``, 10 000) and
      ``max_invisible_time_mills`` (``maxInvisibleTimeMills``, 12 h): a receive's invisible
      duration's bounds; ``grpc_client_consumer_min_long_polling_timeout_millis`` (5000) and
      ``..._max_...`` (20 000): a receive's long polling clamped to them.
    - ``namesrv_addr`` (``namesrvAddr``, ``;``-separated ``host:port``; None: no registration).
    - ``broker_permission`` (``brokerPermission``, 6 = read|write): a broker without the write
      bit refuses sends to ordered topics (RocketMQ's rule).
    - ``default_topic_queue_nums`` (``defaultTopicQueueNums``, 8): queues of ``TBW102``, the
      most an auto-created topic gets.
    - ``auto_create_topic_enable`` (``autoCreateTopicEnable``, true): ``TBW102`` exists and
      topics sent with ``defaultTopic=TBW102`` are created.
    - ``auto_create_subscription_group`` (``autoCreateSubscriptionGroup``, true).
    - ``cluster_topic_enable``, ``broker_topic_enable`` (true): the topics named after the
      cluster and the broker are readable and writable.
    - ``long_polling_enable`` (true), ``short_polling_time_mills`` (1000): held pulls.
    - ``notify_consumer_ids_changed_enable`` (true).
    - ``acl_enable`` (``aclEnable``, false).
    - ``enable_property_filter`` (``enablePropertyFilter``, false): pulls and heartbeats with
      ``expressionType`` SQL92 are served (RocketMQ's switch; off, such a pull is refused
      ``SYSTEM_ERROR``); see "SQL92 property filters" in docs/broker.md.
    - ``region_id`` (``regionId``), ``trace_on`` (``traceOn``): the ``MSG_REGION`` and
      ``TRACE_ON`` fields of every send reply.
    - Transactional messages (:mod:`rmqnet.broker.transactions`): ``reject_transaction_message``
      (``rejectTransactionMessage``, false: true refuses half messages with RocketMQ's remark),
      ``transaction_time_out`` (``transactionTimeOut``, 6000: a half message younger than this
      is not checked back), ``transaction_check_max`` (``transactionCheckMax``, 15: checks of
      one transaction before it is discarded), ``transaction_check_interval``
      (``transactionCheckInterval``, 60000: between two rounds of the check service).
    - ``register_name_server_period`` (30000), ``register_broker_timeout_mills`` (6000).
    - ``sync_flush_timeout`` (``syncFlushTimeout``, 5000): under ``SYNC_FLUSH``, how long a send
      waits for its group commit before it is answered ``FLUSH_DISK_TIMEOUT``.
    - ``send_queue_capacity`` (``sendThreadPoolQueueCapacity``, 10000): sends waiting for the
      store at most; more are answered ``SYSTEM_BUSY`` (RocketMQ's full send pool).
    - A connection's bounds (:class:`rmqnet.transport.Limits`, :meth:`limits`): RocketMQ's
      ``NettyServerConfig`` keys ``write_buffer_high_water_mark`` (``writeBufferHighWaterMark``,
      4 MiB here: past it no further request of the connection is served nor read until its
      unsent answers drain below ``write_buffer_low_water_mark``, 1 MiB) and
      ``server_channel_max_idle_time_seconds`` (120; 0: never), and ours:
      ``write_buffer_limit`` (``writeBufferLimit``, 64 MiB: a connection over its high mark
      whose answers in flight would take it past this is closed) and
      ``write_stall_timeout_mills`` (``writeStallTimeoutMills``, 30000: a connection with
      answers to send that sends none for this long is closed; 0: never).
    - The pull's transfer limits (RocketMQ's ``MessageStoreConfig`` keys, applied by its
      ``DefaultMessageStore.isTheBatchFull``; here by the pull processor, :mod:`rmqnet.broker.pull`,
      through the store's window read): ``max_transfer_count_on_message_in_memory`` (32) and
      ``max_transfer_bytes_on_message_in_memory`` (262144) for records RocketMQ would find in
      memory, ``max_transfer_count_on_message_in_disk`` (8) and
      ``max_transfer_bytes_on_message_in_disk`` (65536) for records further behind the
      commitlog's end than ``access_message_in_memory_max_ratio`` percent (40) of the
      machine's memory. Counts and bytes at least 1 (the first message of a pull is always
      sent, whatever its size); the ratio 0..100.
    - Replication (RocketMQ's ``MessageStoreConfig`` keys; :mod:`rmqnet.broker.replication`):
      ``broker_role`` (``brokerRole``: ``ASYNC_MASTER``, ``SYNC_MASTER`` or ``SLAVE``), the
      master's ``ha_listen_port`` (``haListenPort``; None: ``listenPort + 1`` as RocketMQ's
      ``BrokerStartup`` sets it, any free port when ``listenPort`` is 0) and the slave's
      ``ha_master_address`` (``haMasterAddress``, ``host:port``; None: the one the name server
      hands back at registration), ``ha_send_heartbeat_interval`` (5000),
      ``ha_housekeeping_interval`` (20000), ``ha_transfer_batch_size`` (32768),
      ``ha_slave_fallbehind_max`` (256 MiB), ``slave_timeout`` (``slaveTimeout``, 3000: how long
      a ``SYNC_MASTER`` send waits for a slave before ``FLUSH_SLAVE_TIMEOUT``),
      ``slave_read_enable`` (``slaveReadEnable``, false: a pull's ``suggestWhichBrokerId`` is
      always 0; true: 1 for a consumer reading further behind than the in-memory ratio).
    - Peers' credentials (ours; :mod:`rmqnet.ha.auth`, docs/access-control.md "Replication"):
      ``ha_slave_allow_list`` (``haSlaveAllowList``: the addresses a master streams to, in the
      ACL's address syntax, ``,``-separated; None: see the docs for who is let in then) and
      ``inner_client_authentication_credentials`` (``innerClientAuthenticationCredentials``,
      RocketMQ 5.3's key: ``{"accessKey": "...", "secretKey": "..."}``, the cluster's credentials:
      a slave proves itself with them to its master, the broker signs its registrations and its
      calls to other brokers with them, and a master accepts them from a slave).
    - State tables (:mod:`rmqnet.broker.state`): ``flush_consumer_offset_interval``
      (``flushConsumerOffsetInterval``, 5000: ms between two persists of the consumer offsets,
      subscription groups and topics kept in memory). Caps on what a client can grow (ours;
      RocketMQ has none): ``auto_create_topic_max_nums`` (50000: a send's auto-creation is
      refused ``TOPIC_NOT_EXIST`` once the broker holds this many topics),
      ``auto_create_subscription_group_max_nums`` (50000: a heartbeat that would create a
      subscription group past this many is refused ``SUBSCRIPTION_GROUP_NOT_EXIST``),
      ``heartbeat_max_group_nums`` (1000: a heartbeat naming more consumer and producer groups
      is refused ``SYSTEM_ERROR``), ``client_group_max_nums`` (50000: a heartbeat that would take
      the client registry's consumer or producer groups past this many is refused
      ``SYSTEM_ERROR``), ``queue_lock_max_nums`` (200000: queue locks held at most; a lock of
      one more queue is not granted).
    - Metrics (RocketMQ 5's keys; :mod:`rmqnet.broker.metrics_export`, docs/metrics.md):
      ``metrics_exporter_type`` (``metricsExporterType``, ``DISABLE``; ``PROM`` serves
      ``/metrics`` in Prometheus's text format; RocketMQ 5's ``OTLP_GRPC`` and ``LOG`` are
      refused at start, named), ``metrics_prom_exporter_host`` (``metricsPromExporterHost``,
      an IP address, ``127.0.0.1`` here: RocketMQ listens on every address) and
      ``metrics_prom_exporter_port`` (``metricsPromExporterPort``, 5557; 0: any free port).
    - ``store``: the store's config (``flushDiskType``, ``maxMessageSize``, segment sizes...).
    """

    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = field(default_factory=_host_name)
    broker_id: int = 0
    listen_port: int = 10911
    broker_ip1: str = "127.0.0.1"
    grpc_listen_port: int | None = None
    min_invisible_time_mills_for_recv: int = 10_000
    max_invisible_time_mills: int = 12 * 3600 * 1000
    grpc_client_consumer_min_long_polling_timeout_millis: int = 5000
    grpc_client_consumer_max_long_polling_timeout_millis: int = 20_000
    namesrv_addr: str | None = None
    broker_permission: int = 6
    default_topic_queue_nums: int = 8
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    notify_consumer_ids_changed_enable: bool = True
    acl_enable: bool = False
    enable_property_filter: bool = False
    region_id: str = DEFAULT_REGION
    trace_on: bool = True
    reject_transaction_message: bool = False
    transaction_time_out: int = 6000
    transaction_check_max: int = 15
    transaction_check_interval: int = 60_000
    register_name_server_period: int = 30_000
    register_broker_timeout_mills: int = 6000
    sync_flush_timeout: int = 5000
    send_queue_capacity: int = 10_000
    write_buffer_high_water_mark: int = 4 * 1024 * 1024
    write_buffer_low_water_mark: int = 1024 * 1024
    write_buffer_limit: int = 64 * 1024 * 1024
    write_stall_timeout_mills: int = 30_000
    server_channel_max_idle_time_seconds: int = 120
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    access_message_in_memory_max_ratio: int = 40
    broker_role: str = "ASYNC_MASTER"
    ha_listen_port: int | None = None
    ha_master_address: str | None = None
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20_000
    ha_transfer_batch_size: int = 32 * 1024
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    slave_timeout: int = 3000
    slave_read_enable: bool = False
    ha_slave_allow_list: str | None = None
    inner_client_authentication_credentials: str | None = None
    flush_consumer_offset_interval: int = 5000
    auto_create_topic_max_nums: int = 50_000
    auto_create_subscription_group_max_nums: int = 50_000
    heartbeat_max_group_nums: int = 1000
    client_group_max_nums: int = 50_000
    queue_lock_max_nums: int = 200_000
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_host: str = "127.0.0.1"
    metrics_prom_exporter_port: int = 5557
    store: StoreConfig = field(default_factory=StoreConfig)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name == "store":
                if not isinstance(self.store, StoreConfig):
                    raise ConfigError(f"store must be a StoreConfig, got {type(self.store).__name__}")
                continue
            value, kind = getattr(self, f.name), str(f.type)
            if value is None and "None" in kind:
                continue
            ok = (
                isinstance(value, bool)
                if kind.startswith("bool")
                else isinstance(value, int) and not isinstance(value, bool)
                if kind.startswith("int")
                else isinstance(value, str)
            )
            if not ok:
                raise ConfigError(f"{f.name} must be {kind}, got {type(value).__name__} {value!r}"[:200])
        if not 0 <= self.listen_port < 65536:
            raise ConfigError(f"listen_port must be a port number 0..65535, got {self.listen_port}")
        if self.grpc_listen_port is not None and not 0 <= self.grpc_listen_port < 65536:
            raise ConfigError(f"grpc_listen_port must be a port number 0..65535, got {self.grpc_listen_port}")
        if not 1 <= self.default_topic_queue_nums <= 65535:
            raise ConfigError("default_topic_queue_nums must be in 1..65535")
        if not 0 <= self.broker_permission <= 7:
            raise ConfigError("broker_permission must be a perm mask 0..7 (4 read, 2 write, 1 inherit)")
        if self.broker_id < 0:
            raise ConfigError("broker_id must be at least 0")
        for name in (
            "min_invisible_time_mills_for_recv",
            "max_invisible_time_mills",
            "grpc_client_consumer_min_long_polling_timeout_millis",
            "grpc_client_consumer_max_long_polling_timeout_millis",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be at least 0")
        for name in (
            "short_polling_time_mills",
            "register_name_server_period",
            "register_broker_timeout_mills",
            "sync_flush_timeout",
            "send_queue_capacity",
            "transaction_check_interval",
            *_TRANSFER_LIMITS,
            *_STATE_LIMITS,
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1")
            if name in _TRANSFER_LIMITS + _STATE_LIMITS and getattr(self, name) > _JAVA_INT_MAX:
                raise ConfigError(f"{name} must be at most {_JAVA_INT_MAX} (a Java int)")
        if self.write_buffer_high_water_mark < 1:
            raise ConfigError("write_buffer_high_water_mark must be at least 1")
        if not 0 <= self.write_buffer_low_water_mark <= self.write_buffer_high_water_mark:
            raise ConfigError("write_buffer_low_water_mark must be in 0..write_buffer_high_water_mark")
        if self.write_buffer_limit < self.write_buffer_high_water_mark:
            raise ConfigError("write_buffer_limit must be at least write_buffer_high_water_mark")
        if self.write_stall_timeout_mills < 0 or self.server_channel_max_idle_time_seconds < 0:
            raise ConfigError("write_stall_timeout_mills and server_channel_max_idle_time_seconds must be at least 0")
        if self.transaction_time_out < 0 or self.transaction_check_max < 0:
            raise ConfigError("transaction_time_out and transaction_check_max must be at least 0")
        _value(parse_enum, "broker_role", self.broker_role, BROKER_ROLES, case=True)
        if self.namesrv_addr is not None:
            _value(parse_addresses, "namesrv_addr", self.namesrv_addr)
        if self.ha_listen_port is not None and not 0 <= self.ha_listen_port < 65536:
            raise ConfigError(f"ha_listen_port must be a port number 0..65535, got {self.ha_listen_port}")
        for name in (
            "ha_send_heartbeat_interval",
            "ha_housekeeping_interval",
            "ha_transfer_batch_size",
            "ha_slave_fallbehind_max",
            "slave_timeout",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1")
        if self.ha_transfer_batch_size > _JAVA_INT_MAX:
            raise ConfigError(f"ha_transfer_batch_size must be at most {_JAVA_INT_MAX} (a Java int)")
        if self.ha_master_address:
            _value(parse_host_port, "ha_master_address", self.ha_master_address)
        if not 0 <= self.access_message_in_memory_max_ratio <= 100:
            raise ConfigError("access_message_in_memory_max_ratio must be a percentage 0..100")
        if self.ha_slave_allow_list is not None:
            try:
                address_pattern(self.ha_slave_allow_list)
            except AclPatternError as exc:
                raise ConfigError(f"ha_slave_allow_list {self.ha_slave_allow_list!r}: {exc}"[:300]) from None
        # checked now: a wrong value fails the start, not the first registration
        parse_credentials(self.inner_client_authentication_credentials, "inner_client_authentication_credentials")
        if self.metrics_exporter_type not in METRICS_EXPORTER_TYPES:
            served = (
                " (RocketMQ 5's, not served by this broker)"
                if self.metrics_exporter_type in ("OTLP_GRPC", "LOG")
                else ""
            )
            raise ConfigError(
                f"metrics_exporter_type must be one of {', '.join(METRICS_EXPORTER_TYPES)}, "
                f"got {self.metrics_exporter_type!r}{served}"
            )
        if not 0 <= self.metrics_prom_exporter_port < 65536:
            raise ConfigError(
                f"metrics_prom_exporter_port must be a port number 0..65535, got {self.metrics_prom_exporter_port}"
            )
        try:
            ipaddress.ip_address(self.metrics_prom_exporter_host)
        except ValueError:
            raise ConfigError(
                f"metrics_prom_exporter_host must be an IP address, got {self.metrics_prom_exporter_host!r}"
            ) from None
        try:
            ipaddress.ip_address(self.broker_ip1)
        except ValueError:
            raise ConfigError(f"broker_ip1 must be an IP address, got {self.broker_ip1!r}") from None
        if not self.broker_name or not re.fullmatch(r"[%|a-zA-Z0-9_.-]+", self.broker_name):
            raise ConfigError(f"broker_name {self.broker_name!r} is empty or has characters outside [%|a-zA-Z0-9_.-]")

    def limits(self) -> dict[str, int]:
        """The keyword arguments of :class:`rmqnet.transport.Limits` these keys set."""
        return {
            "write_high": self.write_buffer_high_water_mark,
            "write_low": self.write_buffer_low_water_mark,
            "write_limit": self.write_buffer_limit,
            "write_timeout_ms": self.write_stall_timeout_mills,
            "idle_ms": self.server_channel_max_idle_time_seconds * 1000,
        }

    def ha_port(self, listen_port: int) -> int:
        """The HA port to bind for a broker asked to listen on ``listen_port`` (see above)."""
        if self.ha_listen_port is not None:
            return self.ha_listen_port
        return 0 if listen_port == 0 else listen_port + 1

    @property
    def inner_credentials(self) -> tuple[str, str] | None:
        """``(accessKey, secretKey)`` of ``innerClientAuthenticationCredentials``, or None when
        unset; :class:`ConfigError` (the secret never in it) for a value that is not a JSON
        object with both, non-empty texts."""
        return parse_credentials(
            self.inner_client_authentication_credentials, "inner_client_authentication_credentials"
        )

    @property
    def slave(self) -> bool:
        """A ``SLAVE``: read-only for clients, fed by its master's HA stream."""
        return self.broker_role == SLAVE

    @property
    def flush_disk_type(self) -> str:
        """``SYNC_FLUSH`` or ``ASYNC_FLUSH`` (the store's ``flushDiskType``)."""
        return self.store.flush_disk_type

    @property
    def sync_flush(self) -> bool:
        return self.store.flush_disk_type == SYNC_FLUSH

    @property
    def max_message_size(self) -> int:
        return self.store.max_message_size

    def namesrv_list(self) -> list[str]:
        """``namesrvAddr`` split at ``;`` (RocketMQ's separator; checked at construction: no
        empty item, each ``host:port``); ``[]`` without it."""
        return [] if self.namesrv_addr is None else list(parse_addresses("namesrv_addr", self.namesrv_addr))

    def replace(self, **changes: Any) -> BrokerConfig:
        """A copy with some fields changed (:class:`ConfigError` for a name that is no field)."""
        names = {f.name for f in fields(self)}
        unknown = sorted(n for n in changes if n not in names)
        if unknown:
            raise ConfigError(f"BrokerConfig has no field {unknown[0]!r}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_properties(cls, path: str | Path | None, **overrides: Any) -> BrokerConfig:
        """The config of a ``broker.conf`` (``None``: every default); ``overrides`` (field names)
        win over the file. Raises :class:`ConfigError` naming file, key and value."""
        values: dict[str, Any] = {}
        if path is not None:
            by_key = {_camel(f.name).lower(): f for f in fields(cls) if f.name != "store"}
            by_key.update({k.lower(): by_key[v.lower()] for k, v in _ALIASES.items()})
            for key, raw in read_properties(path).items():
                f = by_key.get(key.lower())
                if f is None:
                    continue  # the store's key, or one RocketMQ reads and we do not (the store logs those)
                values[f.name] = _coerce(str(f.type), raw.strip(), f"{path}: {key}")
            store = StoreConfig.from_properties(path, **_store_overrides(values, overrides))
        else:
            store = StoreConfig(**_store_overrides(values, overrides))
        values.update({k: v for k, v in overrides.items() if k != "store"})
        values["store"] = overrides.get("store", store)
        try:
            return cls(**values)
        except TypeError as exc:  # an override that is no field
            raise ConfigError(f"BrokerConfig: {exc}") from None
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}" if path is not None else str(exc)) from None

    def advertised(self, port: int) -> str:
        """The address clients dial: ``brokerIP1:port`` (IPv6 in brackets)."""
        return host_port(self.broker_ip1, port)


#: the ``metricsExporterType`` values this broker serves (RocketMQ 5's ``MetricsExporterType``
#: also has ``OTLP_GRPC`` and ``LOG``)
METRICS_EXPORTER_TYPES = ("DISABLE", "PROM")


def _value(parse: Any, name: str, *args: Any, **kw: Any) -> Any:
    """``parse(name, *args)`` of :mod:`rmqlog.values`, its error re-raised as :class:`ConfigError`."""
    try:
        return parse(name, *args, **kw)
    except (InvalidValueError, AddressError) as exc:
        raise ConfigError(str(exc)) from None


#: RocketMQ's ``BrokerRole``
ASYNC_MASTER, SYNC_MASTER, SLAVE = "ASYNC_MASTER", "SYNC_MASTER", "SLAVE"
BROKER_ROLES = (ASYNC_MASTER, SYNC_MASTER, SLAVE)


#: ``ip:port`` (``[ip]:port`` for IPv6), the name the broker's modules use
host_port = join_host_port


#: the pull's transfer limits (MessageStoreConfig's int keys)
_TRANSFER_LIMITS = (
    "max_transfer_count_on_message_in_memory",
    "max_transfer_bytes_on_message_in_memory",
    "max_transfer_count_on_message_in_disk",
    "max_transfer_bytes_on_message_in_disk",
)
_JAVA_INT_MAX = (1 << 31) - 1
#: the state tables' schedule and caps (ints 1..Java int max)
_STATE_LIMITS = (
    "flush_consumer_offset_interval",
    "auto_create_topic_max_nums",
    "auto_create_subscription_group_max_nums",
    "heartbeat_max_group_nums",
    "client_group_max_nums",
    "queue_lock_max_nums",
)

#: broker.conf keys read under another spelling (RocketMQ's setter names)
_ALIASES = {"brokerIP1": "brokerIp1", "sendThreadPoolQueueCapacity": "sendQueueCapacity"}


def parse_credentials(text: str | None, what: str) -> tuple[str, str] | None:
    """:func:`rmqnet.remoting.credentials.parse_credentials`, its error a :class:`ConfigError`."""
    try:
        return _parse_credentials(text, what)
    except CredentialsError as exc:
        raise ConfigError(str(exc)) from None


def broker_keys() -> dict[str, str]:
    """broker.conf key (RocketMQ's spelling) -> :class:`BrokerConfig` field name, the store's
    config left out."""
    out = {_camel(f.name): f.name for f in fields(BrokerConfig) if f.name != "store"}
    for key, alias in _ALIASES.items():
        out[key] = out.pop(alias)
    return out


def parse_value(name: str, text: str, where: str) -> Any:
    """``text`` as the value of :class:`BrokerConfig` field ``name``, parsed as broker.conf's
    values are; :class:`ConfigError` naming ``where`` when it does not parse."""
    f = next(f for f in fields(BrokerConfig) if f.name == name)
    return _coerce(str(f.type), text.strip(), where)


def _store_overrides(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The store fields the broker settles: STOREHOST is the advertised address (the store
    reads it from ``brokerIP1``/``listenPort`` too, but ``--listen`` may change them)."""
    ip = overrides.get("broker_ip1", values.get("broker_ip1", "127.0.0.1"))
    port = overrides.get("listen_port", values.get("listen_port", 10911))
    out: dict[str, Any] = {}
    try:
        if isinstance(port, int) and 0 < port < 65536:
            out["store_host"] = host_port(str(ip), port)
    except ValueError:
        pass  # a bad brokerIP1 is reported by BrokerConfig's own check
    return out


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _coerce(kind: str, value: str, where: str) -> Any:
    """``value`` as a field of type ``kind``, parsed by :mod:`rmqlog.values` (the one parser
    of each kind: exactly ``true``/``false``; Java's ``Long.parseLong`` form); ``where`` names
    the file and key in the :class:`ConfigError`."""
    try:
        if kind.startswith("bool"):
            return parse_bool(where, value)
        if kind.startswith("int"):
            return parse_int(where, value)
    except InvalidValueError as exc:
        raise ConfigError(f"{where} = {value!r}: {exc.problem}") from None
    if kind.startswith("str | None") and value == "":
        return None
    return value


__all__ = [
    "BrokerConfig",
    "broker_keys",
    "parse_value",
    "ASYNC_FLUSH",
    "SYNC_FLUSH",
    "DEFAULT_REGION",
    "host_port",
    "ASYNC_MASTER",
    "SYNC_MASTER",
    "SLAVE",
    "BROKER_ROLES",
]
