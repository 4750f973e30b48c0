"""The checker: a store recovered, then compared with the ledger, the reference decoder and itself.

:func:`check_store` opens the store (the first opener recovers it), then:

1. ``MessageStore.verify()`` before and after a ``dispatch()``;
2. the commitlog read with the reference decoder (:mod:`refwalk`: every record, CRC checked):
   every record intact, in its topic and queue, of a batch a writer began, whole, once;
3. every queue through the store's API (``read_queue`` and ``get_messages`` pages of random
   sizes) and, raw, with the reference decoder's consume-queue reader, against the log;
4. every acknowledged batch present in the log and through the queues, at the offsets
   ``put_batch`` returned;
5. one batch appended after recovery: at the published tail, each queue at its next offset.

What it counts (``lost``/``duplicated`` are messages, ``torn`` incidents) is described in the
package's docstring; ``details`` says why, one line per incident.
"""

from __future__ import annotations

import random
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import refcodec as rc
import rmqlog

from .ledger import Ledger, Notes
from .messages import (
    TOPIC_QUEUES,
    TOPICS,
    BadMessage,
    Ident,
    identify,
    make_batch,
    store_config,
    writer_name,
)
from .refwalk import RefRec, walk_log

#: ``torn(n, why)``: count ``n`` torn incidents and say why
Torn = Callable[[int, str], None]


def check_store(spec: dict[str, Any]) -> dict[str, Any]:
    """Recover the store, then count lost, duplicated and torn messages and verify problems.

    The commitlog is read with the reference decoder ``refcodec`` (every record, CRC checked)
    and every queue through the store's API (``read_queue`` and ``get_messages`` pages) and,
    raw, with the reference decoder's consume-queue reader; both views are compared with the
    ledger of acknowledged batches and with each other. The open store is returned under
    ``_store`` (the caller closes it, or dies with it open).
    """
    res: dict[str, Any] = {"lost": 0, "duplicated": 0, "torn": 0, "verify": 0, "errors": [], "details": []}
    rng = random.Random(spec["seed"])
    root = Path(spec["root"])
    led = Ledger.load(sorted(Path(spec["acks"]).glob("*.log")))
    res["acked_total"] = led.acked_messages()
    detail = res["details"].append

    def torn(n: int, why: str) -> None:
        res["torn"] += n
        detail(f"torn x{n}: {why}")

    t0 = time.monotonic()
    try:
        s = rmqlog.MessageStore.open(root, store_config(spec["config"]))
    except rmqlog.StoreError as exc:
        res["errors"].append(f"reopen failed with {type(exc).__name__}: {exc}")
        return res
    except Exception as exc:  # an untyped error: a bug in itself
        res["errors"].append(f"reopen raised an untyped {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        return res
    res["_store"] = s
    rep = s.recovery
    res["recovery"] = (
        None
        if rep is None
        else {
            "abnormal": rep.abnormal,
            "end": rep.end,
            "dropped": rep.dropped_bytes,
            "redispatched": rep.redispatched,
            "rebuilt": rep.state_rebuilt,
            "seconds": round(time.monotonic() - t0, 4),
        }
    )
    for err in led.errors:
        res["errors"].append(err)
    for p in led.torn_reads:
        torn(1, f"live reader: {p}")
    try:
        _check_open_store(s, spec, led, res, torn, rng)
    except Exception as exc:
        res["errors"].append(
            f"the store raised {type(exc).__name__} while being checked: {exc}\n{traceback.format_exc()}"
        )
    return res


@dataclass
class LogView:
    """The commitlog as the reference decoder saw it, arranged for the checks."""

    #: (uid, seq, row) -> copies in the log
    count: Counter[tuple[int, int, int]] = field(default_factory=Counter)
    #: commitlog offset -> the message there
    at: dict[int, Ident] = field(default_factory=dict)
    #: (topic, queue id) -> its records, in log order
    by_queue: dict[tuple[str, int], list[RefRec]] = field(default_factory=dict)


def _check_open_store(
    s: rmqlog.MessageStore, spec: dict[str, Any], led: Ledger, res: dict[str, Any], torn: Torn, rng: random.Random
) -> None:
    root = Path(spec["root"])
    _verify(s, res)
    tail = s.published_tail()
    records, problems, log_end = walk_log(root / "commitlog", Path(spec["cache"]))
    res["records"] = len(records)
    for p in problems:
        torn(1, p)
    past = sum(1 for r in records if r[0] + r[1] > tail)
    if past:
        torn(past, f"{past} records past the published tail {tail} (log end {log_end})")
    log = _check_log(records, led, res, torn)
    api_count: Counter[tuple[int, int, int]] = Counter()
    queues = set(log.by_queue)
    cq_root = root / "consumequeue"
    for tdir in sorted(cq_root.iterdir()) if cq_root.is_dir() else []:
        for qdir in sorted(tdir.iterdir()):
            if qdir.name.isdigit():
                queues.add((tdir.name, int(qdir.name)))
    for topic, q in sorted(queues):
        ref = sorted(log.by_queue.get((topic, q), []), key=lambda r: r[4])
        _check_queue(s, root, topic, q, ref, api_count, torn, rng)
    _check_acknowledged(led, log, api_count, res, torn)
    _append_after_recovery(s, spec, res, tail)


def _verify(s: rmqlog.MessageStore, res: dict[str, Any]) -> None:
    """``verify()`` before and after a ``dispatch()``: every problem counts."""
    for when in ("before dispatch", "after dispatch"):
        if when == "after dispatch":
            s.dispatch()
        v = s.verify()
        res["verify"] += len(v.problems)
        for p in v.problems[:5]:
            res["details"].append(f"verify {when}: {p}")


def _check_log(records: list[RefRec], led: Ledger, res: dict[str, Any], torn: Torn) -> LogView:
    """Each record intact and where its message asked; each batch begun by a writer, whole, once."""
    log = LogView()
    batches: dict[tuple[int, int], list[int]] = {}
    for r in records:
        ident = r[6]
        log.by_queue.setdefault((r[2], r[3]), []).append(r)
        if isinstance(ident, str):
            torn(1, f"record at {r[0]}: {ident}")
            continue
        u, sq, row, n, t, q = ident
        log.count[(u, sq, row)] += 1
        batches.setdefault((u, sq), []).append(row)
        log.at[r[0]] = ident
        if TOPICS[t] != r[2] or (q >= 0 and q != r[3]):
            torn(1, f"message {ident} stored in {r[2]}/{r[3]}")
    for (u, sq), rows in batches.items():
        begun = led.begun.get((u, sq))  # the rows of the batch, as its writer noted
        if begun is None:
            torn(1, f"batch uid {u} seq {sq} present ({len(rows)} rows) but never begun by a writer")
            continue
        c = Counter(rows)
        extra = sum(k - 1 for k in c.values() if k > 1)
        if extra:
            res["duplicated"] += extra
            res["details"].append(f"duplicated: batch uid {u} seq {sq}: {extra} extra copies")
        if set(c) != set(range(begun)):
            torn(1, f"batch uid {u} seq {sq} partly present: {len(c)} of {begun} rows")
    return log


def _check_acknowledged(
    led: Ledger, log: LogView, api_count: Counter[tuple[int, int, int]], res: dict[str, Any], torn: Torn
) -> None:
    """Every acknowledged message in the log and through its queue; its batch where put_batch said."""
    for (u, sq), n in led.acked.items():
        gone = sum(1 for row in range(n) if not log.count[(u, sq, row)] or not api_count[(u, sq, row)])
        if gone:
            res["lost"] += gone
            res["details"].append(
                f"lost: {gone} of {n} acknowledged messages of uid {u} seq {sq}"
                f" (commitlog has {sum(1 for row in range(n) if log.count[(u, sq, row)])})"
            )
    at = log.at
    for u, sq, first, last in led.ack_offsets:
        n = led.acked[(u, sq)]
        if at.get(first, (None, None, None))[:3] != (u, sq, 0) or at.get(last, (None, None, None))[:3] != (
            u,
            sq,
            n - 1,
        ):
            torn(
                1, f"acknowledged batch uid {u} seq {sq}: offsets {first}..{last} hold {at.get(first)}..{at.get(last)}"
            )


def _check_queue(
    s: rmqlog.MessageStore,
    root: Path,
    topic: str,
    q: int,
    ref: list[RefRec],
    api_count: Counter[tuple[int, int, int]],
    torn: Torn,
    rng: random.Random,
) -> None:
    """One queue: dense offsets, raw units, ``read_queue`` and ``get_messages`` against the log."""
    hi = _check_units(s, root, topic, q, ref, torn)
    if _check_read_queue(s, topic, q, ref, hi, api_count, torn):
        _check_get_messages(s, topic, q, ref, torn, rng)


def _check_units(s: rmqlog.MessageStore, root: Path, topic: str, q: int, ref: list[RefRec], torn: Torn) -> int:
    """Queue offsets dense, the raw consume-queue units and min/max offsets as the log says; the max offset."""
    where = f"{topic}/{q}"
    n = len(ref)
    qoffs = [r[4] for r in ref]
    if qoffs != list(range(n)):
        bad = next(i for i, o in enumerate(qoffs) if o != i)
        torn(1, f"queue {where}: queue offsets not dense/unique from position {bad} ({qoffs[bad : bad + 3]})")
    d = root / "consumequeue" / topic / str(q)
    units = rc.read_consume_queue(str(d)) if d.is_dir() else []
    want = [(r[0], r[1], r[5]) for r in ref]
    if units != want:
        diff = sum(1 for a, b in zip(units, want, strict=False) if a != b) + abs(len(units) - len(want))
        torn(diff, f"queue {where}: {len(units)} consume-queue units vs {n} records, {diff} disagree")
    lo, hi = s.min_offset(topic, q), s.max_offset(topic, q)
    if (lo, hi) != (0, n):
        torn(abs(hi - n) or 1, f"queue {where}: min/max offset {lo}/{hi}, the log holds {n}")
    return hi


def _check_read_queue(
    s: rmqlog.MessageStore,
    topic: str,
    q: int,
    ref: list[RefRec],
    hi: int,
    api_count: Counter[tuple[int, int, int]],
    torn: Torn,
) -> bool:
    """The whole queue through ``read_queue`` against the log; False if the read raised."""
    where = f"{topic}/{q}"
    n = len(ref)
    try:
        table = s.read_queue(topic, q, 0, max(hi, n))
    except rmqlog.StoreError as exc:  # reads check units against records: damage is a typed error
        torn(max(n, 1), f"queue {where}: read_queue raised {type(exc).__name__}: {exc}")
        return False
    idents: list[Ident | str] = []
    for body, keys in zip(table["body"].to_pylist(), table["keys"].to_pylist(), strict=True):
        try:
            idents.append(identify(body, " ".join(keys or [])))
        except BadMessage as exc:
            idents.append(str(exc))
    for ident in idents:
        if not isinstance(ident, str):
            api_count[ident[:3]] += 1
    got = list(zip(table["commitLogOffset"].to_pylist(), table["queueOffset"].to_pylist(), idents, strict=True))
    want_api = [(r[0], r[4], r[6]) for r in ref]
    if got != want_api:
        diff = sum(1 for a, b in zip(got, want_api, strict=False) if a != b) + abs(len(got) - len(want_api))
        torn(diff, f"queue {where}: read_queue disagrees with the commitlog for {diff} messages")
    return True


def _check_get_messages(
    s: rmqlog.MessageStore, topic: str, q: int, ref: list[RefRec], torn: Torn, rng: random.Random
) -> None:
    """The queue through ``get_messages``, page by page with random page sizes, against the log."""
    where = f"{topic}/{q}"
    off, pages, phys = 0, 0, []
    while pages < 100_000:
        pages += 1
        try:
            r = s.get_messages("torture-check", topic, q, off, max_count=rng.randint(1, 4000))
        except rmqlog.StoreError as exc:
            torn(1, f"queue {where}: get_messages at {off} raised {type(exc).__name__}: {exc}")
            break
        if r.status is rmqlog.GetMessageStatus.FOUND:
            phys.extend(r.messages["commitLogOffset"].to_pylist())
            if r.next_begin_offset <= off:
                torn(1, f"queue {where}: get_messages did not advance at {off}")
                break
            off = r.next_begin_offset
            continue
        if r.status not in (
            rmqlog.GetMessageStatus.OFFSET_OVERFLOW_ONE,
            rmqlog.GetMessageStatus.NO_MESSAGE_IN_QUEUE,
            rmqlog.GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
        ):
            torn(1, f"queue {where}: get_messages at {off} answered {r.status.name}")
        break
    if phys != [r[0] for r in ref]:
        diff = sum(1 for a, b in zip(phys, ref, strict=False) if a != b[0]) + abs(len(phys) - len(ref))
        torn(diff, f"queue {where}: get_messages read {len(phys)} messages, the log holds {len(ref)}, {diff} disagree")


def _append_after_recovery(s: rmqlog.MessageStore, spec: dict[str, Any], res: dict[str, Any], tail: int) -> None:
    """Append one batch after recovery: at the published tail, each queue at its next offset.

    After a ``dispatch()``, the new units of every queue (read with ``read_queue``) must be
    exactly the appended messages, at the queue offsets ``put_batch`` returned.
    """
    uid = spec["uid"]
    note = Notes(spec["log"])
    table = make_batch(spec["run_seed"], uid, 0, True)
    n = table.num_rows
    queues = [(topic, q) for topic, nq in zip(TOPICS, TOPIC_QUEUES, strict=True) for q in range(nq)]
    before = {key: s.max_offset(*key) for key in queues}
    note("B", uid, 0, n)
    out = s.put_batch(table, writer=writer_name(uid), sequence=0)
    offs = out["commitLogOffset"].to_pylist()
    if len(offs) != n:  # a writer name never used before: nothing to skip
        res["errors"].append(f"append after recovery of {n} rows (new idempotent writer {uid}) returned {len(offs)}")
        return
    note("A", uid, 0, n, len(offs), offs[0], offs[-1], sync=True)
    res["acked_total"] += n
    seg = s.commitlog.segment_size
    if not (offs[0] == tail or (offs[0] > tail and offs[0] % seg == 0 and offs[0] - tail < seg)):
        res["errors"].append(f"append after recovery at commitlog offset {offs[0]}, published tail was {tail}")
    s.dispatch()
    placed: dict[int, int] = {}
    for key in queues:
        new = s.read_queue(*key, before[key], 1 << 62)
        qoffs = new["queueOffset"].to_pylist()
        if qoffs != list(range(before[key], before[key] + len(qoffs))):
            res["errors"].append(f"after recovery, queue {key} continued at {qoffs[:3]}, expected {before[key]}")
        placed.update(zip(new["commitLogOffset"].to_pylist(), qoffs, strict=True))
    if placed != dict(zip(offs, out["queueOffset"].to_pylist(), strict=True)):
        res["errors"].append(f"after recovery, the {n} appended messages are not where put_batch said")
