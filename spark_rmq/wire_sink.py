"""The ``rmqlog`` sink over the wire (option ``nameServer``): a task's rows routed to their
queues' brokers and sent as SEND_BATCH_MESSAGE (320) batches.

**Routing.** A topic's queues are its route's writable queues in RocketMQ's order (brokers by
name, then queue ids ``0 .. writeQueueNums-1``: the Java producer's ``MessageQueue`` list), so
``queueSelector=hash`` picks the queue a Java producer's ``SelectMessageQueueByHash`` picks
(Java's ``String.hashCode`` of the key modulo the number of queues) and a ``queueId`` column
indexes that list (on one broker: the queue id). Round robin is row ``i`` of task ``p`` to
queue ``(p + i) % n``: a function of the task's rows, so a replayed task routes its rows as
before. A topic the name servers do not know is sent through ``TBW102``'s route with
``defaultTopic=TBW102`` (a broker with ``autoCreateTopicEnable`` creates it), as the producer
does.

**Batches.** The rows of each queue are encoded into 320 bodies
(:func:`rmqnet.client.encode_messages`: whole columns, no step per message) of at most
:data:`CHUNK_BYTES` (a broker refuses a body over its ``maxMessageSize``, 4 MiB by default);
properties (``TAGS``, ``KEYS``, the ``properties`` map, ``DELAY`` from ``delayLevel``,
``TIMER_DELIVER_MS`` from ``deliverTime``, ``WAIT``, the client's ``UNIQ_KEY``) are built as
whole columns.

**Exactly once against our brokers.** Each 320 request carries the idempotence marker as two
request fields (the client's ``marker``: ``rmqlogWriter`` =
``"<query or job id>/<partitionId>/<layout>"``, the file sink's writer and a digest of the
queue layout the task routed over (:func:`layout_tag`), and ``rmqlogSequence`` =
``batchId * 2**20 + k``, ``k`` counting the task's chunks to that broker in order); the broker
puts it with the store's idempotent put, so a chunk a broker already has (a retried attempt,
a micro-batch replayed after a restart) is stored nothing again and answered as a duplicate.
Chunks to one broker are sent one after the other (the store keeps one sequence per writer);
brokers are sent to at the same time. This needs the replay to bring the same rows in the same
order (Spark replays a micro-batch's offsets; a deterministic plan gives the same rows) and the
same routes. **Against Apache RocketMQ's brokers**, which ignore the two fields, a replayed
chunk is stored again: the sink is at least once there.

**Across a failover.** Routing must not depend on which masters are up when a task runs: a
retried task or a replayed micro-batch routed differently from its first attempt would send
rows its first attempt stored on one group to another group, under other markers (stored twice),
or other rows under the same markers (skipped: lost). So a group whose master is not
registered (it died: the name server lists only its slave) keeps its queues in the list, and
its chunks wait for a master, in the client (:meth:`rmqnet.client.Producer.send_encoded_batch`,
given the address the task routed over): the route is asked again every half second and the
chunks go to the master it names (the old one restarted, or the slave restarted as the
group's master, ``brokerId=0``: its store holds the replicated records and markers, so a
chunk the dead master stored and replicated is a duplicate there). A master out of reach (a
restart) is waited for the same way. Both for up to the option ``sendRetryTimeout``
(:data:`RETRY_S` by default), then the task fails (and Spark retries it, routing as before).
A group none of whose brokers is registered when a task asks its route (the name server has
dropped its queues: a promotion's stop-start window) is kept too when this process saw it
earlier (``_seen_groups``); a process that never saw it routes without it, and then the
layout digest in the writer name differs from the first attempt's: its chunks are stored
under a writer of their own, so rows are stored twice at worst, never skipped (lost) as
duplicates of other rows. The same holds for a topic resized or a group added between two
attempts. What stays out of reach: a chunk a ``SYNC_MASTER``
answered ``FLUSH_SLAVE_TIMEOUT`` or ``SLAVE_NOT_AVAILABLE`` (stored on the master only, as
RocketMQ's producers take it) is lost if the slave is promoted before it caught up.

Unlike the file sink a task is not all-or-nothing: chunks a broker accepted before a failure
stay (the retry skips them). Bad rows are refused by the broker (MESSAGE_ILLEGAL, row numbers
within the chunk) or here before sending (:class:`rmqlog.InvalidMessageError` naming the row
of the task).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import WriterCommitMessage

from rmqlog import InvalidMessageError, check_utf8_column
from rmqnet.client import (
    AUTO_CREATE_TOPIC,
    DEFAULT_TOPIC_QUEUE_NUMS,
    NAME_VALUE_SEP,
    PERM_WRITE,
    PROPERTY_SEP,
    NoRouteError,
    Producer,
    TopicNotFoundError,
    TopicRouteData,
    UniqKeys,
    encode_messages,
)

from .options import SinkOptions
from .routing import KEY_LIST, hash_queue, is_key_list, keys_as_string
from .sink_target import SinkCommit

#: a 320 body's size at most (below a broker's default ``maxMessageSize`` of 4 MiB)
CHUNK_BYTES = 4 * 1024 * 1024 - 64 * 1024
#: chunks per (task, broker) in one micro-batch: ``sequence = batchId * CHUNKS + k``
CHUNKS = 1 << 20
PRODUCER_GROUP = "rmqlog_spark_sink"
#: property names the sink sets itself: refused in the ``properties`` column
OWN_NAMES = ("TAGS", "KEYS", "WAIT", "DELAY", "UNIQ_KEY", "TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC")

log = logging.getLogger(__name__)
_producers: dict[str, Producer] = {}
_lock = threading.Lock()
_uniq = UniqKeys()
KEY_SPACE = pa.scalar(" ", pa.large_string())  # the messages' client ids (UNIQ_KEY), as a producer makes them


def producer(name_server: str) -> Producer:
    """This process's producer of ``name_server`` (kept for the worker's life)."""
    with _lock:
        p = _producers.get(name_server)
        if p is None:
            p = _producers[name_server] = Producer(PRODUCER_GROUP, name_server, timeout_s=60.0)
        return p


@dataclass(frozen=True)
class Queues:
    """A topic's writable queues in RocketMQ's order: ``(brokerName, queueId, master address)``."""

    queues: tuple[tuple[str, int, str], ...]
    via_default: bool


#: the writable groups of each topic this process has seen (name servers, topic, via TBW102) ->
#: {group: its writable queue count}: a group that vanishes from a later route altogether (no
#: broker of it registered: a promotion's stop-start window) keeps its queues (module docstring)
_seen_groups: dict[tuple[tuple[str, ...], str, bool], dict[str, int]] = {}


def topic_queues(p: Producer, topic: str) -> Queues:
    """The writable queues of ``topic`` (module docstring), through TBW102 when unknown, with
    the groups this process saw earlier and the route no longer lists. Raises
    :class:`rmqnet.client.NoRouteError` when there is none."""
    via_default = False
    try:
        route = p.route(topic)  # asked once per topic per task: a route never goes stale here
    except TopicNotFoundError:
        route = p.route(AUTO_CREATE_TOPIC)
        via_default = True
    out = _writable(route, via_default)
    with _lock:
        seen = _seen_groups.setdefault((tuple(p.namesrv_addrs), topic, via_default), {})
        now: dict[str, int] = {}
        for broker, _qid, _addr in out:
            now[broker] = now.get(broker, 0) + 1
        missing = {b: n for b, n in seen.items() if b not in now}
        seen.update(now)
    if missing:
        log.warning(
            "rmqlog sink: topic %r: broker group(s) %s seen earlier are not in its route now (no broker of "
            "theirs registered): their queues are kept and their chunks wait for a master",
            topic,
            sorted(missing),
        )
        out = sorted([*out, *((b, i, "") for b, n in missing.items() for i in range(n))], key=lambda q: (q[0], q[1]))
    if not out:
        raise NoRouteError(f"topic {topic!r}: no writable queue in its route")
    return Queues(tuple(out), via_default)


def layout_tag(routes: dict[str, Queues]) -> str:
    """A short digest of the queue layout a task routed over (topics, groups, queue counts: no
    addresses), appended to the task's writer name: a retry or replay that routes over the same
    layout carries the same markers (its chunks are duplicates where stored), one whose layout
    differs (a group missing or added) is another writer: its chunks are stored, at least
    once, never skipped as duplicates of other rows."""
    text = ";".join(
        f"{t}:{int(routes[t].via_default)}:" + ",".join(f"{b}.{q}" for b, q, _a in routes[t].queues)
        for t in sorted(routes)
    )
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def _writable(route: TopicRouteData, via_default: bool) -> list[tuple[str, int, str]]:
    """Every writable queue of the route's groups, with its group's master address, or ``""``
    for a group whose master is not registered now (only its slave is: the master died or is
    being replaced): such a group keeps its queues (module docstring, "Across a failover")."""
    masters = {b.broker_name: b.master_addr() or "" for b in route.broker_datas}
    out: list[tuple[str, int, str]] = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if q.perm & PERM_WRITE and q.broker_name in masters:
            nums = min(q.write_queue_nums, DEFAULT_TOPIC_QUEUE_NUMS) if via_default else q.write_queue_nums
            out.extend((q.broker_name, i, masters[q.broker_name]) for i in range(nums))
    return out


# ---------------------------------------------------------------- rows -> messages


def _array(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _piece(name: str, text: pa.Array) -> pa.Array:
    """``name\\x01value\\x02`` where ``text`` is set and not empty, else ``""``."""
    text = pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)
    return pc.binary_join_element_wise(name + NAME_VALUE_SEP, text, PROPERTY_SEP, "").fill_null("")


def _refuse_separators(text: pa.Array, field: str, parents: np.ndarray | None = None) -> None:
    bad = pc.fill_null(pc.or_(pc.match_substring(text, NAME_VALUE_SEP), pc.match_substring(text, PROPERTY_SEP)), False)
    hit = np.flatnonzero(np.asarray(bad))
    if len(hit):
        row = int(hit[0] if parents is None else parents[hit[0]])
        raise InvalidMessageError("may not hold \\x01 or \\x02 (RocketMQ's property separators)", row=row, field=field)


def _user_properties(props: pa.Array) -> pa.Array:
    """A ``map<string,string>`` column as RocketMQ's properties strings (``""`` where null)."""
    props = props.cast(pa.map_(pa.string(), pa.string()))
    raw = np.asarray(props.offsets, np.int64)
    offsets = raw - raw[0]
    # (``keys``/``items`` are the whole child arrays, whatever slice ``props`` is of)
    keys = props.keys.slice(int(raw[0]), int(raw[-1] - raw[0]))
    values = props.items.slice(int(raw[0]), int(raw[-1] - raw[0]))
    parents = np.repeat(np.arange(len(props)), np.diff(offsets))
    if pc.any(pc.is_null(values)).as_py():
        row = int(parents[np.flatnonzero(np.asarray(pc.is_null(values)))[0]])
        raise InvalidMessageError("holds a null value", row=row, field="properties")
    _refuse_separators(keys, "properties", parents)
    _refuse_separators(values, "properties", parents)
    own = np.asarray(pc.fill_null(pc.or_(pc.is_in(keys, pa.array(OWN_NAMES)), pc.starts_with(keys, "RMQLOG_")), False))
    if own.any():
        i = int(np.flatnonzero(own)[0])
        raise InvalidMessageError(
            f"property {keys[i].as_py()!r} is the sink's to set (or the store's)",
            row=int(parents[i]),
            field="properties",
        )
    pairs = pc.binary_join_element_wise(keys, values, NAME_VALUE_SEP)
    pieces = pc.binary_join_element_wise(pairs, pa.repeat(pa.scalar(PROPERTY_SEP), len(pairs)), "")
    lists = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pieces)
    return pc.binary_join(lists, "").fill_null("")


def message_columns(table: pa.Table, opts: SinkOptions) -> tuple[pa.Array, pa.Array, pa.Array, np.ndarray]:
    """``(topic, body, properties without UNIQ_KEY, flag)`` of the sink's input rows, as whole
    columns; :class:`rmqlog.InvalidMessageError` naming the row and field of a bad value."""
    n = table.num_rows
    names = table.column_names
    if "topic" in names:
        topic = _array(table["topic"])
        if opts.topic is not None:
            topic = pc.fill_null(topic, opts.topic)
        check_utf8_column(topic, "topic", topic=True)
        if topic.null_count:
            raise InvalidMessageError(
                "is null (set the topic option for a default)", row=_first_null(topic), field="topic"
            )
    else:
        topic = pa.repeat(pa.scalar(opts.topic, pa.string()), n)
    body = _array(table["body"])
    if body.null_count:
        raise InvalidMessageError("is null", row=_first_null(body), field="body")
    body = body.cast(pa.binary())
    parts = [pa.repeat(pa.scalar("", pa.string()), n)]
    if "tags" in names:
        tags = pc.fill_null(_array(table["tags"]), "")
        check_utf8_column(tags, "tags")
        _refuse_separators(tags, "tags")
        parts.append(_piece("TAGS", tags))
    if "keys" in names:
        keys = _array(table["keys"])
        # (a list of Spark's non-nullable strings has no binary_join kernel: cast first)
        text = pc.binary_join(keys.cast(KEY_LIST), KEY_SPACE).cast(pa.string()) if is_key_list(keys.type) else keys
        text = pc.fill_null(text, "")
        check_utf8_column(text, "keys")
        _refuse_separators(text, "keys")
        parts.append(_piece("KEYS", text))
    if "properties" in names:
        parts.append(_user_properties(_array(table["properties"])))
    if "delayLevel" in names:
        level = pc.fill_null(pc.cast(_array(table["delayLevel"]), pa.int64()), 0)
        if pc.any(pc.less(level, 0)).as_py():
            raise InvalidMessageError(
                "must be >= 0", row=int(np.flatnonzero(np.asarray(pc.less(level, 0)))[0]), field="delayLevel"
            )
        parts.append(_piece("DELAY", pc.if_else(pc.greater(level, 0), pc.cast(level, pa.string()), "")))
    if "deliverTime" in names:
        ts = _array(table["deliverTime"]).cast(pa.timestamp("us"))
        ms = pc.cast(pc.divide(pc.cast(ts, pa.int64()), 1000), pa.string())
        parts.append(_piece("TIMER_DELIVER_MS", pc.fill_null(ms, "")))
    parts.append(pa.repeat(pa.scalar("WAIT" + NAME_VALUE_SEP + "true" + PROPERTY_SEP, pa.string()), n))
    props = pc.binary_join_element_wise(*parts, "")
    flag = np.zeros(n, np.int32)
    if "flag" in names:
        raw = np.asarray(pc.fill_null(pc.cast(_array(table["flag"]), pa.int64()), 0), np.int64)
        out = (raw < -(1 << 31)) | (raw >= 1 << 31)
        if out.any():
            raise InvalidMessageError("is outside Java's int range", row=int(np.flatnonzero(out)[0]), field="flag")
        flag = raw.astype(np.int32)
    return topic, body, props, flag


def _first_null(arr: pa.Array) -> int:
    return int(np.flatnonzero(np.asarray(pc.is_null(arr)))[0])


def queue_index(table: pa.Table, opts: SinkOptions, counts: np.ndarray, first_row: int, partition: int) -> np.ndarray:
    """Each row's index into its topic's queue list (module docstring); ``counts``: the
    topic's number of queues per row. ``first_row``: the row's number within the task."""
    n = table.num_rows
    index = (partition + first_row + np.arange(n, dtype=np.int64)) % counts
    if opts.queue_selector == "hash":
        key = (
            table[opts.sharding_key] if opts.sharding_key else (table["keys"] if "keys" in table.column_names else None)
        )
        if key is not None:
            key = _array(key)
            if not (pa.types.is_string(key.type) or pa.types.is_large_string(key.type) or is_key_list(key.type)):
                key = pc.cast(key, pa.string())
            if pa.types.is_string(key.type) or pa.types.is_large_string(key.type):
                check_utf8_column(key, opts.sharding_key or "keys")
            hashed = hash_queue(keys_as_string(key), counts)  # null where there is no key: round robin
            index = np.where(np.asarray(pc.is_valid(hashed)), np.asarray(hashed.fill_null(0), np.int64), index)
    if "queueId" in table.column_names:
        qid = pc.cast(_array(table["queueId"]), pa.int64())
        given = np.asarray(pc.is_valid(qid))
        values = np.asarray(qid.fill_null(0), np.int64)
        bad = given & ((values < 0) | (values >= counts))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InvalidMessageError(
                f"{values[row]} is not one of the topic's {counts[row]} writable queues", row=row, field="queueId"
            )
        index = np.where(given, values, index)
    return index


# ---------------------------------------------------------------------- sending


@dataclass(frozen=True, slots=True)
class _Chunk:
    topic: str
    broker: str
    addr: str
    queue_id: int
    via_default: bool
    body: bytes
    rows: int


def _chunks(
    topic: str, q: tuple[str, int, str], via_default: bool, body: pa.Array, props: pa.Array, flag: np.ndarray
) -> Iterator[_Chunk]:
    """One queue's messages as 320 bodies of at most :data:`CHUNK_BYTES` (at least one message each)."""
    sizes = (
        20
        + 2
        + np.asarray(pc.binary_length(body), np.int64)
        + np.asarray(pc.binary_length(props.cast(pa.binary())), np.int64)
    )
    ends = np.cumsum(sizes)
    start = 0
    n = len(body)
    while start < n:
        base = int(ends[start - 1]) if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + CHUNK_BYTES, side="right")))
        yield _Chunk(
            topic,
            q[0],
            q[2],
            q[1],
            via_default,
            encode_messages(body[start:stop], props[start:stop], flag[start:stop]),
            stop - start,
        )
        start = stop


#: how long a chunk waits for a broker group out of reach (a restart) or without a master (a
#: failover) before the task fails: the default of the option ``sendRetryTimeout``
RETRY_S = SinkOptions.send_retry_s


def _send_chunks(p: Producer, chunks: list[_Chunk], writer: str, first_sequence: int, retry_s: float) -> int:
    """Send one broker's chunks in order, each with its marker, to the queue the task routed
    it to (:meth:`rmqnet.client.Producer.send_encoded_batch`: the wait for the group's master,
    up to ``retry_s``, is the client's); the rows stored (duplicates not)."""
    stored = 0
    for k, c in enumerate(chunks):
        result = p.send_encoded_batch(
            c.topic,
            c.body,
            broker_name=c.broker,
            queue_id=c.queue_id,
            addr=c.addr,
            via_default=c.via_default,
            marker=(writer, first_sequence + k),
            master_wait_s=retry_s,
        )
        if not result.duplicate:
            stored += c.rows
    return stored


def send_task(
    opts: SinkOptions, tables: Iterator[pa.Table], writer: str, batch: int, partition: int
) -> tuple[int, int]:
    """Route, encode and send a task's rows (module docstring); ``(rows, rows stored)``.
    Raises :class:`rmqlog.InvalidMessageError`, :class:`rmqnet.client.BrokerError` and the
    client's routing and transport errors."""
    assert opts.name_server is not None
    if not 0 <= batch < (1 << 63) // CHUNKS:
        raise ValueError(f"micro-batch id {batch} leaves no room for the chunk counter")
    p = producer(opts.name_server)
    by_queue: dict[tuple[str, str, int], list[tuple[pa.Array, pa.Array, np.ndarray]]] = {}
    routes: dict[str, Queues] = {}
    rows = 0
    for table in tables:
        if not table.num_rows:
            continue
        try:
            topic, body, props, flag = message_columns(table, opts)
            names = pc.unique(topic).to_pylist()
            for name in names:
                if name not in routes:
                    routes[name] = topic_queues(p, name)
            dict_topic = pc.dictionary_encode(topic)
            per_name = np.array([len(routes[t].queues) for t in dict_topic.dictionary.to_pylist()], np.int64)
            codes = np.asarray(dict_topic.indices, np.int64)
            index = queue_index(table, opts, per_name[codes], rows, partition)
        except InvalidMessageError as exc:  # number the row within the task
            if exc.row is not None:
                exc.row += rows
                exc.args = (f"row {exc.row}, field {exc.field!r}: {exc.reason}",)
            raise
        group = codes * int(per_name.max()) + index  # (topic, queue) of each row
        order = np.argsort(group, kind="stable")
        bounds = np.flatnonzero(np.diff(group[order])) + 1
        for part in np.split(order, bounds) if len(order) else ():
            take = pa.array(part)
            name = dict_topic.dictionary[int(codes[part[0]])].as_py()
            broker, qid, _addr = routes[name].queues[int(index[part[0]])]
            by_queue.setdefault((name, broker, qid), []).append((body.take(take), props.take(take), flag[part]))
        rows += table.num_rows
    per_broker: dict[str, list[_Chunk]] = {}
    for (name, broker, qid), pieces in sorted(by_queue.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        q = next(x for x in routes[name].queues if x[0] == broker and x[1] == qid)
        body = pa.concat_arrays([b for b, _, _ in pieces])
        props = pa.concat_arrays([pr for _, pr, _ in pieces])
        flag = np.concatenate([f for _, _, f in pieces])
        uniq = pa.array(_uniq.many(len(body), p.clock.wall_ms()), pa.string())
        props = pc.binary_join_element_wise(
            props,
            pa.repeat(pa.scalar("UNIQ_KEY" + NAME_VALUE_SEP), len(body)),
            uniq,
            pa.repeat(pa.scalar(PROPERTY_SEP), len(body)),
            "",
        )
        per_broker.setdefault(broker, []).extend(_chunks(name, q, routes[name].via_default, body, props, flag))

    if any(len(chunks) >= CHUNKS for chunks in per_broker.values()):
        raise ValueError(f"a task has {CHUNKS} or more chunks for one broker: repartition")

    writer = f"{writer}/{layout_tag(routes)}"

    if not per_broker:
        return rows, 0
    # brokers at the same time, each one's chunks in order (the store keeps one sequence per writer)
    pool = concurrent.futures.ThreadPoolExecutor(len(per_broker), thread_name_prefix="rmqlog-sink")
    try:
        sends = [
            pool.submit(_send_chunks, p, chunks, writer, batch * CHUNKS, opts.send_retry_s)
            for chunks in per_broker.values()
        ]
        done, _ = concurrent.futures.wait(sends, return_when=concurrent.futures.FIRST_EXCEPTION)
        for f in done:  # a failure fails the task at once (the other brokers' sends are not waited for)
            if f.exception() is not None:
                f.result()
        return rows, sum(f.result() for f in sends)
    finally:
        pool.shutdown(wait=False)


class BrokerTarget:
    """Where the sink writes with ``nameServer``: the brokers (module docstring); the twin of
    :class:`spark_rmq.sink.StoreTarget` (:class:`spark_rmq.sink_target.SinkTarget`)."""

    @staticmethod
    def write(
        opts: SinkOptions, iterator: Iterator[pa.RecordBatch], writer: str, sequence: int, partition: int
    ) -> SinkCommit:
        rows, stored = send_task(opts, (pa.Table.from_batches([b]) for b in iterator), writer, sequence, partition)
        return SinkCommit(partition, writer, sequence, rows, stored)

    @staticmethod
    def finish(opts: SinkOptions, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing: each broker dispatches by itself."""
