"""PULL_MESSAGE (11): RocketMQ 4.9.8's ``PullMessageProcessor`` over the store's window read.

Request: :class:`rmqnet.remoting.PullMessageHeader` (``consumerGroup, topic, queueId,
queueOffset, maxMsgNums, sysFlag, commitOffset, suspendTimeoutMillis, subscription,
subVersion, expressionType``). Response extFields, always all four: ``suggestWhichBrokerId``
(0, the master, unless ``slaveReadEnable``: then 1 for a consumer whose reads lie further
behind than the in-memory ratio, :func:`suggest_broker`), ``nextBeginOffset``, ``minOffset``,
``maxOffset``; the remark is the store's status name, as Java's. On a ``SLAVE`` a
PULL_OFFSET_MOVED is answered PULL_RETRY_IMMEDIATELY and commit offsets are not stored.

Checks, in Java's order: the broker's permission (``brokerPermission`` readable, else
``NO_PERMISSION``), the topic (``TOPIC_NOT_EXIST``; not readable: ``NO_PERMISSION``), the
queue id (``SYSTEM_ERROR`` naming it, below ``readQueueNums``), the subscription: with the
subscription flag the request's own (``subscription``, ``expressionType`` TAG or absent, or
``SQL92``; an expression that does not parse: ``SUBSCRIPTION_PARSE_FAILED``), without it the
one the group's heartbeat registered (:mod:`rmqnet.broker.consumers`: ``SUBSCRIPTION_NOT_EXIST``,
``SUBSCRIPTION_NOT_LATEST`` when the registered ``subVersion`` is older; for SQL92 the
expression the heartbeat compiled: ``FILTER_DATA_NOT_EXIST`` when it did not compile,
``FILTER_DATA_NOT_LATEST`` when it is older than the pull's ``subVersion``); then a SQL92
subscription is refused ``SYSTEM_ERROR`` "The broker does not support consumer to filter
message by SQL92" unless ``enablePropertyFilter=true`` (Java's order: a malformed expression
is 23 either way). Any other expression type is refused so too (Java would, with the switch
on, deliver everything unfiltered).

A SQL92 pull (:mod:`rmqlog.filter`, "SQL92 property filters" in docs/broker.md) reads the
window as a tag filter does, each unit's record read and its properties evaluated over the
whole chunk at once: units that do not match are scanned past, so a window where nothing
matches is answered ``PULL_RETRY_IMMEDIATELY`` with ``nextBeginOffset`` past every unit
scanned, as Java's ``NO_MATCHED_MESSAGE``. Compiled expressions are cached (Java: 100 by text).

The read is :meth:`rmqlog.MessageStore.read_window` with ``raw=True``: the body is the stored
records byte-exact, handed to the transport as a list of buffers (no join, no re-encoding).
Transfer limits, MessageStoreConfig's (broker.conf keys, :class:`rmqnet.broker.config.BrokerConfig`):
at most ``maxMsgNums`` and ``maxTransferCountOnMessageInMemory`` (32) messages and, after the
first, ``maxTransferBytesOnMessageInMemory`` (256 KiB); before a unit whose record lies
further behind the commitlog's end than ``accessMessageInMemoryMaxRatio`` (40) percent of the
machine's memory (Java would read it from disk), ``maxTransferCountOnMessageInDisk`` (8) and
``maxTransferBytesOnMessageInDisk`` (64 KiB) instead: Java's ``isTheBatchFull``, unit by unit,
done by the store's window read (:class:`rmqlog.results.DiskLimits`). Statuses:

| store status | code | nextBeginOffset |
|---|---|---|
| FOUND | SUCCESS 0 | past the units scanned |
| NO_MESSAGE_IN_QUEUE, NO_MATCHED_LOGIC_QUEUE | 21 if queueOffset != 0 else 19 | 0 |
| OFFSET_OVERFLOW_ONE (offset == max) | PULL_NOT_FOUND 19 (held if suspend) | offset |
| OFFSET_FOUND_NULL | PULL_NOT_FOUND 19 (held if suspend) | min offset |
| OFFSET_OVERFLOW_BADLY | PULL_OFFSET_MOVED 21 | max offset |
| OFFSET_TOO_SMALL | PULL_OFFSET_MOVED 21 | min offset |
| NO_MATCHED_MESSAGE, MESSAGE_WAS_REMOVING | PULL_RETRY_IMMEDIATELY 20 | past the units scanned |

A 19 with the suspend flag (sysFlag bit 2) is held (:mod:`rmqnet.broker.holds`) for
``suspendTimeoutMillis``, or ``shortPollingTimeMills`` with ``longPollingEnable=false``; not
once the broker is stopping (answered at once: the client pulls again, elsewhere if need be). With
sysFlag bit 1 the request's ``commitOffset`` is stored for the group (the broker's offset
table, :mod:`rmqnet.broker.consumer_offsets`, persisted to the store's
``config/consumerOffset.json`` on its schedule), when first processed, never on a held pull's
re-run (Java's ``brokerAllowSuspend``); a negative one is not stored (the store refuses it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

import rmqlog
from rmqlog import FilterParseError, GetMessageResult, GetMessageStatus, Sql92Filter, compile_filter
from rmqlog.results import DiskLimits

from ..remoting import PullMessageHeader, RemotingCommand, ResponseCode
from ..remoting.headers import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND
from ..remoting.names import PERM_READ, PERM_WRITE
from .config import BrokerConfig
from .consumer_offsets import commit_offset
from .holds import HeldPull, watch_close
from .peer import Peer
from .subscription_groups import GroupTableFull

if TYPE_CHECKING:
    from .broker import Broker

#: MessageStoreConfig's defaults (RocketMQ 4.9.8)
MAX_TRANSFER_BYTES_IN_MEMORY = 256 * 1024
MAX_TRANSFER_COUNT_IN_MEMORY = 32
MAX_TRANSFER_BYTES_IN_DISK = 64 * 1024
MAX_TRANSFER_COUNT_IN_DISK = 8
ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO = 40
#: ``SubscriptionGroupConfig.whichBrokerWhenConsumeSlowly``: the slave a slow consumer is sent to
WHICH_BROKER_WHEN_CONSUME_SLOWLY = 1
#: BrokerConfig's defaults
SHORT_POLLING_TIME_MILLS = 1000
BROKER_PERMISSION = PERM_READ | PERM_WRITE
#: RocketMQ's ``ExpressionType``
SQL92 = "SQL92"
TAG_TYPES = (None, "", "TAG")
#: subscriptions that take every message (RocketMQ's ``SUB_ALL``; the store reads them so too)
EVERYTHING = frozenset({None, "", "*"})
#: compiled SQL92 expressions kept by text (Java's ``SelectorParser`` cache keeps 100)
PARSE_CACHE_SIZE = 256

#: What a pull reads with: (the tag expression, the compiled SQL92 filter); one of them None.
Filter = tuple[str | None, Sql92Filter | None]


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def compiled(expression: str) -> Sql92Filter:
    """:func:`rmqlog.filter.compile_filter`, cached by text (a refusal is not cached: it raises)."""
    return compile_filter(expression)


_S = GetMessageStatus
_CODE = {
    _S.FOUND: ResponseCode.SUCCESS,
    _S.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    _S.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    _S.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    _S.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    _S.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    _S.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


@functools.cache
def total_memory() -> int:
    """The machine's memory in bytes (Java's ``totalPhysicalMemorySize``, read once as Java does)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: treat everything as in memory
        return 1 << 62


def conf(broker: Broker, name: str, default: Any) -> Any:
    """``broker.config.<name>`` (BrokerConfig's snake_case field), else RocketMQ's default."""
    value = getattr(broker.config, name, None)
    return default if value is None else value


@dataclass(frozen=True)
class PullSettings:
    """What a pull reads of the broker's config (:func:`conf`'s values), taken once per config
    object: UPDATE_BROKER_CONFIG replaces ``broker.config`` (a frozen
    :class:`~rmqnet.broker.config.BrokerConfig`) as a whole, so a pull after it takes them
    again (:func:`settings`)."""

    readable: bool  # brokerPermission has PERM_READ
    broker_ip1: str
    slave: bool  # brokerRole SLAVE
    count: int  # maxTransferCountOnMessageInMemory
    nbytes: int  # maxTransferBytesOnMessageInMemory
    ratio: int  # accessMessageInMemoryMaxRatio
    disk_count: int  # maxTransferCountOnMessageInDisk
    disk_bytes: int  # maxTransferBytesOnMessageInDisk
    long_polling: bool
    short_polling_ms: int
    slave_read: bool  # slaveReadEnable
    property_filter: bool  # enablePropertyFilter
    #: DiskLimits by (the pull's maxMsgNums, the memory bytes): a few (clients use one or two counts)
    disk: dict[tuple[int, int], DiskLimits] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, broker: Broker) -> PullSettings:
        return cls(
            readable=bool(conf(broker, "broker_permission", BROKER_PERMISSION) & PERM_READ),
            broker_ip1=conf(broker, "broker_ip1", ""),
            slave=conf(broker, "broker_role", "ASYNC_MASTER") == "SLAVE",
            count=conf(broker, "max_transfer_count_on_message_in_memory", MAX_TRANSFER_COUNT_IN_MEMORY),
            nbytes=conf(broker, "max_transfer_bytes_on_message_in_memory", MAX_TRANSFER_BYTES_IN_MEMORY),
            ratio=conf(broker, "access_message_in_memory_max_ratio", ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO),
            disk_count=conf(broker, "max_transfer_count_on_message_in_disk", MAX_TRANSFER_COUNT_IN_DISK),
            disk_bytes=conf(broker, "max_transfer_bytes_on_message_in_disk", MAX_TRANSFER_BYTES_IN_DISK),
            long_polling=conf(broker, "long_polling_enable", True),
            short_polling_ms=conf(broker, "short_polling_time_mills", SHORT_POLLING_TIME_MILLS),
            slave_read=conf(broker, "slave_read_enable", False),
            property_filter=conf(broker, "enable_property_filter", False),
        )

    def disk_limits(self, nums: int) -> DiskLimits:
        """RocketMQ's on-disk limits of a pull of ``nums`` messages."""
        key = (nums, total_memory() * self.ratio // 100)
        found = self.disk.get(key)
        if found is None:
            if len(self.disk) >= 64:  # (a client cycling through counts: no growth)
                self.disk.clear()
            found = self.disk[key] = DiskLimits(
                memory=key[1], max_count=min(nums, self.disk_count), max_bytes=self.disk_bytes
            )
        return found


#: (config object, its settings) of the last pull: one broker per process, one config at a time
_settings: tuple[BrokerConfig, PullSettings] | None = None


def settings(broker: Broker) -> PullSettings:
    """The :class:`PullSettings` of ``broker.config`` as it is now: kept while it is the same
    object, taken again when it was replaced (brokers of one process take turns correctly)."""
    global _settings
    config = broker.config
    got = _settings
    if got is not None and got[0] is config:
        return got[1]
    made = PullSettings.of(broker)
    _settings = (config, made)
    return made


def topic_config(broker: Broker, topic: str) -> rmqlog.TopicConfig | None:
    """The topic's config (queues, perm), or ``None`` if the broker does not know it (the
    broker's ``TopicManager``, in memory). Raises the store's errors (a closed store:
    ``StoreClosedError``)."""
    return broker.topics.get(topic)


def store_failure(req: RemotingCommand, exc: rmqlog.StoreError) -> RemotingCommand:
    """A store error on a read path: the store closed is ``SERVICE_NOT_AVAILABLE``, an
    argument the store refused or damage it found is ``SYSTEM_ERROR``; the remark names it."""
    code = ResponseCode.SERVICE_NOT_AVAILABLE if isinstance(exc, rmqlog.StoreClosedError) else ResponseCode.SYSTEM_ERROR
    return req.reply(code, f"{type(exc).__name__}: {exc}")


# ---------------------------------------------------------------------------- handler
def pull_message(broker: Broker, peer: Peer, req: RemotingCommand) -> Any:
    """The PULL_MESSAGE handler: the response, or a future of it when the pull is held."""
    return process(broker, peer, req, allow_suspend=True)


def process(
    broker: Broker, peer: Peer, req: RemotingCommand, *, allow_suspend: bool, held: HeldPull | None = None
) -> Any:
    """One pull (Java's ``processRequest``): the response, or with ``allow_suspend`` a future
    of it when the pull is held. ``held``: the re-run of a held pull (its header and
    subscription as first checked; no new hold, no commit)."""
    h: PullMessageHeader = held.state["header"] if held is not None else PullMessageHeader.read(req.ext_fields)
    got = settings(broker)
    try:
        if held is not None:
            flt: Filter = held.state["filter"]
        else:
            checked = _check(broker, peer, req, h, got)
            if isinstance(checked, RemotingCommand):
                return checked
            flt = checked
        result = _read(broker, h, flt, got)
    except rmqlog.StoreError as exc:
        return store_failure(req, exc)
    status = result.status
    if status in (_S.NO_MESSAGE_IN_QUEUE, _S.NO_MATCHED_LOGIC_QUEUE):
        code = ResponseCode.PULL_OFFSET_MOVED if h.queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
    else:
        code = _CODE[status]
    if code == ResponseCode.PULL_OFFSET_MOVED and got.slave:
        code = ResponseCode.PULL_RETRY_IMMEDIATELY  # a slave corrects no offset (offsetCheckInSlave off)
    ext = {
        "suggestWhichBrokerId": suggest_broker(broker, result, got) if got.slave_read else 0,
        "nextBeginOffset": result.next_begin_offset,
        "minOffset": result.min_offset,
        "maxOffset": result.max_offset,
    }
    res: Any = req.reply(code, status.name, ext)
    if code == ResponseCode.SUCCESS:
        assert result.records is not None
        res.body = [memoryview(result.records.data)]
        # consumeTps of GET_CONSUME_STATS (admin_stats)
        found = len(result.records.commit_log_offsets)
        broker.get_nums.record(h.consumer_group, h.topic, found, broker.clock.wall_ms())
        broker.metrics.on_pull(
            h.topic, h.consumer_group, h.queue_id, found, len(result.records.data), result.next_begin_offset
        )
    elif code == ResponseCode.PULL_NOT_FOUND and allow_suspend and h.sys_flag & PULL_SUSPEND:
        holds = broker.holds
        if not broker.stopping and _in_event_loop():
            wait = h.suspend_timeout_millis if got.long_polling else got.short_polling_ms
            res = holds.hold(
                peer,
                req,
                h.topic,
                h.queue_id,
                h.queue_offset,
                broker.clock.wall_ms() + wait,
                {"header": h, "filter": flt, "broker": broker},
            )
            watch_close(broker, peer)
    if allow_suspend and h.sys_flag & PULL_COMMIT_OFFSET and h.commit_offset >= 0 and not got.slave:
        # Java stores it unchecked; one the store refuses (a bad group name) must not fail the pull
        with contextlib.suppress(rmqlog.StoreError):  # into the broker's table, in memory
            commit_offset(broker, h.consumer_group, h.topic, h.queue_id, h.commit_offset)
    return res


def suggest_broker(broker: Broker, result: GetMessageResult, got: PullSettings | None = None) -> int:
    """``suggestWhichBrokerId`` (``PullMessageProcessor``): 0, the master, unless
    ``slaveReadEnable``; then 1 (the group's ``whichBrokerWhenConsumeSlowly``) when the last
    record read lies further behind the commitlog's end than ``accessMessageInMemoryMaxRatio``
    percent of the machine's memory (``getMessage``'s ``suggestPullingFromSlave``: the
    consumer is slow, its reads would go to disk), else 0 (the group's ``brokerId``)."""
    got = got if got is not None else settings(broker)
    if not got.slave_read:
        return 0
    records = result.records
    if records is None or not len(records):
        return 0
    behind = broker.store.published_tail() - int(records.commit_log_offsets[-1])
    return WHICH_BROKER_WHEN_CONSUME_SLOWLY if behind > total_memory() * got.ratio // 100 else 0


def _in_event_loop() -> bool:
    """Whether a pull can be held: only a handler running on an event loop can return a
    future (a caller without one gets the 19 at once, as with the suspend flag off)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _group_refusal(broker: Broker, req: RemotingCommand, group: str) -> RemotingCommand | None:
    """Java's ``findSubscriptionGroupConfig`` of a pull: the group is found (or created with
    ``autoCreateSubscriptionGroup``, in memory: one dict lookup when it exists); unknown and
    not created is SUBSCRIPTION_GROUP_NOT_EXIST (26), a group whose ``consumeEnable`` is off
    NO_PERMISSION (16), with RocketMQ's remarks."""
    config = broker.config
    try:
        sub_group = broker.subscription_groups.find_or_create(
            group, auto_create=config.auto_create_subscription_group, cap=config.auto_create_subscription_group_max_nums
        )
    except GroupTableFull as exc:
        return req.reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, str(exc))
    if sub_group is None:
        return req.reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist")
    if not sub_group.consume_enable:
        return req.reply(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
    return None


def _check(
    broker: Broker, peer: Peer, req: RemotingCommand, h: PullMessageHeader, got: PullSettings
) -> RemotingCommand | Filter:
    """The request's checks in Java's order: a refusal, or the filter to read with."""
    if not got.readable:
        return req.reply(ResponseCode.NO_PERMISSION, f"the broker[{got.broker_ip1}] pulling message is forbidden")
    refused = _group_refusal(broker, req, h.consumer_group)
    if refused is not None:
        return refused
    tc = topic_config(broker, h.topic)
    if tc is None:
        return req.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
    if not tc.perm & PERM_READ:
        return req.reply(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden")
    if not 0 <= h.queue_id < tc.read_queue_nums:
        return req.reply(
            ResponseCode.SYSTEM_ERROR,
            f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
            f"topicConfig.readQueueNums:[{tc.read_queue_nums}] consumer:[{peer.remote}]",
        )
    sql: Sql92Filter | None = None
    if h.sys_flag & PULL_SUBSCRIPTION:
        expression_type, subscription = h.expression_type, h.subscription
        if expression_type == SQL92:
            try:
                sql = compiled(subscription or "")
            except FilterParseError:
                return req.reply(ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed")
    else:
        registry = broker.consumers
        sub = registry.find_subscription(h.consumer_group, h.topic)
        if sub is None:
            return req.reply(ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist")
        if sub.sub_version < h.sub_version:
            return req.reply(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
        expression_type, subscription = sub.expression_type, sub.sub_string
        if expression_type == SQL92:
            found = registry.find_filter(h.consumer_group, h.topic)
            if found is None:
                return req.reply(
                    ResponseCode.FILTER_DATA_NOT_EXIST,
                    "The broker's consumer filter data is not exist!Your expression may be wrong!",
                )
            if found[0] < h.sub_version:
                return req.reply(ResponseCode.FILTER_DATA_NOT_LATEST, "the consumer's consumer filter data not latest")
            sql = found[1]
    if expression_type not in TAG_TYPES:
        if expression_type != SQL92 or not got.property_filter:
            return req.reply(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {expression_type}",
            )
        return None, sql
    if subscription not in EVERYTHING:  # (the usual "*" needs no parse: the read takes it as is)
        try:
            rmqlog.parse_tag_filter(subscription)
        except rmqlog.StoreError:
            return req.reply(ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed")
    return subscription, None


def _read(broker: Broker, h: PullMessageHeader, flt: Filter, got: PullSettings) -> GetMessageResult:
    """The window read under RocketMQ's transfer limits (``DefaultMessageStore.isTheBatchFull``):
    each unit judged by where its record lies, in memory or on disk (more than
    ``accessMessageInMemoryMaxRatio`` percent of the machine's memory behind the commitlog's
    end: Java's ``checkInDiskByCommitOffset``), the store applying the rule per unit."""
    nums = max(h.max_msg_nums, 1)  # Java takes the first message whatever maxMsgNums says
    result: GetMessageResult = broker.store.read_window(
        h.topic,
        h.queue_id,
        h.queue_offset,
        max_count=min(nums, got.count),
        max_bytes=got.nbytes,
        tags=flt[0],
        raw=True,
        disk=got.disk_limits(nums),
        sql92=flt[1],
    )
    return result


def disk_limited(
    sizes: np.ndarray, in_disk: np.ndarray, mem_count: int, disk_count: int, mem_bytes: int, disk_bytes: int
) -> int:
    """How many of the records (sizes in queue order) Java's ``isTheBatchFull`` keeps when
    each is judged by its own place (``in_disk``): record ``i`` (never the first) ends the
    batch when the ``i`` taken reach its count limit or its size carries the bytes past its
    byte limit. The rule as stated over records alone: the pull has the store apply it per
    unit (:class:`rmqlog.results.DiskLimits`), filtered-out units included as Java does;
    the tests pin the two against each other."""
    before = np.arange(len(sizes))
    bytes_before = np.cumsum(sizes) - sizes
    full = np.where(
        in_disk,
        (before >= disk_count) | (bytes_before + sizes > disk_bytes),
        (before >= mem_count) | (bytes_before + sizes > mem_bytes),
    )
    full[0] = False
    stops = np.flatnonzero(full)
    return int(stops[0]) if len(stops) else len(sizes)


def rerun_held(held: HeldPull, final: bool) -> RemotingCommand | None:
    """A held pull re-run (Java's ``executeRequestWhenWakeup``, suspend not allowed; the
    broker's :class:`~rmqnet.broker.holds.PullHoldService` calls it): on a wake-up, ``None``
    (keep holding) unless something matching arrived; at the deadline, whatever the pull gives."""
    broker: Broker = held.state["broker"]  # (kept by the pull that held it)
    res = process(broker, held.peer, held.request, allow_suspend=False, held=held)
    if (
        not final
        and res.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY)
        and res.remark != _S.MESSAGE_WAS_REMOVING.name
    ):
        return None
    return res
