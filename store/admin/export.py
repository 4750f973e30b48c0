"""Exporting a topic's messages to a file: JSON lines or Parquet, in bounded batches.

The range is per queue: ``[from_offset, to_offset)`` in queue offsets, or the messages stored
in ``[begin_ms, end_ms]`` (found by binary search on store time: store times never go back
within a queue), or both (the intersection). Messages are read ``BATCH`` at a time through
the store's checked read path (:meth:`rmqlog.MessageStore.read_queue`), so memory stays flat
whatever the range; Parquet is written with the message table's schema (one row group per
batch), JSON lines one message per line (:mod:`rmqlog.admin.jsonl`: bodies as UTF-8 text
with replacement characters, or hex; built a batch at a time, no per-message Python). The
output is a binary file the caller opened (:mod:`rmqlog.admin.outpath`: never inside the
store; ``-`` is stdout). A progress bar (tqdm) counts messages on stderr when it is a
terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InvalidArgumentError
from ..message_store import MessageStore
from ..schema import MESSAGE_SCHEMA
from . import jsonl

#: Messages read (and written) per step.
BATCH = 65_536
FORMATS = ("jsonl", "parquet")


@dataclass(frozen=True)
class ExportRange:
    """Which messages of a topic (see the module docstring); ``None``: unbounded."""

    topic: str
    queues: list[int] | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    begin_ms: int | None = None
    end_ms: int | None = None


def plan(s: MessageStore, r: ExportRange) -> list[tuple[int, int, int]]:
    """(queue, first offset, end offset) of every queue with messages in the range."""
    tc = s.topics().get(r.topic)
    if tc is None:
        raise InvalidArgumentError(
            f"no topic {r.topic!r} in {s.paths.root}; topics: {', '.join(sorted(s.topics())) or 'none'}"
        )
    count = max(tc.read_queue_nums, tc.write_queue_nums)
    queues = list(range(count)) if r.queues is None else r.queues
    out = []
    for q in queues:
        if not 0 <= q < count:
            raise InvalidArgumentError(f"queue {q} is not a queue of topic {r.topic!r} ({count} queues)")
        lo, hi = s.min_offset(r.topic, q), s.max_offset(r.topic, q)
        if r.from_offset is not None:
            lo = max(lo, r.from_offset)
        if r.to_offset is not None:
            hi = min(hi, r.to_offset)
        if r.begin_ms is not None:
            lo = max(lo, s.offset_for_timestamp(r.topic, q, r.begin_ms))
        if r.end_ms is not None:
            hi = min(hi, s.offset_for_timestamp(r.topic, q, r.end_ms + 1))
        if hi > lo:
            out.append((q, lo, hi))
    return out


def batches(s: MessageStore, topic: str, ranges: list[tuple[int, int, int]]) -> Iterator[pa.Table]:
    for q, lo, hi in ranges:
        for a in range(lo, hi, BATCH):
            table = s.read_queue(topic, q, a, min(hi, a + BATCH))
            if table.num_rows:
                yield table


def export(
    s: MessageStore,
    r: ExportRange,
    out: BinaryIO,
    fmt: str,
    *,
    body: str = "text",
    progress: Callable[[int], Any] | None = None,
) -> int:
    """Write the messages of ``r`` to the binary file ``out`` as ``fmt``; returns how many.
    ``progress(n)`` is called after each batch with its size."""
    if fmt not in FORMATS:
        raise InvalidArgumentError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    ranges = plan(s, r)
    n = 0
    writer = pq.ParquetWriter(out, MESSAGE_SCHEMA) if fmt == "parquet" else None
    try:
        for table in batches(s, r.topic, ranges):
            if writer is not None:
                writer.write_table(table)
            else:
                out.write(jsonl.lines(table, body))
            n += table.num_rows
            if progress:
                progress(table.num_rows)
    finally:
        if writer is not None:
            writer.close()
    return n


def total(ranges: list[tuple[int, int, int]]) -> int:
    """Messages in the planned ranges (the progress bar's total; fillers included)."""
    return sum(hi - lo for _, lo, hi in ranges)
