"""Options of the ``rmqlog`` source and sink, parsed and validated once into frozen dataclasses.

Every error is a :class:`spark_rmq.errors.RmqLogOptionError` naming the option. Spark hands
options over case-insensitively, so they are looked up in lower case; unknown options are
rejected (a misspelt ``maxMessagesPerTrigger`` silently reading everything is worse than an
error).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rmqlog import parse_tag_filter
from rmqlog.arguments import JAVA_INT_MAX
from rmqlog.errors import StoreError
from rmqlog.paths import root_arg, validate_group
from rmqlog.values import parse_enum, parse_list

from .errors import RmqLogOptionError
from .option_values import EARLIEST_OFFSET as EARLIEST_OFFSET
from .option_values import LATEST_OFFSET as LATEST_OFFSET
from .option_values import (
    bool_option,
    count_value,
    option_value,
    parse_name_server,
    parse_sql92,
    parse_wire_offsets_json,
    positive_int,
    strict,
    valid_topic,
)
from .option_values import broker_name_problem as broker_name_problem
from .option_values import parse_duration_ms as parse_duration_ms
from .option_values import parse_offsets_json as parse_offsets_json
from .option_values import parse_timestamp_ms as parse_timestamp_ms

EARLIEST = "earliest"
LATEST = "latest"
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
DEFAULT_READ_BATCH_ROWS = 65536
DEFAULT_PACK_MESSAGES = 65536

#: Options Spark itself adds to the map a source or sink receives.
_SPARK_OPTIONS = {"path", "checkpointlocation", "queryname"}

#: the source's option names as written (for messages naming one)
SOURCE_OPTION_NAMES = (
    "path",
    "topics",
    "topicPattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "endingOffsets",
    "endingTimestamp",
    "maxMessagesPerTrigger",
    "maxBytesPerTrigger",
    "minMessagesPerTrigger",
    "maxTriggerDelay",
    "maxMessagesPerPartition",
    "packMessagesPerPartition",
    "tags",
    "sql92",
    "group",
    "failOnDataLoss",
    "readBatchRows",
    "checkCRC",
    "key",
    "msgId",
    "deliverDue",
    "readOnly",
    "nameServer",
    "columns",
    "consumeMode",
    "invisibleTime",
)
SOURCE_OPTIONS = {n.lower() for n in SOURCE_OPTION_NAMES}
SINK_OPTIONS = {
    "path",
    "topic",
    "queueselector",
    "shardingkey",
    "writerid",
    "nameserver",
    "sendretrytimeout",
    "bufferbytes",
}
#: the sink's ``bufferBytes`` default: a task holds at most this many bytes of encoded records
DEFAULT_BUFFER_BYTES = 256 << 20
#: options that act on a store's files: refused with ``nameServer`` (the broker owns its files:
#: it dispatches and delivers by itself, and the client checks every record's CRC)
PATH_ONLY_SOURCE_OPTIONS = ("readOnly", "deliverDue", "checkCRC")
#: ``consumeMode``: ``offsets`` (reads at offsets the query plans) or ``pop`` (RocketMQ 5's POP
#: for a group: :mod:`spark_rmq.pop_source`)
CONSUME_MODES = ("offsets", "pop")
#: the options a ``consumeMode=pop`` read takes (every other is refused, naming it)
POP_SOURCE_OPTIONS = (
    "nameServer",
    "topics",
    "group",
    "consumeMode",
    "invisibleTime",
    "maxMessagesPerTrigger",
    "tags",
    "columns",
)
#: ``invisibleTime``'s default: a popped message's time to be committed by its micro-batch
DEFAULT_INVISIBLE_MS = 5 * 60 * 1000


def _check_unknown(options: Mapping[str, str], known: set[str]) -> None:
    if not isinstance(options, Mapping):
        raise RmqLogOptionError(
            "options", f"must be a mapping of option names to strings, got {type(options).__name__}"
        )
    for key in options:
        if not isinstance(key, str):
            raise RmqLogOptionError(str(key), f"an option name must be a string, got {type(key).__name__}")
        if key.lower() not in known and key.lower() not in _SPARK_OPTIONS:
            raise RmqLogOptionError(key, f"unknown option; known: {', '.join(sorted(known))}")


@dataclass(frozen=True)
class SourceOptions:
    """What the ``rmqlog`` source was asked to read. Picklable; built once on the driver."""

    path: str  # "" when the store is reached over the wire (``name_server``)
    topics: tuple[str, ...] | None = None
    topic_pattern: str | None = None
    assign: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    starting: str | dict[str, int] | None = None  # None: latest for streams, earliest for batch
    starting_timestamp: int | None = None
    ending: str | dict[str, int] | None = None
    ending_timestamp: int | None = None
    max_messages: int | None = None
    max_bytes: int | None = None
    min_messages: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    max_messages_per_partition: int | None = None
    #: ``packMessagesPerPartition``: queues with fewer messages than this in a batch share
    #: tasks of at most this many (:func:`spark_rmq.offsets.pack_ranges`); 0: a task per queue
    pack_messages: int = DEFAULT_PACK_MESSAGES
    tags: frozenset[str] | None = None
    #: ``sql92``: RocketMQ's SQL92 selector over the messages' properties (only matching
    #: messages are read; :mod:`rmqlog.filter`), checked here, compiled by each task
    sql92: str | None = None
    group: str | None = None
    fail_on_data_loss: bool = True
    read_batch_rows: int = DEFAULT_READ_BATCH_ROWS
    check_crc: bool = True
    deliver_due: bool = True  # stream: a scheduler pass before each micro-batch is planned
    key: str | None = None  # batch: the messages of ``topics`` carrying this KEYS token (index files)
    msg_id: str | None = None  # batch: the message with this client msgId (UNIQ_KEY) in ``topics``
    read_only: bool = False  # open the store read-only: no dispatch, no delivery, nothing written
    #: ``nameServer``: the name servers (``host:port``, several separated by ``;``) of the
    #: brokers to read from over the wire, in place of ``path`` (:mod:`spark_rmq.wire_source`)
    name_server: str | None = None
    #: ``columns``: the message schema's columns to read, in this order (``None``: all); the
    #: source's schema follows it, and only these columns are decoded and handed to Spark
    columns: tuple[str, ...] | None = None
    #: ``consumeMode``: ``offsets`` or ``pop`` (a stream of a group's POP, acked at commit)
    consume_mode: str = "offsets"
    #: ``invisibleTime`` (ms): how long a popped message stays invisible to the group's other pops
    invisible_ms: int = DEFAULT_INVISIBLE_MS

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        _check_unknown(options, SOURCE_OPTIONS)
        if (raw := option_value(options, "consumeMode")) is not None and strict(
            "consumeMode", parse_enum, raw, CONSUME_MODES
        ) == "pop":
            return cls._parse_pop(options, streaming)
        if option_value(options, "invisibleTime") is not None:
            raise RmqLogOptionError("invisibleTime", "only applies with consumeMode=pop")
        path, name_server = _path_or_name_server(options)
        if name_server is not None:
            for name in PATH_ONLY_SOURCE_OPTIONS:
                if option_value(options, name) is not None:
                    raise RmqLogOptionError(
                        name, "only applies to a store read from its files (path), not with nameServer"
                    )
        given = [n for n in ("topics", "topicPattern", "assign") if option_value(options, n) is not None]
        if len(given) != 1:
            raise RmqLogOptionError(
                "topics", f"exactly one of topics, topicPattern or assign must be set, got {given or 'none'}"
            )
        kw: dict[str, Any] = {"path": path, "name_server": name_server}
        if (raw := option_value(options, "topics")) is not None:
            names = strict("topics", parse_list, raw)
            kw["topics"] = tuple(sorted(valid_topic("topics", t) for t in names))
        if (raw := option_value(options, "topicPattern")) is not None:
            try:
                re.compile(raw)
            except (re.error, OverflowError, RecursionError) as exc:  # a repeat count too large, nesting too deep
                raise RmqLogOptionError("topicPattern", f"is not a valid regex: {exc}") from None
            kw["topic_pattern"] = raw
        if (raw := option_value(options, "assign")) is not None:
            kw["assign"] = _parse_assign(raw)
        kw["starting"] = _start_or_end(options, "startingOffsets", wire=name_server is not None)
        if (raw := option_value(options, "startingTimestamp")) is not None:
            if option_value(options, "startingOffsets") is not None:
                raise RmqLogOptionError("startingTimestamp", "cannot be combined with startingOffsets")
            kw["starting_timestamp"] = parse_timestamp_ms("startingTimestamp", raw)
        for name in ("endingOffsets", "endingTimestamp"):
            if streaming and option_value(options, name) is not None:
                raise RmqLogOptionError(name, "is for batch reads only (spark.read)")
        kw["ending"] = _start_or_end(options, "endingOffsets", wire=name_server is not None)
        if (raw := option_value(options, "endingTimestamp")) is not None:
            if kw["ending"] is not None:
                raise RmqLogOptionError("endingTimestamp", "cannot be combined with endingOffsets")
            kw["ending_timestamp"] = parse_timestamp_ms("endingTimestamp", raw)
        if kw["ending"] == EARLIEST:
            raise RmqLogOptionError("endingOffsets", "must be latest or JSON, not earliest")
        kw["max_messages"] = positive_int(options, "maxMessagesPerTrigger")
        kw["max_bytes"] = positive_int(options, "maxBytesPerTrigger")
        kw["min_messages"] = positive_int(options, "minMessagesPerTrigger")
        if (raw := option_value(options, "maxTriggerDelay")) is not None:
            kw["max_trigger_delay_ms"] = parse_duration_ms("maxTriggerDelay", raw)
        if kw["min_messages"] and kw["max_messages"] and kw["min_messages"] > kw["max_messages"]:
            raise RmqLogOptionError("minMessagesPerTrigger", "must not exceed maxMessagesPerTrigger")
        kw["max_messages_per_partition"] = positive_int(options, "maxMessagesPerPartition")
        if (raw := option_value(options, "packMessagesPerPartition")) is not None:
            kw["pack_messages"] = count_value(raw, "packMessagesPerPartition", 0)
        if (raw := option_value(options, "tags")) is not None:
            wanted = parse_tag_filter(raw)  # _get refused what it would
            kw["tags"] = frozenset(wanted) if wanted is not None else None
        if (raw := option_value(options, "sql92")) is not None:
            kw["sql92"] = parse_sql92(raw)
        if (raw := option_value(options, "group")) is not None:
            try:
                kw["group"] = validate_group(raw)
            except StoreError as exc:
                raise RmqLogOptionError("group", f"invalid group {raw!r}: {exc}") from None
        kw["fail_on_data_loss"] = bool_option(options, "failOnDataLoss", True)
        kw["read_batch_rows"] = positive_int(options, "readBatchRows") or DEFAULT_READ_BATCH_ROWS
        kw["check_crc"] = bool_option(options, "checkCRC", True)
        kw["read_only"] = bool_option(options, "readOnly", False)
        kw["deliver_due"] = bool_option(options, "deliverDue", not kw["read_only"])
        if kw["read_only"] and kw["deliver_due"]:
            raise RmqLogOptionError("deliverDue", "cannot be true with readOnly (delivering writes into the store)")
        if kw["read_only"] and kw.get("group") is not None:
            raise RmqLogOptionError(
                "group", "cannot be set with readOnly (committing the group's offsets writes into the store)"
            )
        kw["columns"] = parse_columns(options)
        _key_options(options, kw, streaming)
        return cls(**kw)

    @classmethod
    def _parse_pop(cls, options: Mapping[str, str], streaming: bool) -> SourceOptions:
        """``consumeMode=pop``: a stream of ``group``'s POP of ``topics`` through ``nameServer``."""
        if not streaming:
            raise RmqLogOptionError(
                "consumeMode",
                "pop is for streams (spark.readStream): its messages are acked when their micro-batch commits",
            )
        allowed = {n.lower() for n in POP_SOURCE_OPTIONS} | _SPARK_OPTIONS
        for key in options:
            if key.lower() not in allowed:
                shown = next((n for n in SOURCE_OPTION_NAMES if n.lower() == key.lower()), key)
                raise RmqLogOptionError(
                    shown, f"does not apply with consumeMode=pop (it takes {', '.join(POP_SOURCE_OPTIONS)})"
                )
        if option_value(options, "path"):
            raise RmqLogOptionError(
                "path", "does not apply with consumeMode=pop (POP is served by brokers: nameServer)"
            )
        for name in ("nameServer", "topics", "group"):
            if option_value(options, name) is None:
                raise RmqLogOptionError(name, "is required with consumeMode=pop")
        kw: dict[str, Any] = {
            "path": "",
            "consume_mode": "pop",
            "name_server": parse_name_server(option_value(options, "nameServer") or ""),
        }
        kw["topics"] = tuple(
            sorted(valid_topic("topics", t) for t in strict("topics", parse_list, option_value(options, "topics")))
        )
        group = option_value(options, "group") or ""
        try:
            kw["group"] = validate_group(group)
        except StoreError as exc:
            raise RmqLogOptionError("group", f"invalid group {group!r}: {exc}") from None
        if (raw := option_value(options, "invisibleTime")) is not None:
            kw["invisible_ms"] = parse_duration_ms("invisibleTime", raw)
            if kw["invisible_ms"] < 1:
                raise RmqLogOptionError("invisibleTime", f"must be at least 1 ms, got {raw!r}")
        kw["max_messages"] = positive_int(options, "maxMessagesPerTrigger")
        if (raw := option_value(options, "tags")) is not None:
            wanted = parse_tag_filter(raw)
            kw["tags"] = frozenset(wanted) if wanted is not None else None
        kw["columns"] = parse_columns(options)
        return cls(**kw)

    @property
    def pack_budget(self) -> int:
        """Messages a task of packed ranges may hold: ``packMessagesPerPartition``, and no more
        than ``maxMessagesPerPartition`` (a queue cut into tasks stays cut)."""
        if self.max_messages_per_partition is None:
            return self.pack_messages
        return min(self.pack_messages, self.max_messages_per_partition)

    @property
    def limited(self) -> bool:
        return bool(self.max_messages or self.max_bytes or self.min_messages)


def parse_columns(options: Mapping[str, str]) -> tuple[str, ...] | None:
    """The ``columns`` option: names of the message schema's columns separated by commas (spaces
    around them ignored), each once; ``None`` when not given. Else :class:`RmqLogOptionError`
    naming the option and the column."""
    from rmqlog import MESSAGE_SCHEMA

    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise RmqLogOptionError("options", "must be a mapping of option names (strings) to strings")
    raw = option_value(options, "columns")
    if raw is None:
        return None
    names = strict("columns", parse_list, raw)
    known = MESSAGE_SCHEMA.names
    for name in names:
        if name not in known:
            raise RmqLogOptionError("columns", f"{name!r} is not a column of the message schema ({', '.join(known)})")
    return tuple(names)


def _key_options(options: Mapping[str, str], kw: dict[str, object], streaming: bool) -> None:
    """``key`` / ``msgId``: a batch lookup through the index files, in the topics of ``topics``."""
    given = [n for n in ("key", "msgId") if option_value(options, n) is not None]
    if not given:
        return
    name = given[0]
    if len(given) > 1:
        raise RmqLogOptionError("msgId", "cannot be combined with key")
    if streaming:
        raise RmqLogOptionError(name, "is for batch reads (spark.read), not streams")
    if kw.get("topics") is None:
        raise RmqLogOptionError(name, "needs the topics option (index keys are per topic)")
    for other in (
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "tags",
        "sql92",
        "maxMessagesPerPartition",
        "group",
    ):
        if option_value(options, other) is not None:
            raise RmqLogOptionError(name, f"cannot be combined with {other}")
    raw = option_value(options, name) or ""
    if not raw:
        raise RmqLogOptionError(name, "must not be empty")
    if name == "msgId":
        from rmqlog import is_uniq_key

        if not is_uniq_key(raw):
            raise RmqLogOptionError(name, f"not a client msgId: {raw!r} (32 or 56 hex digits)")
        kw["msg_id"] = raw
    else:
        kw["key"] = raw


def _path(options: Mapping[str, str]) -> str:
    """The required ``path``: a store root a :class:`rmqlog.MessageStore` can be opened at."""
    path = option_value(options, "path")
    if not path:
        raise RmqLogOptionError("path", "is required (the store root directory), or nameServer to reach brokers")
    try:
        root_arg(path)
    except StoreError as exc:
        raise RmqLogOptionError("path", str(exc)) from None
    return path


def _path_or_name_server(options: Mapping[str, str]) -> tuple[str, str | None]:
    """``(path, None)`` for a store's files, ``("", name servers)`` over the wire: exactly one
    of ``path`` and ``nameServer``."""
    raw = option_value(options, "nameServer")
    if raw is None:
        return _path(options), None
    if option_value(options, "path"):
        raise RmqLogOptionError("nameServer", "cannot be combined with path (a store's files or brokers, not both)")
    return "", parse_name_server(raw)


def _start_or_end(options: Mapping[str, str], name: str, *, wire: bool = False) -> str | dict[str, int] | None:
    raw = option_value(options, name)
    if raw is None:
        return None
    if raw.lower() in (EARLIEST, LATEST):  # any case; no blanks around (a value is exactly valid or refused)
        return raw.lower()
    return parse_wire_offsets_json(name, raw) if wire else parse_offsets_json(name, raw)


def _parse_assign(raw: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # as in parse_offsets_json
        raise RmqLogOptionError("assign", f"is not JSON: {str(exc)[:100]}") from None
    if not isinstance(data, dict) or not data:
        raise RmqLogOptionError("assign", 'must be a JSON object like {"orders": [0, 1]}')
    out = []
    for topic, qids in sorted(data.items()):
        valid_topic("assign", topic)
        if not isinstance(qids, list) or not all(
            isinstance(q, int) and not isinstance(q, bool) and 0 <= q <= JAVA_INT_MAX for q in qids
        ):
            raise RmqLogOptionError("assign", f"queue ids of {topic!r} must be a list of integers in [0, 2**31)")
        out.append((topic, tuple(sorted(set(qids)))))
    return tuple(out)


QUEUE_SELECTORS = ("roundRobin", "hash")


@dataclass(frozen=True)
class SinkOptions:
    """What the ``rmqlog`` sink was asked to do. Picklable; built once on the driver."""

    path: str  # "" over the wire (``name_server``)
    topic: str | None = None
    queue_selector: str = "roundRobin"
    sharding_key: str | None = None
    writer_id: str | None = None
    #: ``nameServer``: send to the brokers of these name servers (:mod:`spark_rmq.wire_sink`)
    name_server: str | None = None
    #: ``sendRetryTimeout``: how long a chunk waits for its broker group's master (out of reach,
    #: or none registered: a failover) before the task fails; over the wire only
    send_retry_s: float = 30.0
    #: ``bufferBytes``: a task's encoded records held before its append; past it the task
    #: writes the rest as it arrives, holding the store's append lock (:meth:`rmqlog.MessageStore.put_stream`)
    buffer_bytes: int = DEFAULT_BUFFER_BYTES

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        _check_unknown(options, SINK_OPTIONS)
        path, name_server = _path_or_name_server(options)
        topic = option_value(options, "topic")
        if topic is not None:
            valid_topic("topic", topic)
        selector = strict(
            "queueSelector", parse_enum, option_value(options, "queueSelector") or "roundRobin", QUEUE_SELECTORS
        )
        sharding_key = option_value(options, "shardingKey")
        if sharding_key is not None and selector != "hash":
            raise RmqLogOptionError("shardingKey", "only applies with queueSelector=hash")
        writer_id = option_value(options, "writerId")
        # the store's writer name is "spark-job/<writerId>/<partition>", at most 1024 bytes
        if writer_id is not None and (
            not writer_id or any(c in writer_id for c in "\x00\x01\x02") or len(writer_id.encode()) > 512
        ):
            raise RmqLogOptionError(
                "writerId", "must be a non-empty string of at most 512 UTF-8 bytes without \\x00-\\x02"
            )
        kw: dict[str, Any] = {}
        if (raw := option_value(options, "sendRetryTimeout")) is not None:
            if name_server is None:
                raise RmqLogOptionError("sendRetryTimeout", "only applies with nameServer (sending through brokers)")
            kw["send_retry_s"] = parse_duration_ms("sendRetryTimeout", raw) / 1000
        if option_value(options, "bufferBytes") is not None:
            if name_server is not None:
                raise RmqLogOptionError("bufferBytes", "only applies to a store written through its files (path)")
            kw["buffer_bytes"] = positive_int(options, "bufferBytes")
        return cls(
            path=path,
            topic=topic,
            queue_selector=selector,
            sharding_key=sharding_key,
            writer_id=writer_id,
            name_server=name_server,
            **kw,
        )
