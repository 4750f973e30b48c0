"""One option's value parsed and checked: strings, counts, booleans, durations, timestamps,
offsets JSON (a store's queues and brokers' queues), broker names, name servers, SQL92. Every
error is a :class:`spark_rmq.errors.RmqLogOptionError` naming the option; the kinds of value
are parsed by :mod:`rmqlog.values`, the one parser of each."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from rmqlog.arguments import JAVA_INT_MAX, JAVA_LONG_MAX, utf8_problem
from rmqlog.errors import InvalidArgumentError, StoreError
from rmqlog.paths import validate_topic
from rmqlog.times import parse_time_ms
from rmqlog.values import InvalidValueError, parse_addresses, parse_bool, parse_int
from rmqlog.values import parse_duration_ms as _duration

from .errors import RmqLogOptionError

#: In a JSON offsets object, -2 means the queue's first offset and -1 its end (as in Kafka).
EARLIEST_OFFSET = -2
LATEST_OFFSET = -1


def option_value(options: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive lookup (Spark lower-cases keys; plain dicts in tests may not). A value
    that is not a string that can be UTF-8 is refused (Spark passes strings; a Python caller
    of ``parse`` might not)."""
    value = options.get(name.lower())
    if value is None:
        for k, v in options.items():
            if k.lower() == name.lower():
                value = v
                break
    return None if value is None else option_text(name, value)


def option_text(name: str, raw: object) -> str:
    """``raw`` if it is a str that can be UTF-8; else :class:`RmqLogOptionError` naming the option."""
    if not isinstance(raw, str):
        raise RmqLogOptionError(name, f"must be a string, got {type(raw).__name__} {raw!r}"[:200])
    problem = utf8_problem(raw)
    if problem is not None:
        raise RmqLogOptionError(name, f"{raw!r} {problem}")
    return raw


def strict(name: str, parse: Any, *args: Any, **kw: Any) -> Any:
    """``parse(name, *args)`` of :mod:`rmqlog.values` (the one parser of each kind of value),
    its :class:`~rmqlog.values.InvalidValueError` re-raised as :class:`RmqLogOptionError`."""
    try:
        return parse(name, *args, **kw)
    except InvalidValueError as exc:
        raise RmqLogOptionError(name, exc.problem) from None


def positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = option_value(options, name)
    return None if raw is None else count_value(raw, name, 1)


def count_value(raw: str, name: str, least: int) -> int:
    """``raw`` as an int from ``least`` (0 or 1) to Java's long maximum, else the option's error."""
    return int(strict(name, parse_int, raw, least, JAVA_LONG_MAX))


def bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    """``true`` or ``false`` (any case); absent: ``default``."""
    raw = option_value(options, name)
    return default if raw is None else bool(strict(name, parse_bool, raw))


def parse_duration_ms(name: str, raw: str) -> int:
    """``"500ms"``, ``"30s"``, ``"15m"``, ``"1h"`` or a bare number of milliseconds
    (:func:`rmqlog.values.parse_duration_ms`)."""
    return int(strict(name, _duration, option_text(name, raw)))


def parse_timestamp_ms(name: str, raw: str) -> int:
    """Milliseconds since the epoch, or ISO 8601: :func:`rmqlog.times.parse_time_ms`, the
    store's one time parser (a time without a zone is UTC, as in the ``rmqlog`` command)."""
    raw = option_text(name, raw)
    try:
        return parse_time_ms(raw, what=name)
    except InvalidArgumentError:
        raise RmqLogOptionError(
            name, f"must be milliseconds since the epoch or ISO 8601 (no zone: UTC), got {raw!r}"
        ) from None


def parse_offsets_json(name: str, raw: str) -> dict[str, int]:
    """``{"topic/queueId": offset}``; offsets are >= 0, or -2 (earliest) / -1 (latest)."""
    try:
        data = json.loads(option_text(name, raw))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError; an int of 4,300+ digits; nesting too deep
        raise RmqLogOptionError(name, f"is neither earliest, latest nor JSON: {str(exc)[:100]}") from None
    if not isinstance(data, dict):
        raise RmqLogOptionError(name, 'JSON must be an object like {"topic/0": 42}')
    out: dict[str, int] = {}
    for key, value in data.items():
        topic, _, qid = str(key).rpartition("/")
        if not topic or not (qid.isascii() and qid.isdigit() and len(qid) <= 10 and int(qid) <= JAVA_INT_MAX):
            raise RmqLogOptionError(name, f"key {key!r} is not 'topic/queueId' (a queue id in [0, 2**31))")
        valid_topic(name, topic)
        if not isinstance(value, int) or isinstance(value, bool) or not EARLIEST_OFFSET <= value <= JAVA_LONG_MAX:
            raise RmqLogOptionError(name, f"offset of {key!r} must be an integer >= -2, got {value!r}")
        out[f"{topic}/{int(qid)}"] = value
    return out


def valid_topic(option: str, topic: str) -> str:
    try:
        return validate_topic(topic)
    except StoreError as exc:  # the store's InvalidTopicError; re-raised naming the option
        raise RmqLogOptionError(option, f"invalid topic {topic!r}: {exc}") from None


def parse_sql92(raw: str) -> str:
    """The ``sql92`` option: an expression RocketMQ's SQL92 parser accepts
    (:func:`rmqlog.compile_filter`); else :class:`RmqLogOptionError` naming the option, the
    position and the token."""
    from rmqlog import FilterParseError, compile_filter

    try:
        compile_filter(raw)
    except FilterParseError as exc:
        raise RmqLogOptionError("sql92", str(exc)) from None
    return raw


def parse_name_server(raw: str) -> str:
    """``host:port`` name server addresses separated by ``;`` (RocketMQ's ``namesrvAddr``),
    normalized (blanks dropped); :class:`RmqLogOptionError` naming ``nameServer`` otherwise."""
    return ";".join(strict("nameServer", parse_addresses, option_text("nameServer", raw)))


def parse_wire_offsets_json(name: str, raw: str) -> dict[str, int]:
    """Over the wire: ``{"topic/brokerName/queueId": offset}`` (a queue is named by its
    broker too, as RocketMQ's ``MessageQueue``); offsets as in :func:`parse_offsets_json`."""
    try:
        data = json.loads(option_text(name, raw))
    except (ValueError, RecursionError) as exc:
        raise RmqLogOptionError(name, f"is neither earliest, latest nor JSON: {str(exc)[:100]}") from None
    if not isinstance(data, dict):
        raise RmqLogOptionError(name, 'JSON must be an object like {"topic/broker-a/0": 42}')
    out: dict[str, int] = {}
    for key, value in data.items():
        parts = str(key).split("/")
        if len(parts) != 3 or not _is_queue_id(parts[2]) or broker_name_problem(parts[1]) is not None:
            raise RmqLogOptionError(name, f"key {key!r} is not 'topic/brokerName/queueId' (a queue id in [0, 2**31))")
        valid_topic(name, parts[0])
        if not isinstance(value, int) or isinstance(value, bool) or not EARLIEST_OFFSET <= value <= JAVA_LONG_MAX:
            raise RmqLogOptionError(name, f"offset of {key!r} must be an integer >= -2, got {value!r}")
        out[f"{parts[0]}/{parts[1]}/{int(parts[2])}"] = value
    return out


def _is_queue_id(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 10 and int(text) <= JAVA_INT_MAX


_BROKER_NAME = re.compile(r"[A-Za-z0-9_.:%|-]{1,127}")


def broker_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a broker name in a queue key (it comes from the network: a name
    server's route), or ``None``: 1-127 characters of ``A-Za-z0-9_.:%|-`` (no ``/``, which
    separates the key's parts)."""
    if not isinstance(name, str) or not _BROKER_NAME.fullmatch(name):
        return f"broker name {str(name)[:60]!r} is not 1-127 characters of A-Za-z0-9_.:%|-"
    return None
