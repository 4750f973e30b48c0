"""The store's one configuration dataclass.

Field names are RocketMQ's ``MessageStoreConfig``/``BrokerConfig`` names in snake_case, with
their units in the docstring below. :meth:`StoreConfig.from_properties` reads a RocketMQ
``broker.conf`` (a Java properties file, :mod:`rmqlog.broker_conf`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .arguments import JAVA_INT_MAX, utf8_problem
from .broker_conf import read_properties, warn_unknown
from .errors import ConfigError
from .values import InvalidValueError, parse_bool, parse_int

GiB = 1 << 30
MiB = 1 << 20

#: RocketMQ's default delay levels (``messageDelayLevel``).
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

SYNC_FLUSH = "SYNC_FLUSH"
ASYNC_FLUSH = "ASYNC_FLUSH"


@dataclass(frozen=True)
class StoreConfig:
    """Configuration of a :class:`rmqlog.MessageStore`.

    Sizes are bytes, intervals milliseconds, unless the name says otherwise. Every value is
    checked when the config is made: its type (an ``int`` field takes an int, never a bool; a
    ``str`` field a string that can be UTF-8), its range (segment sizes, ``max_message_size`` and
    ``timer_max_delay_sec`` within a Java int, as RocketMQ holds them; intervals not negative);
    a bad one raises :class:`ConfigError` naming the field.

    - ``mapped_file_size_commit_log``: commitlog segment size (default 1 GiB). When a store
      already has segments, their size wins (a store is never reinterpreted with another size).
    - ``mapped_file_size_consume_queue``: consume-queue segment size, a multiple of 20
      (default 300000 units x 20 B).
    - ``max_message_size``: largest body accepted (default 4 MiB).
    - ``store_host``: ``"ip:port"`` written as STOREHOST and used in offset msgIds.
    - ``born_host``: ``"ip:port"`` written as BORNHOST; ``None`` means the store host.
    - ``default_topic_queue_nums``: queues of an auto-created topic.
    - ``auto_create_topic_enable``: create unknown topics on first put.
    - ``flush_disk_type``: ``ASYNC_FLUSH`` (default) or ``SYNC_FLUSH``.
    - ``flush_interval_commit_log``, ``flush_commit_log_least_pages``,
      ``flush_commit_log_thorough_interval``: the async flusher's knobs.
    - ``check_crc_on_recover``: verify body CRCs when recovering.
    - ``check_crc_on_read``: verify the body CRC of every message a read returns
      (``get_messages``, ``read_queue``, ``message_by_offset``/``message_by_id``, the Spark
      source); a mismatch raises :class:`CorruptRecordError`. Default on, as Kafka consumers'
      ``check.crcs``: recovery checks only the newest segments, so damage to older data is
      first met by a read. ``read_queue``/``get_messages`` take a per-call ``check_crc``.
    - ``reput_interval_ms``: how often the background dispatcher looks for new records where
      nothing tells it: on a local file system an inotify watch of ``append.state`` wakes it
      at each publish (and puts in this process wake it), so it looks on its own once a second
      (:mod:`rmqlog.queue.append_watch`); elsewhere (NFS...) every ``reput_interval_ms``.
    - Retention (see :mod:`rmqlog.retention`): ``file_reserved_time`` (hours, 72): a commitlog
      segment last written longer ago expires; ``delete_when`` (local hours of day, ``"04"``
      or ``"04;16"``): when expired segments are deleted; ``disk_max_used_space_ratio``
      (percent, 75; RocketMQ clamps it to 10..95): past it, expired segments are deleted at
      any hour; ``disk_space_clean_forcibly_ratio`` (percent, 85; RocketMQ's
      ``diskSpaceCleanForciblyRatio``): past it, the oldest segments are deleted whatever
      their age when ``clean_file_forcibly_enable`` (default on);
      ``delete_commit_log_files_max_num`` (10): segments deleted per pass at most;
      ``destroy_mapped_file_interval_forcibly`` (ms, 120000; RocketMQ's
      ``destroyMapedFileIntervalForcibly``): how long a segment a reader holds keeps a pass
      from deleting it; ``clean_resource_interval`` (ms, 10000): how often the background
      service (:meth:`rmqlog.MessageStore.start_services`) runs a pass.
    - ``disk_space_warning_level_ratio`` (percent, RocketMQ's ``diskSpaceWarningLevelRatio``
      90%): appends are refused with :class:`DiskFullError` while the commitlog's volume is
      fuller than this; accepted again once it is not.
    - ``message_delay_level``: the delay levels, RocketMQ's syntax (``"1s 5s 10s 30s 1m ... 2h"``;
      level ``n`` is the ``n``-th delay; see :mod:`rmqlog.schedule`).
    - Timed messages (RocketMQ 5's timer, :mod:`rmqlog.schedule.timer`): ``timer_max_delay_sec``
      (259200: 3 days; RocketMQ's ``timerMaxDelaySec``): a delivery time further ahead is
      refused; ``timer_precision_ms`` (1000; ``timerPrecisionMs``): delivery times are kept to
      this step (never early, at most one step late). Both fix the time wheel's size.
    - Index files (see :mod:`rmqlog.index`): ``message_index_enable`` (default on; RocketMQ's
      ``messageIndexEnable``): the dispatcher indexes every message's ``UNIQ_KEY`` and
      ``KEYS`` tokens; ``max_hash_slot_num`` (5,000,000) and ``max_index_num`` (20,000,000
      entries) per file (a full-size file is 420 MB, created sparse); ``max_msgs_num_batch``
      (64): most messages one key query returns. Checked when the store opens
      (:class:`rmqlog.index.index_service.IndexConfig`: a bad value raises :class:`ConfigError`).
    - Segments prepared ahead of a writer (see :mod:`rmqlog.log.allocate`): the next commitlog
      segment is always created ahead of the roll (RocketMQ's ``AllocateMappedFileService``);
      ``warm_mapped_file_enable`` (default on; RocketMQ's ``warmMapedFileEnable``, off
      there): the pages a writer is about to write are faulted into the page cache first, in
      the background, reading only; ``flush_least_pages_when_warm_mapped_file`` (4096 pages
      of 4 KiB; RocketMQ's ``flushLeastPagesWhenWarmMapedFile``): the warm-up's step.
    - ``max_open_mapped_files`` (0: derived when the store opens, a quarter of ``ulimit -n``'s
      descriptors, 16..4096 files; ours, RocketMQ keeps every file mapped): commitlog
      segments and consume-queue files kept open (mapped, with two descriptors each) at
      once; past it the least recently used idle ones are closed, and reopened by their
      next use (see :mod:`rmqlog.log.open_files`).
    - Light message queues (RocketMQ's LMQ, see :mod:`rmqlog.access.lmq`): with both
      ``enable_lmq`` and ``enable_multi_dispatch`` (RocketMQ's ``enableLmq``,
      ``enableMultiDispatch``; default off), a message whose ``INNER_MULTI_DISPATCH`` property
      names ``%LMQ%`` queues (``,``-separated) is also dispatched into each one's queue 0;
      ``max_lmq_consume_queue_num`` (20000): past that many LMQs, such puts are refused
      (:class:`rmqlog.errors.LmqLimitError`).
    """

    mapped_file_size_commit_log: int = GiB
    mapped_file_size_consume_queue: int = 300_000 * 20
    max_message_size: int = 4 * MiB
    store_host: str = "127.0.0.1:10911"
    born_host: str | None = None
    default_topic_queue_nums: int = 4
    auto_create_topic_enable: bool = True
    flush_disk_type: str = ASYNC_FLUSH
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    check_crc_on_recover: bool = True
    check_crc_on_read: bool = True
    reput_interval_ms: int = 1
    file_reserved_time: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    clean_file_forcibly_enable: bool = True
    delete_commit_log_files_max_num: int = 10
    destroy_mapped_file_interval_forcibly: int = 120_000
    clean_resource_interval: int = 10_000
    warm_mapped_file_enable: bool = True
    flush_least_pages_when_warm_mapped_file: int = 4096
    disk_space_warning_level_ratio: int = 90
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    timer_max_delay_sec: int = 3 * 24 * 3600
    timer_precision_ms: int = 1000
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    max_msgs_num_batch: int = 64
    max_open_mapped_files: int = 0
    enable_lmq: bool = False
    enable_multi_dispatch: bool = False
    max_lmq_consume_queue_num: int = 20_000

    def __post_init__(self) -> None:
        _check_types(self)
        if self.mapped_file_size_commit_log < 4096:
            raise ConfigError("mapped_file_size_commit_log must be at least 4096 bytes")
        if self.mapped_file_size_consume_queue < 20 or self.mapped_file_size_consume_queue % 20:
            raise ConfigError("mapped_file_size_consume_queue must be a positive multiple of 20")
        if not self.max_message_size > 0:
            raise ConfigError("max_message_size must be positive")
        if not 1 <= self.default_topic_queue_nums <= 1024:
            raise ConfigError("default_topic_queue_nums must be in 1..1024")
        if self.flush_disk_type not in (SYNC_FLUSH, ASYNC_FLUSH):
            raise ConfigError(f"flush_disk_type must be {SYNC_FLUSH} or {ASYNC_FLUSH}")
        for name, least in (
            ("file_reserved_time", 0),
            ("destroy_mapped_file_interval_forcibly", 0),
            ("delete_commit_log_files_max_num", 1),
            ("clean_resource_interval", 1),
            ("flush_least_pages_when_warm_mapped_file", 1),
            ("timer_max_delay_sec", 1),
            ("timer_precision_ms", 100),
            ("max_open_mapped_files", 0),
            ("flush_interval_commit_log", 0),
            ("flush_commit_log_least_pages", 0),
            ("flush_commit_log_thorough_interval", 0),
            ("reput_interval_ms", 0),
            ("max_lmq_consume_queue_num", 0),
        ):
            if getattr(self, name) < least:
                raise ConfigError(f"{name} must be at least {least}")
        # RocketMQ's fields are Java ints: a segment of more bytes than the file system takes,
        # or a delay past what the time wheel's fields hold, would fail at open untyped
        for name in _JAVA_INT_FIELDS:
            if getattr(self, name) > JAVA_INT_MAX:
                raise ConfigError(f"{name} must be at most {JAVA_INT_MAX} (a Java int, as in RocketMQ)")
        for name in ("disk_max_used_space_ratio", "disk_space_clean_forcibly_ratio", "disk_space_warning_level_ratio"):
            if not 0 <= getattr(self, name) <= 100:
                raise ConfigError(f"{name} must be a percentage in 0..100")
        delete_hours(self.delete_when)  # raises ConfigError naming the bad hour
        delay_levels_ms(self.message_delay_level)  # raises ConfigError naming the bad level
        from .hosts import parse_host  # local import: hosts imports errors only

        parse_host(self.store_host, what="store_host")
        if self.born_host is not None:
            parse_host(self.born_host, what="born_host")

    def replace(self, **changes: Any) -> StoreConfig:
        """A copy with some fields changed (:class:`ConfigError` for a name that is no field)."""
        unknown = sorted(name for name in changes if name not in known_fields())
        if unknown:
            raise ConfigError(f"StoreConfig has no field {unknown[0]!r}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_properties(cls, path: str | Path, **overrides: Any) -> StoreConfig:
        """Read a RocketMQ ``broker.conf`` (a Java properties file: every syntax of
        ``java.util.Properties``, see :mod:`rmqlog.broker_conf`).

        Keys are the fields' camelCase names (``flushDiskType``; matched ignoring case and
        underscores, and RocketMQ's ``Maped`` spellings too); ``brokerIP1`` and ``listenPort``
        make up ``store_host``. Values are parsed as the broker does (``true``/``false``,
        decimal integers; surrounding spaces ignored). ``overrides`` (field names) win over
        the file.

        A key the store does not know is logged as a warning naming it (RocketMQ's own broker
        keys, which the store has no use for, at debug level) and otherwise ignored.
        Raises :class:`ConfigError` naming the file, the key and the value for a value that
        does not parse or is out of its field's range, or for a file that cannot be read.
        """
        known = {_loose(f.name): f for f in fields(cls)}
        # RocketMQ spells some 'Maped' ('destroyMapedFileIntervalForcibly'): both are read
        known.update({k.replace("mapped", "maped"): f for k, f in list(known.items()) if "mapped" in k})
        camel = [_camel(f.name) for f in fields(cls)]
        values: dict[str, Any] = {}
        keys: dict[str, tuple[str, str]] = {}  # field -> (key, value) as written: named in errors
        host: dict[str, str] = {}
        for key, raw in read_properties(path).items():
            value = raw.strip()
            if key in ("brokerIP1", "listenPort"):
                host[key] = value
                continue
            f = known.get(_loose(key))
            if f is None:
                warn_unknown(path, key, camel + ["brokerIP1", "listenPort"])
                continue
            values[f.name] = _coerce(f.name, f.type, value, f"{path}: {key}")
            keys[f.name] = (key, raw)
        if host:
            port = host.get("listenPort", "10911")
            if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(f"{path}: listenPort = {port!r} is not a port number (1..65535)")
            values["store_host"] = f"{host.get('brokerIP1') or '127.0.0.1'}:{int(port)}"
            keys["store_host"] = ("brokerIP1/listenPort", values["store_host"])
        values.update(overrides)
        unknown = sorted(str(name) for name in values if name not in known_fields())
        if unknown:
            raise ConfigError(f"StoreConfig has no field {unknown[0]!r}")
        try:
            return cls(**values)
        except ConfigError as exc:
            # name the key and value that broke it: the first field that fails on its own
            for name, (key, raw) in keys.items():
                try:
                    cls(**{name: values[name]})
                except ConfigError as alone:
                    raise ConfigError(f"{path}: {key} = {raw!r}: {alone}") from None
            raise ConfigError(f"{path}: {exc}") from None


def known_fields() -> frozenset[str]:
    """The names of :class:`StoreConfig`'s fields."""
    return frozenset(f.name for f in fields(StoreConfig))


#: Fields RocketMQ holds in a Java int, bounded to its range.
_JAVA_INT_FIELDS = (
    "mapped_file_size_commit_log",
    "mapped_file_size_consume_queue",
    "max_message_size",
    "timer_max_delay_sec",
    "max_lmq_consume_queue_num",
)

#: The largest int a field takes: Java's ``Long.MAX_VALUE`` (RocketMQ's fields are ints and longs).
_FIELD_INT_MAX = 2**63 - 1


def _check_types(config: StoreConfig) -> None:
    """Each field of the type its annotation names (``int``: an int, not a bool, in Java's long
    range; ``bool``: a bool; ``str``: a str that can be UTF-8; ``| None``: or ``None``);
    raises :class:`ConfigError` naming the field. Checked first: the range checks of
    ``__post_init__`` and everything using the config then meet only values of their type."""
    for f in fields(config):
        value, kind = getattr(config, f.name), str(f.type).split(" | ")
        if value is None and "None" in kind:
            continue
        if kind[0] == "bool":
            ok = isinstance(value, bool)
        elif kind[0] == "int":
            ok = isinstance(value, int) and not isinstance(value, bool) and abs(value) <= _FIELD_INT_MAX
        else:
            ok = isinstance(value, str) and utf8_problem(value) is None
        if not ok:
            raise ConfigError(
                f"{f.name} must be {' or '.join(kind)}"
                + (" in Java's long range" if kind[0] == "int" else "")
                + f", got {type(value).__name__} {value!r}"[:200]
            )


_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def delay_levels_ms(spec: str) -> tuple[int, ...]:
    """The delays of ``message_delay_level`` in ms, level 1 first (RocketMQ's
    ``parseDelayLevel``: space-separated ``<n><unit>``, units ``s``, ``m``, ``h``, ``d``).
    Raises :class:`ConfigError` naming a bad entry."""
    out = []
    for i, item in enumerate(spec.split(), 1):
        unit, number = item[-1:], item[:-1]
        if (
            unit not in _DELAY_UNITS_MS
            or not (number.isascii() and number.isdigit())
            or not 0 < int(number) * _DELAY_UNITS_MS[unit] < 1 << 62
        ):
            raise ConfigError(f"message_delay_level: level {i} is {item!r}, not <positive number><s|m|h|d>")
        out.append(int(number) * _DELAY_UNITS_MS[unit])
    if not out:
        raise ConfigError("message_delay_level names no level")
    return tuple(out)


def delete_hours(delete_when: str) -> frozenset[int]:
    """The hours of ``delete_when`` (``"04"``, ``"04;16"``: RocketMQ's ``;``-separated hours of
    day, 0..23). Raises :class:`ConfigError` naming a bad entry."""
    hours = set()
    for part in str(delete_when).split(";"):
        part = part.strip()
        if not (part.isascii() and part.isdigit() and int(part) < 24):
            raise ConfigError(
                f'delete_when: {part!r} is not an hour of day 0..23 (RocketMQ\'s syntax: "04" or "04;16")'
            )
        hours.add(int(part))
    return frozenset(hours)


def _loose(name: str) -> str:
    """A key as matched: letters and digits only, lower case ('checkCRCOnRecover' is check_crc_on_recover)."""
    return name.replace("_", "").lower()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _coerce(name: str, typ: Any, value: str, where: str) -> Any:
    """``value`` as the type of field ``name`` (a bool, an int or a string), parsed by
    :mod:`rmqlog.values` (exactly ``true``/``false``; an optional sign and decimal digits, as
    Java's ``Long.parseLong``); ``where`` names the file and key in the :class:`ConfigError`."""
    t = str(typ)
    try:
        if "bool" in t:
            return parse_bool(name, value)
        if "int" in t:
            return parse_int(name, value)
    except InvalidValueError as exc:
        raise ConfigError(f"{where} = {value!r}: {exc.problem}") from None
    return value
