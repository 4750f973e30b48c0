"""Light message queues (RocketMQ 4.9.8's LMQ, ``MultiDispatch``): the names and rules every
part of the store shares.

A message whose ``INNER_MULTI_DISPATCH`` property names queues (``,``-separated, each
``%LMQ%...``) is stored once and also dispatched into each one's queue 0, at the offset its
``INNER_MULTI_QUEUE_OFFSET`` property gives (the same order, ``,``-separated, written by the
put under the append lock: :mod:`rmqlog.access.lmq`). The dispatcher, the append state's
rebuild and recovery read those two properties back from the records
(:func:`lmq_entries`); a record lacking either, or whose lists differ in length, gets no LMQ
unit (RocketMQ's ``checkMultiDispatchQueue``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, MutableMapping

import numpy as np
import pyarrow as pa

from ..paths import topic_problem
from .properties import ParsedProperties
from .record import NAME_VALUE_SEPARATOR

log = logging.getLogger(__name__)

#: ``MessageConst.PROPERTY_INNER_MULTI_DISPATCH``: the queues a message is also dispatched to
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
#: ``MessageConst.PROPERTY_INNER_MULTI_QUEUE_OFFSET``: its offset in each (written by the put)
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
#: ``MixAll.LMQ_PREFIX``
LMQ_PREFIX = "%LMQ%"
#: ``MixAll.MULTI_DISPATCH_QUEUE_SPLITTER``
SPLITTER = ","
#: the properties a dispatch with LMQs on reads beside TAGS
LMQ_NAMES = (PROPERTY_INNER_MULTI_DISPATCH, PROPERTY_INNER_MULTI_QUEUE_OFFSET)
#: the bytes every record with LMQ offsets holds (a run without them needs no parse)
LMQ_NEEDLE = (PROPERTY_INNER_MULTI_QUEUE_OFFSET + NAME_VALUE_SEPARATOR).encode()


def split_queues(value: str) -> list[str]:
    """Java's ``value.split(",")``: trailing empty pieces dropped (``"a,b,"`` is two names)."""
    pieces = value.split(SPLITTER)
    while pieces and not pieces[-1]:
        pieces.pop()
    return pieces


def is_blank(value: str | None) -> bool:
    """``StringUtils.isBlank``: ``None``, empty, or whitespace only."""
    return value is None or not value.strip()


def lmq_problem(name: str) -> str | None:
    """Why ``name`` cannot be a light message queue (it is a topic name, and so a folder
    under ``consumequeue/``: validated as one), or ``None``."""
    if not name.startswith(LMQ_PREFIX):
        return f"{name!r} is not a light message queue (its name must start with {LMQ_PREFIX})"
    return topic_problem(name)


def lmq_entries(queues: pa.Array, offsets: pa.Array, rows: np.ndarray) -> Iterator[tuple[int, str, int]]:
    """(row, LMQ, queue offset) of every LMQ unit the records of ``rows`` carry (``queues``,
    ``offsets``: the two properties per record, null where absent). A record whose lists do
    not pair up, or that names something no LMQ can be, is logged and skipped for that
    entry: a damaged record must not stop the dispatch."""
    both = np.flatnonzero(np.asarray(queues.is_valid()) & np.asarray(offsets.is_valid()))
    if not len(both):
        return
    wanted = both[np.isin(both, rows)]
    names_at, offs_at = queues.take(pa.array(wanted)).to_pylist(), offsets.take(pa.array(wanted)).to_pylist()
    for row, names_s, offs_s in zip(wanted.tolist(), names_at, offs_at, strict=True):
        if is_blank(names_s) or is_blank(offs_s):
            continue
        names, offs = split_queues(names_s), split_queues(offs_s)
        if len(names) != len(offs):
            log.warning(
                "record %d of a run: %s names %d queues and %d offsets; no LMQ unit",
                row,
                PROPERTY_INNER_MULTI_DISPATCH,
                len(names),
                len(offs),
            )
            continue
        for name, off in zip(names, offs, strict=True):
            if lmq_problem(name) is not None or not (off.isascii() and off.isdigit()):
                log.warning("record %d of a run: LMQ %r at offset %r cannot be dispatched; skipped", row, name, off)
                continue
            yield row, name, int(off)


def with_lmq_units(
    lmq: tuple[pa.Array, pa.Array] | None,
    keep: np.ndarray,
    topics: list[str],
    tidx: np.ndarray,
    qid: np.ndarray,
    qoff: np.ndarray,
    physical: np.ndarray,
    sizes: np.ndarray,
    codes: np.ndarray,
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The units of a run of records (the arrays are per record; ``keep``: the records that
    get units) with their LMQ units added when ``lmq`` (the two properties per record) is
    given: queue 0 of each LMQ, the record's position, size and tagsCode
    (``ConsumeQueue.multiDispatchLmqQueue``). Returns the kept records' units followed by the
    LMQ ones, ``topics`` extended by the LMQs' names."""
    base = (tidx[keep], qid[keep], qoff[keep], physical[keep], sizes[keep], codes[keep])
    entries = list(lmq_entries(lmq[0], lmq[1], np.flatnonzero(keep))) if lmq is not None else []
    if not entries:
        return (topics, *base)
    names = list(topics)
    index = {t: i for i, t in enumerate(names)}
    rows = np.fromiter((e[0] for e in entries), np.int64, len(entries))
    lt = np.fromiter((index.setdefault(e[1], len(index)) for e in entries), np.int64, len(entries))
    names.extend(list(index)[len(names) :])
    lo = np.fromiter((e[2] for e in entries), np.int64, len(entries))
    t, q, o, p, z, c = (
        np.concatenate((a, b))
        for a, b in zip(
            base, (lt, np.zeros(len(entries), np.int64), lo, physical[rows], sizes[rows], codes[rows]), strict=True
        )
    )
    return names, t, q, o, p, z, c


def lmq_next_offsets(queues: pa.Array, offsets: pa.Array, rows: np.ndarray) -> dict[str, int]:
    """Each LMQ's next offset (largest offset + 1) in the records of ``rows``, keyed as the
    append state keys queues (``"%LMQ%x/0"``): the state rebuilt from the log."""
    out: dict[str, int] = {}
    for _, name, off in lmq_entries(queues, offsets, rows):
        key = f"{name}/0"
        out[key] = max(out.get(key, 0), off + 1)
    return out


def in_lmq(properties: pa.Array, topic: str, logical: np.ndarray) -> np.ndarray:
    """Whether each record (its properties string) is in LMQ ``topic`` at queue offset
    ``logical`` (that row's): what a unit of an LMQ is checked against."""
    parsed = ParsedProperties(properties, names=LMQ_NAMES)
    out = np.zeros(len(logical), bool)
    for i, (names_s, offs_s) in enumerate(zip(*(parsed.column(n).to_pylist() for n in LMQ_NAMES), strict=True)):
        names, offs = split_queues(names_s or ""), split_queues(offs_s or "")
        out[i] = len(names) == len(offs) and (topic, str(int(logical[i]))) in zip(names, offs, strict=True)
    return out


def note_lmq_offsets(queues: MutableMapping[str, int], properties: pa.Array, rows: np.ndarray) -> None:
    """Move each LMQ's next offset in ``queues`` (an append state's) past the records of
    ``rows`` (their properties strings): a state rebuilt from the log, a replica's."""
    parsed = ParsedProperties(properties, names=LMQ_NAMES)
    for key, o in lmq_next_offsets(parsed.column(LMQ_NAMES[0]), parsed.column(LMQ_NAMES[1]), rows).items():
        queues[key] = max(queues.get(key, 0), o)
