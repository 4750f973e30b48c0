"""What a pop hands out (:meth:`rmqnet.broker.pop.PopService.pop`'s answer): per queue read, the
records byte-exact as a pull's body and their receipt handles; the pop response header's
offset infos as RocketMQ 5's ``ExtraInfoUtil`` writes them; the messages decoded for the gRPC
receive."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

import rmqlog
from rmqlog import StoredRecords

from .pop_handle import offset_info_entry, topic_type


@dataclass(slots=True)
class PoppedQueue:
    """The messages one pop took from one queue: ``topic`` the topic read (the topic or its
    POP retry topic), ``records`` byte-exact as a pull returns them, ``handles`` one receipt
    handle per record, ``attempts`` (orderly pops) each message's reconsume count to report
    (RocketMQ's ``orderCountInfo``; ``None``: the record's own ``reconsumeTimes``)."""

    topic: str
    queue_id: int
    start: int
    records: StoredRecords
    handles: list[str]
    attempts: np.ndarray | None = None


@dataclass(slots=True)
class PopResult:
    """A pop's answer: the queues read, in order; ``rest`` messages left behind them."""

    pop_time: int
    invisible: int
    revive_qid: int
    rest: int = 0
    queues: list[PoppedQueue] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(len(q.records) for q in self.queues)

    @property
    def handles(self) -> list[str]:
        return [h for q in self.queues for h in q.handles]

    def messages(self) -> pa.Table:
        """The messages decoded (:data:`rmqlog.MESSAGE_SCHEMA`, as :func:`rmqlog.decode_records`
        decodes a pull's body; ``topic`` the topic read) with ``receiptHandle`` (the handle of
        each) and, for an orderly pop, ``reconsumeTimes`` the attempt count of this delivery:
        what a gRPC receive answers from. One decode per queue read."""
        tables = []
        for q in self.queues:
            table = rmqlog.decode_records(q.records.data)
            if q.attempts is not None:
                i = table.schema.get_field_index("reconsumeTimes")
                table = table.set_column(i, table.schema.field(i), pa.array(q.attempts, table.schema.field(i).type))
            tables.append(table.append_column("receiptHandle", pa.array(q.handles, pa.string())))
        if not tables:
            return rmqlog.MESSAGE_SCHEMA.append(pa.field("receiptHandle", pa.string())).empty_table()
        return pa.concat_tables(tables)

    def rows(self) -> list[dict[str, Any]]:
        """The messages as rows (:func:`rmqlog.decode_record_rows`: ``MESSAGE_SCHEMA``'s names,
        each record decoded with ``struct``, cheaper than :meth:`messages` for a batch of 32),
        each with ``receiptHandle`` and, for an orderly pop, ``reconsumeTimes`` the attempt
        count of this delivery."""
        out: list[dict[str, Any]] = []
        for q in self.queues:
            rows = rmqlog.decode_record_rows(q.records.data)
            attempts = q.attempts.tolist() if q.attempts is not None else None
            for i, (row, handle) in enumerate(zip(rows, q.handles, strict=True)):
                row["receiptHandle"] = handle
                if attempts is not None:
                    row["reconsumeTimes"] = attempts[i]
            out += rows
        return out

    def body(self) -> list[memoryview]:
        """The records of every queue, as a pull's body (no copy)."""
        return [memoryview(q.records.data) for q in self.queues if len(q.records)]

    def start_offset_info(self) -> str:
        return ";".join(offset_info_entry(q.topic, q.queue_id, q.start) for q in self.queues)

    def msg_offset_info(self) -> str:
        return ";".join(
            offset_info_entry(q.topic, q.queue_id, ",".join(map(str, q.records.queue_offsets.tolist())))
            for q in self.queues
        )

    def order_count_info(self) -> str | None:
        """An orderly pop's ``orderCountInfo``: ``topicType qo<queueId>%<offset> count`` per
        message (``ExtraInfoUtil.buildQueueOffsetOrderCountInfo``); ``None`` otherwise."""
        parts: list[str] = []
        for q in self.queues:
            if q.attempts is None:
                return None
            mark = topic_type(q.topic)
            parts += [
                f"{mark} qo{q.queue_id}%{o} {a}"
                for o, a in zip(q.records.queue_offsets.tolist(), q.attempts.tolist(), strict=True)
            ]
        return ";".join(parts)


def take(recs: StoredRecords, idx: np.ndarray) -> StoredRecords:
    """The records at indexes ``idx`` (a filtered orderly batch)."""
    return StoredRecords(
        recs.array.take(pa.array(idx)), recs.commit_log_offsets[idx], recs.sizes[idx], recs.queue_offsets[idx]
    )


__all__ = ["PopResult", "PoppedQueue", "take"]
