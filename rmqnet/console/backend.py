"""What the console's pages ask of a cluster, in one interface (:class:`ConsoleBackend`) so
that no page knows where its answers come from; the errors a page shows (:class:`ConsoleError`
and its kinds, each with the HTTP status it is answered with); the checks of every value a
request carries (names, offsets, times, page sizes: capped here, never by the backend's good
will); messages as the pages show them (:func:`message_dicts`).

Every method is blocking (the wire client's calls are; the app runs them off its loop) and
answers plain values (dicts, lists, strings, numbers) that serialise to JSON as they are.
"""

from __future__ import annotations

import datetime as dt
import heapq
import json
from abc import ABC, abstractmethod
from typing import Any

import pyarrow as pa

from rmqlog import InvalidArgumentError, InvalidGroupError
from rmqlog.paths import topic_problem, validate_group
from rmqlog.times import parse_time_ms
from rmqlog.values import InvalidValueError, parse_int

#: the most messages one request shows (a browse, a key, a time range): a page, never a scan
MAX_MESSAGES = 100
#: rocketmq-dashboard's key query asks for 64 (QUERY_MESSAGE_MAX_NUM)
MAX_KEY_MESSAGES = 64
#: the most rows of a list page (topics, groups)
MAX_PAGE_SIZE = 200
#: the most bytes of a body a page shows (text, JSON and hex alike); the download has it whole
MAX_BODY_SHOWN = 64 * 1024


#: the groups a message lists by name in ``consumedBy`` (the rest counted)
CONSUMED_BY_MAX = 10


class ConsoleError(Exception):
    """What a page shows instead of its content: a message, answered with ``status``."""

    status = 500


class BadRequest(ConsoleError):
    """A value of the request is not valid (named in the message)."""

    status = 400


class Forbidden(ConsoleError):
    """An admin action of a console started without ``--admin``."""

    status = 403


class NotFound(ConsoleError):
    """No such topic, group or message."""

    status = 404


class Refused(ConsoleError):
    """The broker refused the request (its code and remark in the message)."""

    status = 409


class Unavailable(ConsoleError):
    """The cluster cannot be asked (no name server or broker answers)."""

    status = 502


def topic_arg(text: object, name: str = "topic") -> str:
    """A topic name as RocketMQ allows it, else :class:`BadRequest`."""
    problem = topic_problem(text)
    if problem is not None:
        raise BadRequest(f"{name}: {problem}")
    assert isinstance(text, str)
    return text


def group_arg(text: object) -> str:
    try:
        return validate_group(text)
    except InvalidGroupError as exc:
        raise BadRequest(f"group: {exc}") from None


def int_arg(name: str, text: object, lo: int, hi: int) -> int:
    """An integer in ``[lo, hi]`` given as text (ASCII digits only), else :class:`BadRequest`."""
    try:
        return parse_int(name, text if isinstance(text, str) else str(text), lo, hi)
    except InvalidValueError as exc:
        raise BadRequest(str(exc)) from None


def time_arg(name: str, text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC when it names no zone)."""
    try:
        return parse_time_ms(text, what=name)
    except InvalidArgumentError as exc:
        raise BadRequest(str(exc)) from None


def text_arg(name: str, text: str, most: int = 1024) -> str:
    """A non-empty value of at most ``most`` characters without control characters."""
    if not text or len(text) > most or any(ord(c) < 32 for c in text):
        raise BadRequest(f"{name}: 1 to {most} printable characters, got {text[:40]!r}")
    return text


def _iso(value: Any) -> str | None:
    return value.isoformat(timespec="milliseconds") if isinstance(value, dt.datetime) else None


def _epoch_ms(value: Any) -> int:
    if not isinstance(value, dt.datetime):
        return 0
    if value.tzinfo is None:  # the message table's times are UTC
        value = value.replace(tzinfo=dt.UTC)
    return int(value.timestamp() * 1000)


def body_views(body: bytes) -> dict[str, Any]:
    """A body as the page offers it: text (UTF-8, undecodable bytes replaced), pretty JSON when
    it is JSON, hex; each cut at :data:`MAX_BODY_SHOWN` bytes (``bodyCut`` says so)."""
    shown = body[:MAX_BODY_SHOWN]
    text = shown.decode("utf-8", "replace")
    pretty = None
    if len(body) <= MAX_BODY_SHOWN:
        try:
            pretty = json.dumps(json.loads(body), indent=2, ensure_ascii=False)
        except ValueError:  # (UnicodeDecodeError is one)
            pretty = None
    return {
        "bodySize": len(body),
        "bodyCut": len(body) > len(shown),
        "bodyText": text,
        "bodyJson": pretty,
        "bodyHex": shown.hex(" ", 1),
    }


def message_dicts(table: pa.Table, broker: str | None = None) -> list[dict[str, Any]]:
    """The rows of a message table (``rmqlog.MESSAGE_SCHEMA``) as the pages show them: times in
    ISO 8601 (UTC), properties as a dict, the client's msgId (``UNIQ_KEY``) beside the offset
    msgId, the body in three views (:func:`body_views`)."""
    out = []
    for row in table.to_pylist():
        props = dict(row.get("properties") or {})
        item = {
            "topic": row["topic"],
            "brokerName": broker,
            "queueId": row["queueId"],
            "queueOffset": row["queueOffset"],
            "commitLogOffset": row["commitLogOffset"],
            "msgId": row["msgId"],
            "uniqKey": props.get("UNIQ_KEY"),
            "tags": row.get("tags"),
            "keys": row.get("keys") or [],
            "properties": props,
            "bornTimestamp": _iso(row.get("bornTimestamp")),
            "storeTimestamp": _iso(row.get("storeTimestamp")),
            "bornHost": row.get("bornHost"),
            "storeHost": row.get("storeHost"),
            "reconsumeTimes": row.get("reconsumeTimes"),
            "sysFlag": row.get("sysFlag"),
        }
        item.update(body_views(row.get("body") or b""))
        item["_body"] = row.get("body") or b""  # the whole body, for a download (never in the JSON)
        stored = row.get("storeTimestamp")
        item["_store_ms"] = _epoch_ms(stored)
        out.append(item)
    return out


def public(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages without what only a download needs (the raw ``_body``)."""
    return [{k: v for k, v in m.items() if not k.startswith("_")} for m in messages]


def jsonl_line(row: dict[str, Any], body: bytes | None) -> str:
    """One message of a download: the row without its views, the whole body as text (UTF-8,
    undecodable bytes replaced) or, when it is not UTF-8, as ``bodyHex``."""
    out = {k: v for k, v in row.items() if not k.startswith(("body", "_"))}
    if body is not None:
        try:
            out["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            out["bodyHex"] = body.hex()
    return json.dumps(out, ensure_ascii=False)


#: where a page of messages by time ends: (store time ms, broker name, queue id, queue offset)
Cursor = tuple[int, str, int, int]


def time_key(m: dict[str, Any]) -> Cursor:
    return (m["_store_ms"], m["brokerName"] or "", m["queueId"], m["queueOffset"])


class ConsoleBackend(ABC):
    """The questions of the console's pages; the two answers are the wire (name server and
    brokers, :class:`~rmqnet.console.backend_wire.WireBackend`) and a store opened read-only.
    Raises :class:`ConsoleError` kinds only (the backend turns its own errors into them)."""

    #: what the header shows: ``namesrv 127.0.0.1:9876`` or ``store /data/root``
    source: str = ""
    #: whether admin actions can be served at all by this backend
    can_admin: bool = False

    @abstractmethod
    def cluster(self) -> dict[str, Any]:
        """``{"brokers": [row...], "totals": {...}}``, rows as ``rmqlog broker-status --json``."""

    @abstractmethod
    def topic_names(self) -> list[str]:
        """Every topic's name."""

    @abstractmethod
    def topic(self, topic: str) -> dict[str, Any]:
        """``{"topic", "queues": [{brokerName, queueId, min, max, messages, lastUpdate}], "route": {...}}``."""

    @abstractmethod
    def committed_offsets(self, topic: str) -> dict[str, dict[tuple[str, int], int]]:
        """Every group's committed offsets of ``topic``: group -> (broker name, queue) -> offset."""

    def topic_groups(self, topic: str, queues: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The groups with committed offsets of ``topic``: ``[{group, lag}]``, the lag against
        ``queues`` (what :meth:`topic` answered)."""
        ends = {(q["brokerName"], q["queueId"]): q["max"] for q in queues}
        return [
            {"group": g, "lag": sum(max(0, ends.get(k, o) - o) for k, o in committed.items())}
            for g, committed in self.committed_offsets(topic).items()
        ]

    def consumed_by(self, messages: list[dict[str, Any]]) -> None:
        """Each message given ``consumedBy``: the groups with committed offsets of its topic, and
        whether the group's offset of its queue is past it (RocketMQ's dashboard's "consume
        status", from the offsets alone), at most :data:`CONSUMED_BY_MAX` of them by name;
        ``consumedCount`` and ``groupCount`` count them all (a topic read by a thousand groups
        makes a page of twenty messages, not twenty thousand rows)."""
        by_topic: dict[str, list[tuple[str, dict[tuple[str, int], int]]]] = {}
        for m in messages:
            committed = by_topic.get(m["topic"])
            if committed is None:
                committed = by_topic[m["topic"]] = sorted(self.committed_offsets(m["topic"]).items())
            where, offset = (m.get("brokerName"), m["queueId"]), m["queueOffset"]
            past = [offsets.get(where, -1) > offset for _, offsets in committed]  # type: ignore[arg-type]
            m["consumedBy"] = [
                {"group": g, "consumed": c}
                for (g, _), c in zip(committed[:CONSUMED_BY_MAX], past[:CONSUMED_BY_MAX], strict=True)
            ]
            m["consumedCount"], m["groupCount"] = sum(past), len(committed)

    @abstractmethod
    def group_names(self) -> list[str]:
        """Every group with a subscription group config or committed offsets."""

    @abstractmethod
    def group(self, group: str) -> dict[str, Any]:
        """``{"group", "offsets": [{topic, brokerName, queueId, committed, max, lag}], "totalLag",
        "consumeTps", "members": [...], "subscriptions": [...], "config": {...}}``."""

    @abstractmethod
    def browse(self, topic: str, broker: str | None, queue: int, offset: int | None, count: int) -> dict[str, Any]:
        """Up to ``count`` messages of a queue from ``offset`` (its min when None): ``{"messages",
        "brokerName", "nextOffset", "minOffset", "maxOffset", "status"}``."""

    @abstractmethod
    def by_key(self, topic: str, key: str, count: int) -> list[dict[str, Any]]:
        """Messages of ``topic`` with ``key`` among their keys (the index)."""

    @abstractmethod
    def by_id(self, topic: str | None, msg_id: str) -> list[dict[str, Any]]:
        """The message of an offset msgId or a client msgId (``UNIQ_KEY``, in ``topic``);
        :class:`NotFound` naming why when there is none."""

    @abstractmethod
    def time_queues(self, topic: str) -> list[tuple[str, int]]:
        """Every readable queue of ``topic`` as (broker name, queue id), for reads by time."""

    @abstractmethod
    def offset_at(self, topic: str, broker: str, queue: int, ms: int) -> int:
        """The queue's first offset stored at or after ``ms``."""

    @abstractmethod
    def read(self, topic: str, broker: str, queue: int, offset: int, count: int) -> list[dict[str, Any]]:
        """Up to ``count`` messages of the queue from ``offset`` (:func:`message_dicts`)."""

    def by_time(
        self, topic: str, begin_ms: int, end_ms: int, count: int, after: Cursor | None = None
    ) -> list[dict[str, Any]]:
        """Up to ``count`` messages of ``topic`` stored in ``[begin_ms, end_ms]`` in the order
        of :func:`time_key` (store time, then broker, queue, offset), each queue read from its
        first message at the page's start: ``count`` at most from each, never more. ``after``:
        the last message of the previous page (:func:`time_key`); this page holds the ones
        past it, exactly (a queue ordered before the cursor's starts past its time, since its
        messages of that time all came before; the cursor's own queue past its offset)."""
        lo = max(begin_ms, after[0]) if after is not None else begin_ms
        found: list[dict[str, Any]] = []
        for broker, queue in self.time_queues(topic):
            if after is None or (broker, queue) > (after[1], after[2]):
                start = self.offset_at(topic, broker, queue, lo)
            elif (broker, queue) == (after[1], after[2]):
                start = max(self.offset_at(topic, broker, queue, lo), after[3] + 1)
            else:
                start = self.offset_at(topic, broker, queue, lo + 1)
            for m in self.read(topic, broker, queue, start, count):
                if m["_store_ms"] > end_ms:
                    break
                if m["_store_ms"] >= lo and (after is None or time_key(m) > after):
                    found.append(m)
        return heapq.nsmallest(count, found, key=time_key)

    # ---- admin (the app refuses these unless the console was started with --admin) ----

    def create_topic(self, topic: str, queues: int, perm: int) -> list[str]:
        raise Forbidden("this console's source does not take changes")

    def delete_topic(self, topic: str) -> list[str]:
        raise Forbidden("this console's source does not take changes")

    def send_test(self, topic: str, body: bytes, tags: str | None, keys: str | None) -> dict[str, Any]:
        raise Forbidden("this console's source does not take changes")

    def reset_offset(self, group: str, topic: str, offset: int | None, ts_ms: int | None) -> list[dict[str, Any]]:
        raise Forbidden("this console's source does not take changes")

    def delete_group(self, group: str) -> list[str]:
        raise Forbidden("this console's source does not take changes")

    def resend_dead_letters(self, group: str, msg_ids: list[str]) -> list[dict[str, Any]]:
        """Each dead letter of ``group`` named by its offset msgId sent again to its original
        topic (``RETRY_TOPIC``); one row per msgId: ``{"msgId", "topic", "newMsgId"}`` or
        ``{"msgId", "skipped": why}``."""
        raise Forbidden("this console's source does not take changes")

    @abstractmethod
    def close(self) -> None:
        """Release connections or the store."""
