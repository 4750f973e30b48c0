"""Executor side of the source over the wire: one queue range pulled from its broker (and the
key lookups, :class:`WireKeyLookup`).

A :class:`WireRange` is the partition (picklable: addresses and offsets, no connection).
:func:`read_wire_range` pulls ``[start, end)`` with ``PULL_MESSAGE`` (11, no suspend: the range
exists when it is planned) asking up to ``readBatchRows`` messages per pull (the broker caps
each answer by its transfer limits, ``maxTransferCountOnMessageInMemory`` and
``maxTransferBytesOnMessageInMemory``: raise them on brokers that serve Spark), and decodes
each answer's body, the stored records, with the store's vectorized decoder
(:func:`rmqlog.decode_records`, through :class:`rmqnet.client.PullConsumer`): no Python step
per message. The tag filter is the pull's subscription (the broker filters on the tag hash)
and then exact on the decoded rows, as RocketMQ's clients do.

Statuses: ``FOUND`` rows are kept up to ``end``; ``NO_MATCHED_MSG`` moves on to the broker's
next offset; ``OFFSET_ILLEGAL`` below the queue's first offset is retention's deletion (the
``failOnDataLoss`` policy, :func:`spark_rmq.offsets.check_data_loss`); ``NO_NEW_MSG`` or
``OFFSET_ILLEGAL`` past the queue's end means the queue now ends below the planned range:
:class:`rmqlog.CorruptStoreError` naming it, unless a slave answered (its master out of
reach): then the master's last messages were not replicated, :class:`~spark_rmq.errors.UnreplicatedError`
under ``failOnDataLoss`` (else the range ends there, warned). Without a tag filter, a ``FOUND``
answer that starts past the offset asked for is a deletion too.

Executors keep one consumer per name server list for the worker's life (its connections are
made again after a broker restarts, its down-marks keep a dead master out of later pulls). A
pull goes to the queue's broker group: its master, else at once its slave
(:class:`rmqnet.client.PullConsumer`); a group none of whose addresses answers, or missing
from the route while it restarts, is asked again for up to :data:`RETRY_S` before the task
fails (Spark then retries the task).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from rmqlog import MESSAGE_SCHEMA, CorruptStoreError
from rmqnet.client import Admin, NoRouteError, PullConsumer, PullResult, TopicNotFoundError

from .errors import UnreplicatedError
from .offsets import check_data_loss
from .read import TS_UNIT_PER_MS

log = logging.getLogger(__name__)

#: the consumer group of the executors' pulls (they commit nothing: the source's ``group``
#: option commits from the driver)
PULL_GROUP = "rmqlog_spark_reader"

_consumers: dict[str, PullConsumer] = {}
_lock = threading.Lock()


def consumer(name_server: str) -> PullConsumer:
    """This process's pull consumer of ``name_server``."""
    with _lock:
        c = _consumers.get(name_server)
        if c is None:
            c = _consumers[name_server] = PullConsumer(PULL_GROUP, name_server, timeout_s=30.0)
        return c


@dataclass(frozen=True)
class WireRange(InputPartition):
    """Messages ``[start, end)`` of queue ``queue_id`` of ``topic`` on broker ``broker``."""

    name_server: str
    topic: str
    broker: str
    queue_id: int
    start: int
    end: int
    tags: tuple[str, ...] | None = None
    fail_on_data_loss: bool = True
    batch_rows: int = 65536
    ts_from_ms: int | None = None
    ts_until_ms: int | None = None
    #: the ``sql92`` option: pulled with ``expressionType`` SQL92 (the broker filters; it needs
    #: ``enablePropertyFilter=true``), tags then kept here
    sql92: str | None = None
    #: the ``columns`` option: the rows are cut to these columns (the decode of a pulled body
    #: makes them all: the filters here need tags, queue offsets and store times)
    columns: tuple[str, ...] | None = None

    @property
    def key(self) -> str:
        return f"{self.topic}/{self.broker}/{self.queue_id}"

    def read(self) -> Iterator[pa.RecordBatch]:
        return read_wire_range(self)


#: messages asked of each broker for a key (QUERY_MESSAGE's ``maxNum``; a broker also caps it
#: by its ``maxMsgsNumBatch``)
KEY_LOOKUP_MAX = 64


@dataclass(frozen=True)
class WireKeyLookup(InputPartition):
    """The batch options ``key`` / ``msgId`` over the wire: QUERY_MESSAGE (12) on every
    broker of each topic's route."""

    name_server: str
    topics: tuple[str, ...]
    key: str
    unique: bool = False
    columns: tuple[str, ...] | None = None

    def read(self) -> Iterator[pa.RecordBatch]:
        return read_wire_key_lookup(self)


def read_wire_key_lookup(part: WireKeyLookup, schema: pa.Schema = MESSAGE_SCHEMA) -> Iterator[pa.RecordBatch]:
    """The messages the brokers find for the key (by their index files), per topic."""
    with Admin(part.name_server) as admin:
        for topic in part.topics:
            try:
                table = admin.query_by_key(topic, part.key, max_num=KEY_LOOKUP_MAX, unique=part.unique)
            except TopicNotFoundError:
                continue
            if part.columns is not None:
                table = table.select(list(part.columns))
            if table.num_rows:
                yield from (table if table.schema.equals(schema) or part.columns else table.cast(schema)).to_batches()


#: how long a pull keeps trying a broker out of reach (a restart) before the task fails
RETRY_S = 30.0
RETRY_PAUSE_S = 0.5


def _pull(pulls: PullConsumer, part: WireRange, pos: int, subscription: str) -> PullResult:
    """One pull of ``part`` from ``pos``; a broker out of reach or missing from the route (a
    restart: it registers again) is asked again, the route refreshed, for up to :data:`RETRY_S`."""
    clock = pulls.clock  # (the client's clock: rmqlog.SystemClock)
    deadline = clock.monotonic() + RETRY_S
    for attempt in itertools.count():
        try:
            return pulls.pull(
                part.topic,
                part.queue_id,
                pos,
                max_nums=min(part.end - pos, part.batch_rows),
                subscription=subscription,
                broker_name=part.broker,
                expression_type="TAG" if part.sql92 is None else "SQL92",
            )
        except (OSError, NoRouteError):  # the transport's errors are OSErrors
            if clock.monotonic() >= deadline:
                raise
        if attempt:  # the first retry follows a fresh route at once (a cached one may be stale)
            time.sleep(RETRY_PAUSE_S)  # waiting for a broker to come back: a real wait, not a test's
        with contextlib.suppress(OSError, TopicNotFoundError):
            pulls.route(part.topic)  # (refreshes the consumer's cached route)
    raise AssertionError("unreachable")  # (itertools.count never ends)


def read_wire_range(part: WireRange, schema: pa.Schema = MESSAGE_SCHEMA) -> Iterator[pa.RecordBatch]:
    """Yield the messages of ``part`` as record batches of ``schema`` (module docstring for
    the statuses and errors; also the client's ``BrokerError``, ``NoRouteError`` and
    transport errors, ``rmqlog.CorruptRecordError`` for a body that is not whole records)."""
    if part.end <= part.start:
        return
    pulls = consumer(part.name_server)
    subscription = part.sql92 if part.sql92 is not None else " || ".join(part.tags) if part.tags else "*"
    wanted = pa.array(part.tags, pa.string()) if part.tags else None
    pos = part.start
    while pos < part.end:
        r = _pull(pulls, part, pos, subscription)
        if r.status == "OFFSET_ILLEGAL" and pos < r.min_offset:
            pos = check_data_loss(part.key, pos, min(r.min_offset, part.end), part.fail_on_data_loss)
            continue
        if r.status in ("NO_NEW_MSG", "OFFSET_ILLEGAL") and r.broker_id != 0:  # a slave: the master out of reach
            if part.fail_on_data_loss:
                raise UnreplicatedError(part.key, pos, r.max_offset)
            log.warning(
                "rmqlog: queue %s: its master is out of reach and its slave ends at %d, below %d; skipping "
                "[%d, %d) (failOnDataLoss=false)",
                part.key,
                r.max_offset,
                pos,
                pos,
                part.end,
            )
            return
        if r.status in ("NO_NEW_MSG", "OFFSET_ILLEGAL"):
            raise CorruptStoreError(
                f"queue {part.key} ends at offset {r.max_offset}, below offset {pos} of the range "
                f"being read ({r.status})"
            )
        if r.next_begin_offset <= pos:  # every other answer moves on: never ask the same again
            raise CorruptStoreError(
                f"queue {part.key}: the broker answered {r.status} at offset {pos} with next "
                f"offset {r.next_begin_offset}"
            )
        if r.status == "NO_MATCHED_MSG":  # the broker's filter skipped every message pulled
            pos = r.next_begin_offset
            continue
        table = r.messages
        if table.num_rows == 0:  # FOUND with an empty body: nothing to keep, but it moved on
            pos = r.next_begin_offset
            continue
        offsets = table.column("queueOffset").to_numpy()
        if wanted is None and part.sql92 is None and int(offsets[0]) > pos:  # deleted between planning and this pull
            check_data_loss(part.key, pos, int(offsets[0]), part.fail_on_data_loss)
        keep = offsets < part.end
        if wanted is not None:
            keep &= np.asarray(pc.fill_null(pc.is_in(table.column("tags"), wanted), False))
        if part.ts_from_ms is not None or part.ts_until_ms is not None:
            ts = pc.cast(table.column("storeTimestamp"), pa.int64()).to_numpy()
            if part.ts_from_ms is not None:
                keep &= ts >= part.ts_from_ms * TS_UNIT_PER_MS
            if part.ts_until_ms is not None:
                keep &= ts < part.ts_until_ms * TS_UNIT_PER_MS
        pos = max(int(offsets[-1]) + 1, r.next_begin_offset)
        if not keep.all():
            table = table.filter(pa.array(keep))
        if part.columns is not None:
            table = table.select(list(part.columns))
        if table.num_rows:
            yield from (table if table.schema.equals(schema) or part.columns else table.cast(schema)).to_batches()
