"""The dispatcher (RocketMQ's ReputMessageService): commitlog records -> consume-queue units.

It walks the commitlog from its saved position up to the published tail, decodes the fields
a unit needs (topic, queue id, queue offset, size, TAGS) for the whole run at once, and writes
each queue's units as one slice (``lmq``: also one in each light message queue a record names,
:mod:`rmqlog.log.lmq`). Prepared and rolled-back transaction records get no unit, and so does a
record whose topic could not name a queue directory (written by another tool, or not UTF-8;
logged, still readable by offset and msgId): it would otherwise stop every later dispatch. It
holds ``dispatch.lock`` while it works, so any number of processes may call it; one at a time.

Its position lives in ``<root>/dispatch.state`` (:mod:`rmqlog.queue.dispatch_position`),
written in place after the units, under ``dispatch.lock`` (every reader holds it shared). It
is a hint, never a source of truth: a crash between writing units and saving the position
only means the next run walks those records again, and writing a unit that is already there
is skipped (idempotent). Without the file, the position is rebuilt RocketMQ's way (the largest
``commitLogOffset + size`` of any queue), but never past the last unit of a queue short of the
append state's next offset: a process killed between two queues' writes leaves some queues of
a run without their units. A queue whose next units would start past its end makes the
dispatch walk back for the missing ones (:meth:`Dispatcher._dispatch_scan`); a filler is
written only where the records are not in the log.

As the store's background service (:meth:`Dispatcher.run_once`), an idle round is one look at
``append.state``'s slot headers through an open descriptor (no lock, no file opened, no JSON):
unchanged since the last round that caught up with the published tail means nobody published
anything, so there is nothing to dispatch or to signal. Rounds come when a put of this process
wakes the service (after its publish), when :mod:`rmqlog.queue.append_watch` (inotify, local
file systems) sees any process publish, and otherwise every ``reput_interval_ms`` without the
watch, every :data:`FULL_ROUND_S` with it (and a full round at least that often whatever the
headers say).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path

import numpy as np

from .. import crash_points, safe_open
from ..clock import SYSTEM_CLOCK
from ..errors import DiskFullError
from ..fileio import InterProcessLock
from ..hashing import tags_codes
from ..log.commitlog import CommitLog
from ..log.decode import RecordColumns, read_columns
from ..log.lmq import LMQ_NAMES, with_lmq_units
from ..log.mapped_file import MappedFile
from ..log.properties import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, ParsedProperties
from ..log.record import is_consumable
from ..paths import topic_problem
from .append_watch import AppendWatch
from .arrival import ArrivalListener, ArrivalSignal, Maxes
from .consume_queue import CQ_UNIT, FILLER_SIZE, ConsumeQueue
from .dispatch_position import DispatchPositionFile
from .gaps import GoBack, QueueBehind, queue_name_ok

log = logging.getLogger(__name__)

#: Bytes of commitlog decoded per step: bounds memory whatever the backlog.
DISPATCH_CHUNK = 32 << 20
#: Seconds between full rounds of the background service even while the append state's token says
#: nothing changed: a safety net for a stale ``fstat`` (NFS); one full round (~0.1 ms) a second.
FULL_ROUND_S = 1.0
#: Seconds a background round leaves a direct put of this process to dispatch itself.
DIRECT_GRACE_S = 0.05
#: The properties a dispatch with an index reads: TAGS for the units, the index's keys.
_INDEXED_NAMES = (PROPERTY_TAGS, PROPERTY_UNIQ_KEY, PROPERTY_KEYS)


class Dispatcher:
    def __init__(
        self,
        commitlog: CommitLog,
        queue_for: Callable[[str, int], ConsumeQueue],
        all_queues: Callable[[], list[ConsumeQueue]],
        published_tail: Callable[[], int],
        state_path: Path,
        lock: InterProcessLock,
        interval_ms: int = 1,
        tail_version: Callable[[], Hashable | None] | None = None,
        own_version: Callable[[], Hashable | None] | None = None,
        own_publishing: Callable[[], bool] | None = None,
        watch_path: Path | None = None,
        published_queues: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.commitlog = commitlog
        #: the append state's next queue offset per ``"topic/queueId"`` (see :meth:`_derive_position`)
        self.published_queues = published_queues
        self.queue_for = queue_for
        self.all_queues = all_queues
        self.published_tail = published_tail
        self.state_path = state_path
        self.lock = lock
        self._last_ts = 0
        #: a token of the published append state that changes with every publish, cheap to read
        #: (:meth:`rmqlog.log.append_state.AppendStateFile.version`); ``None``: a full round
        self.tail_version = tail_version
        #: the token of the state this process published last (``None``: unknown), and whether
        #: it is publishing one now (its token not named yet)
        self.own_version, self.own_publishing = own_version, own_publishing
        #: the token as read, under the lock, by the last dispatch that left nothing behind it
        #: (position = published tail): while it is the same, a round has nothing to do
        self._idle_at: Hashable | None = None
        #: the loop's time of the last full round (the safety net of :data:`FULL_ROUND_S`)
        self._full_at: float | None = None
        # a service of the store's loop (rmqlog.service): every interval_ms while idle, a backlog
        self.name = "rmq-dispatcher"  # in rounds of DISPATCH_CHUNK bytes (other services between)
        self.interval_s = self._poll_s = interval_ms / 1000.0
        #: ``append.state``: watched while the service runs (:meth:`attach`), so idle rounds
        #: come only every FULL_ROUND_S; ``None``: polled every ``interval_ms``
        self.watch_path = watch_path
        self._watch: AppendWatch | None = None
        self.repeat_when_busy, self.wait_first = True, False
        self.last_error: BaseException | None = None
        #: called with every run of dispatched records and their parsed properties, under the
        #: dispatch lock, before the position moves past them (the index builder,
        #: :mod:`rmqlog.index.feed`); ``None``: nothing else is built
        self.index_hook: Callable[[RecordColumns, ParsedProperties], object] | None = None
        #: (topics, topic index per row, parsed properties, header, tags hashes) -> the units'
        #: tagsCodes: the schedule topic's are delivery times (:mod:`rmqlog.schedule.levels`);
        #: ``None``: every tagsCode is the tags hash
        self.codes_hook: (
            Callable[[list[str], np.ndarray, ParsedProperties, dict[str, np.ndarray], np.ndarray], np.ndarray] | None
        ) = None
        #: light message queues on: each record's ``INNER_MULTI_DISPATCH`` queues get a unit too
        self.lmq = False
        #: direct puts of this process (token -> start, real time) between their publish and their
        #: own dispatch (:mod:`rmqlog.queue.direct_dispatch`): a background round then waits for
        #: them rather than reading their records back (a put that cannot dispatch itself wakes it)
        self._direct: dict[object, float] = {}
        self._direct_lock = threading.Lock()
        #: the listeners told which queues got units (:mod:`rmqlog.queue.arrival`)
        self.arrival = ArrivalSignal()
        #: ``dispatch.state`` (:mod:`rmqlog.queue.dispatch_position`)
        self.position_file = DispatchPositionFile(state_path, lock)

    def on_arrival(self, callback: ArrivalListener) -> Callable[[], None]:
        """Call ``callback(topics, queue_ids, max_offsets)`` after every dispatch that gave
        queues new units (:mod:`rmqlog.queue.arrival`); returns the function that removes it."""
        return self.arrival.subscribe(callback, self.position)

    # ---------------------------------------------------------------- state
    def _load_position(self) -> int:
        return self._load()[0]

    def _load(self) -> tuple[int, int]:
        """(position, store time of the last record dispatched); the time is 0 when unknown."""
        try:
            return self.position_file.read()
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring unreadable %s (%s); rebuilding the position", self.state_path, exc)
        return self._derive_position(), 0

    def close(self) -> None:
        """Close ``dispatch.state``'s descriptor (opened again if the dispatcher is used)."""
        self.position_file.close()

    def dispatched(self) -> tuple[int, int]:
        """(position, store time of the last record dispatched); caller holds the lock (shared is enough)."""
        return self._load()

    def set_position(self, offset: int) -> None:
        """Recovery: resume dispatching at ``offset`` (caller holds the lock)."""
        self._idle_at = None
        self.save_position(offset, self._load()[1], required=True)

    def reset_position(self, limit: int) -> None:
        """Recovery: forget a saved position past ``limit`` and derive it from the queues.

        Caller holds the lock and has already truncated the queues at ``limit``.
        """
        self._idle_at = None
        pos, ts = self._load()
        if pos > limit:
            safe_open.unlink(self.state_path)
            self.save_position(self._derive_position(), ts)

    def _derive_position(self) -> int:
        """Where dispatching resumes without ``dispatch.state``: RocketMQ's rule, the largest
        commitlog end referenced by any queue, but never past the :meth:`resume_point` of a
        queue that has fewer units than the append state gives it (a queue whose folder is
        missing counts as empty). A dispatch killed between two queues' writes leaves some
        queues with a run's units and others without; RocketMQ's rule alone would skip the
        records of the others (their units then lost for good behind fillers)."""
        low = self.commitlog.min_offset()
        best = low
        expected = dict(self.published_queues()) if self.published_queues is not None else {}
        short: list[int] = []
        for cq in self.all_queues():
            n = cq.max_offset()
            if n > cq.min_offset():
                u = cq.read(n - 1, 1)
                if len(u):
                    best = max(best, int(u["offset"][0]) + int(u["size"][0]))
            want = expected.pop(f"{cq.directory.parent.name}/{cq.directory.name}", 0)
            if n < want:
                short.append(self.resume_point(cq, n))
        if any(queue_name_ok(name) for name in expected):  # queues with units due and no folder
            short.append(low)
        return min([best, *short])

    def save_position(self, offset: int, store_timestamp: int, *, required: bool = False) -> None:
        """Save the position (caller holds the lock), in place (see the module docstring).

        On a full disk (the file's one block is reused, so only a new file can meet one) the
        file keeps the position it had, an older one (or none: the position is then
        derived), which only makes the next run walk those records again and skip the units
        already written: the position is a hint. Recovery moving it *back* (``required``)
        must not leave a larger one behind: the file is then removed if the position derived
        without it is not past ``offset``; otherwise :class:`DiskFullError`.
        """
        try:
            self.position_file.write(offset, store_timestamp)
            return
        except DiskFullError as exc:
            if not required:
                log.warning(
                    "%s; the dispatch position stays where it was, and the next dispatch walks on from there", exc
                )
                return
            error = exc
        safe_open.unlink(self.state_path)
        if self._derive_position() > offset:
            raise error
        log.warning("%s; the dispatch position will be derived from the consume queues (not past %d)", error, offset)

    def expect_direct(self) -> object:
        """A direct put of this process is about to publish and will dispatch itself
        (:mod:`rmqlog.queue.direct_dispatch`): background rounds leave it to it for up to
        ``DEFER_S`` (real time). Returns its token for :meth:`direct_done`."""
        token = object()
        with self._direct_lock:
            self._direct[token] = SYSTEM_CLOCK.monotonic()
        return token

    def direct_done(self, token: object) -> None:
        with self._direct_lock:
            self._direct.pop(token, None)

    def _waiting_for_direct(self) -> bool:
        """Whether a direct put of this process still has time to dispatch itself."""
        limit = SYSTEM_CLOCK.monotonic() - DIRECT_GRACE_S
        with self._direct_lock:
            return any(t > limit for t in self._direct.values())

    def caught_up(self, end: int, version: Hashable | None) -> None:
        """After a dispatch up to ``end`` from the records' own fields (:mod:`rmqlog.queue.direct_dispatch`,
        lock held): if ``version`` (the token of the state published with them, its tail last) ends
        there, background rounds idle until the next publish (:meth:`run_once`)."""
        if isinstance(version, tuple) and version and version[-1] <= end:
            self._idle_at = version

    def position(self) -> int:
        """Where dispatching resumes: records below it have their consume-queue units."""
        with self.lock.held(shared=True):  # a read: the position file is replaced whole
            return self._load_position()

    def position_held(self) -> int:
        """:meth:`position`, for a caller that holds ``dispatch.lock`` already."""
        return self._load_position()

    # ------------------------------------------------------------- dispatch
    def dispatch(self, max_bytes: int | None = None) -> int:
        """Turn every published, not yet dispatched record into consume-queue units.

        ``max_bytes``: stop after about that many bytes of commitlog (a round of the
        background service), else go on up to the published tail. Returns how many records
        were dispatched (0 when up to date).
        """
        total = 0
        maxes: Maxes = {}
        with self.lock.held():
            self._idle_at = None
            pos, self._last_ts = self._load()
            pos = max(pos, self.commitlog.min_offset())
            tail = published = self.published_tail()
            # the token of the state just loaded, or None (a publish since, a torn slot)
            version = self.tail_version() if self.tail_version is not None else None
            if max_bytes is not None:
                tail = min(tail, pos + max_bytes)
            start_pos = pos
            gaps_ok: set[tuple[str, int]] = set()  # queues whose gaps stand (see _dispatch_scan)
            went_back: set[tuple[str, int]] = set()
            while pos < tail:
                limit = min(tail, pos + DISPATCH_CHUNK)
                progressed = False
                back_to = None
                for seg, scan in self.commitlog.scan(pos, limit):
                    if len(scan.positions):
                        try:
                            total += self._dispatch_scan(seg, scan.positions, maxes, gaps_ok, went_back)
                        except GoBack as back:
                            back_to = back.offset
                            break
                    new_pos = seg.start + scan.end
                    if scan.reason.value == "blank":
                        new_pos = seg.end
                    elif scan.reason.value == "corrupt":
                        from ..errors import CorruptStoreError

                        raise CorruptStoreError(f"cannot dispatch: {scan.detail}", path=str(seg.path), offset=new_pos)
                    progressed = progressed or new_pos > pos
                    pos = new_pos
                if back_to is not None:
                    pos = back_to  # (at most once per queue: see _dispatch_scan)
                    continue
                if not progressed:
                    break
            if pos != start_pos:
                if crash_points.reached is not None:
                    crash_points.reached("dispatch.position")
                self.save_position(pos, self._last_ts)
            if self.arrival.active:
                self.arrival.foreign(self.commitlog, start_pos, pos, maxes)
            if pos >= published:
                self._idle_at = version
        self.arrival.notify(maxes)  # after the position is saved and the lock released
        return total

    def _dispatch_scan(
        self,
        seg: MappedFile,
        positions: np.ndarray,
        maxes: Maxes,
        gaps_ok: set[tuple[str, int]],
        went_back: set[tuple[str, int]],
    ) -> int:
        """Dispatch a run of records of ``seg``; a queue whose units would start past its end
        makes the dispatch walk again from that queue's :meth:`resume_point` (:class:`GoBack`),
        once per queue and dispatch, when that point is below the run: the records of the
        missing units are there, and a filler written over their place would hide them for
        good (recovery's completeness check counts fillers as units). A gap that stands after
        that, or with nothing below the run to walk, is one whose records are not in the log
        (deleted by retention, a damaged queue offset): filled, as RocketMQ does."""
        while True:
            try:
                return self._dispatch_run(seg.buffer(), seg.start, positions, maxes, gaps_ok)
            except QueueBehind as behind:
                topic, q = behind.key
                if behind.key not in went_back and behind.resume < seg.start + int(positions[0]):
                    went_back.add(behind.key)
                    log.warning(
                        "consume queue %s/%d: units %d..%d missing; dispatching again from commitlog offset %d",
                        topic,
                        q,
                        behind.have,
                        behind.first,
                        behind.resume,
                    )
                    raise GoBack(behind.resume) from None
                gaps_ok.add(behind.key)

    def _dispatch_run(
        self,
        source,
        base: int,
        positions: np.ndarray,
        maxes: dict[tuple[str, int], int],
        gaps_ok: set[tuple[str, int]] | None = None,
    ) -> int:
        cols = read_columns(source, base, positions, with_body=False)
        h = cols.header
        if len(h):
            self._last_ts = max(self._last_ts, int(h["storeTimestamp"].max()))
        keep = np.asarray(is_consumable(h["sysFlag"]))
        # parsed once: tags here, keys for the index, all three found in one pass when indexing
        parsed = ParsedProperties(
            cols.properties,
            names=(_INDEXED_NAMES if self.index_hook is not None else ()) + (LMQ_NAMES if self.lmq else ()),
        )
        codes = tags_codes(parsed.column(PROPERTY_TAGS))
        topic_codes = cols.topic.dictionary_encode()
        topics = topic_codes.dictionary.to_pylist()
        tidx = np.asarray(topic_codes.indices, dtype=np.int64)
        if self.codes_hook is not None:
            codes = self.codes_hook(topics, tidx, parsed, h, codes)
        unusable = [i for i, t in enumerate(topics) if topic_problem(t) is not None]
        if unusable:
            # a record whose topic cannot name a queue directory (another tool's, not UTF-8): no
            # unit for it, or dispatching would stop here for good; readable by offset and msgId
            skip = np.isin(tidx, unusable) & keep
            if skip.any():
                log.warning(
                    "commitlog: %d record(s) from offset %d have topics that cannot name a consume queue (%s); not "
                    "dispatched",
                    int(skip.sum()),
                    int(cols.offsets[np.flatnonzero(skip)[0]]),
                    ", ".join(repr(topics[i]) for i in unusable),
                )
            keep = keep & ~skip
        lmq = (parsed.column(LMQ_NAMES[0]), parsed.column(LMQ_NAMES[1])) if self.lmq else None
        self._write_units(
            *with_lmq_units(
                lmq,
                keep,
                topics,
                tidx,
                h["queueId"].astype(np.int64),
                h["queueOffset"].astype(np.int64),
                cols.offsets,
                h["totalSize"],
                codes,
            ),
            maxes,
            gaps_ok,
        )
        if crash_points.reached is not None:
            crash_points.reached("dispatch.units")
        if self.index_hook is not None:
            self.index_hook(cols, parsed)
        return int(len(positions))

    def dispatch_appended(
        self,
        start: int,
        end: int,
        topics: list[str],
        topic_index: np.ndarray,
        queue_id: np.ndarray,
        queue_offsets: np.ndarray,
        physical_offsets: np.ndarray,
        sizes: np.ndarray,
        codes: np.ndarray,
        store_timestamp: int,
        *,
        wait_s: float = 0.25,
        index: Callable[[], object] | None = None,
    ) -> int:
        """Dispatch a batch just appended at ``[start, end)`` from its own fields (no re-read).

        Only when the dispatcher stands exactly at ``start`` (everything before the batch is
        dispatched), and the index (``index_hook``), if any, can be fed from the batch too:
        ``index`` does that, called after the units under the dispatch lock, as the hook is
        (without it, with an index, this is a :meth:`dispatch`, which reads the records'
        properties back). When it stands before ``start``, the writer of the batch before is
        usually about to dispatch its own (concurrent sink tasks): wait for that up to
        ``wait_s``, then run a normal :meth:`dispatch`, which also covers this batch.
        Returns how many records were dispatched.
        """
        if self.index_hook is not None and index is None:
            return self.dispatch()
        # a real wait for another process (its writer's dispatch): real time, whatever the
        # store's clock (a test's manual clock would never end it)
        deadline = SYSTEM_CLOCK.monotonic() + wait_s
        while True:
            maxes: Maxes = {}
            with self.lock.held():
                pos, last_ts = self._load()
                done = pos == start and self.published_tail() >= end
                if done:
                    try:
                        self._write_units(
                            topics, topic_index, queue_id, queue_offsets, physical_offsets, sizes, codes, maxes, set()
                        )
                    except QueueBehind:  # a queue misses units below the batch: a dispatch walks for them
                        done = False
                        start = -1
                    if done and index is not None and self.index_hook is not None:
                        index()
                if done:
                    self.save_position(end, max(last_ts, store_timestamp))
                    if self.arrival.active:
                        self.arrival.foreign(self.commitlog, start, end, maxes)
            if done:
                self.arrival.notify(maxes)
                return len(queue_offsets)
            if (
                start < 0
                or pos > start
                or SYSTEM_CLOCK.monotonic() >= deadline
                or not self._recent(pos, store_timestamp)
            ):
                return self.dispatch()
            time.sleep(0.005)

    def _recent(self, pos: int, now_ms: int) -> bool:
        """Whether the first undispatched record was stored within the last second (else its
        writer did not ask for a dispatch, and waiting for one would be in vain)."""
        found = self.commitlog.record_at(pos, self.published_tail())
        return found is not None and found.record is not None and now_ms - found.record.store_timestamp < 1000

    def _write_units(
        self,
        topics: list[str],
        tidx: np.ndarray,
        qid: np.ndarray,
        qoff: np.ndarray,
        offsets: np.ndarray,
        sizes: np.ndarray,
        codes: np.ndarray,
        maxes: dict[tuple[str, int], int],
        gaps_ok: set[tuple[str, int]] | None = None,
    ) -> None:
        """Write the units of records (any order) into their queues, one slice per run.

        All or nothing: if a write fails (a full disk), the queues this call wrote go back to
        where they ended before it (and ``maxes`` with them). A process killed part-way is
        another matter: some queues then have the run's units and others not, which is why
        :meth:`_derive_position` looks at every queue the append state knows, and why a gap
        is walked back for (``gaps_ok``: the queues whose gaps may be filled; ``None``: all,
        else :class:`QueueBehind` for the others).
        """
        before: list[tuple[ConsumeQueue, int, tuple[str, int], int | None]] = []
        try:
            self._write_units_of(topics, tidx, qid, qoff, offsets, sizes, codes, maxes, before, gaps_ok)
        except BaseException:
            for cq, end, key, prior in reversed(before):
                if prior is None:
                    maxes.pop(key, None)
                else:
                    maxes[key] = prior
                try:
                    cq.truncate(end)
                except OSError:
                    log.warning("could not undo the units written to %s past %d", cq.directory, end, exc_info=True)
            raise

    def _write_units_of(
        self,
        topics: list[str],
        tidx: np.ndarray,
        qid: np.ndarray,
        qoff: np.ndarray,
        offsets: np.ndarray,
        sizes: np.ndarray,
        codes: np.ndarray,
        maxes: dict[tuple[str, int], int],
        before: list[tuple[ConsumeQueue, int, tuple[str, int], int | None]],
        gaps_ok: set[tuple[str, int]] | None,
    ) -> None:
        """:meth:`_write_units`' work; appends each queue and its end to ``before`` as it starts on it."""
        tidx, qid, qoff = np.asarray(tidx, np.int64), np.asarray(qid, np.int64), np.asarray(qoff, np.int64)
        span = int(qid.max()) + 1 if len(qid) else 1
        order = None
        if len(topics) * span <= 1 << 16:
            # records come in log order, where each queue's offsets already increase: a
            # stable sort by queue alone (a radix sort on 16-bit keys, linear) groups them,
            # checked below; lexsort on (queue, offset) cost ~100 ms per million units
            dense = (tidx * span + qid).astype(np.uint16)
            order = np.argsort(dense, kind="stable")
            sd = dense[order]
            same = sd[1:] == sd[:-1]
            sorted_qoff = qoff[order]
            if not (np.diff(sorted_qoff)[same] > 0).all():
                order = None
        if order is None:
            order = np.lexsort((qoff, (tidx << 32) | qid))
            sorted_qoff = qoff[order]
        key = ((tidx << 32) | qid)[order]
        qoff = sorted_qoff
        units = np.empty(len(key), CQ_UNIT)
        units["offset"] = np.asarray(offsets)[order]
        units["size"] = np.asarray(sizes)[order]
        units["tagsCode"] = np.asarray(codes)[order]
        bounds = np.flatnonzero(np.diff(key)) + 1
        edges = [0, *bounds.tolist(), len(key)]  # (lists: np.r_ costs ~25 us a call, and this runs per queue)
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            if hi <= lo:
                continue
            k = int(key[lo])
            topic, q = topics[k >> 32], k & 0xFFFFFFFF
            cq = self.queue_for(topic, q)
            prior = maxes.get((topic, q))
            cur = cq.max_offset() if prior is None else prior
            # runs of consecutive queue offsets (a gap: records not walked, or not in the log)
            run_breaks = np.flatnonzero(np.diff(qoff[lo:hi]) != 1) + 1
            runs = [0, *run_breaks.tolist(), hi - lo]
            if gaps_ok is not None and (topic, q) not in gaps_ok:
                end = cur  # before writing anything: would a run start past the queue's end?
                for a, b in zip(runs[:-1], runs[1:], strict=True):
                    first = int(qoff[lo + a])
                    if first > end:
                        raise QueueBehind((topic, q), end, first, self.resume_point(cq, cur))
                    end = max(end, first + (b - a))
            before.append((cq, cur, (topic, q), prior))
            for a, b in zip(runs[:-1], runs[1:], strict=True):
                first = int(qoff[lo + a])
                if first > cur:
                    log.warning("consume queue %s/%d: gap %d..%d filled", topic, q, cur, first)
                cq.write(first, units[lo + a : lo + b], cur)
                cur = max(cur, first + (b - a))
            if crash_points.reached is not None:
                crash_points.reached("dispatch.queue")
            maxes[(topic, q)] = cur

    def resume_point(self, cq: ConsumeQueue, have: int | None = None) -> int:
        """Where walking the log must start for ``cq`` to get its units from ``have`` (its
        end by default) on: just past its last unit's record, or the log's start when it has
        no live unit (none, a filler, or one whose record retention removed)."""
        low = self.commitlog.min_offset()
        if have is None:
            have = cq.max_offset()
        if have <= cq.min_offset(low):
            return low
        u = cq.read(have - 1, 1)
        if not len(u) or int(u["size"][0]) in (0, FILLER_SIZE) or int(u["offset"][0]) < low:
            return low
        return int(u["offset"][0]) + int(u["size"][0])

    # ----------------------------------------------------------- the service
    def attach(self, wake: Callable[[], object]) -> Callable[[], None]:
        """As a service of the store's loop (:mod:`rmqlog.service`): watch ``append.state``
        (:mod:`rmqlog.queue.append_watch`) so that any publish (another process's too) calls
        ``wake`` at once; idle rounds then come every :data:`FULL_ROUND_S` instead of every
        ``interval_ms``. Where it cannot be watched reliably, nothing changes (polled).
        Returns the function that stops the watch."""

        def on_publish() -> None:
            # no round for a publish of this process's own direct puts: they dispatch
            # themselves (or wake the dispatcher when they cannot). Told apart by the newest
            # state being this process's last publish: another process's publish after it
            # changes the token, and one before it is found by the direct put's dispatch
            if self.own_version is not None and (self._idle_at is not None or self._direct):
                token = self.tail_version() if self.tail_version is not None else None
                if (
                    token is not None
                    and token == self.own_version()
                    and (token == self._idle_at or self._waiting_for_direct())
                ):
                    return
                # read while our publish is written (its token not named yet; no other process
                # publishes meanwhile): that publish's event, or an earlier one the put's own
                # dispatch finds (or it wakes a round, as every other put does)
                if (
                    token is None
                    and self.own_publishing is not None
                    and self.own_publishing()
                    and self._waiting_for_direct()
                ):
                    return
            wake()

        watch = AppendWatch.start(self.watch_path, on_publish) if self.watch_path is not None else None
        if watch is None:
            return lambda: None
        self._watch = watch
        self.interval_s = max(self._poll_s, FULL_ROUND_S)
        wake()  # a publish between the loop's first round and the watch raised no event

        def detach() -> None:
            if self._watch is watch:
                self._watch = None
                self.interval_s = self._poll_s
            watch.close()

        return detach

    def run_once(self, now: float) -> bool:
        """One round of the background dispatcher (see :mod:`rmqlog.service`): dispatch up to
        ``DISPATCH_CHUNK`` bytes of new records; returns whether there were any.

        An idle round costs one look at the append state's token (:attr:`tail_version`: an
        ``fstat`` and two 16-byte reads of a descriptor already open): while it is the one
        the last dispatch that caught up with the published tail read, no process has
        published anything since, so there is nothing to dispatch and nothing another
        process's dispatcher can have done (it dispatches only what was published): no lock,
        no file opened, no JSON, no listing. Any publish (this process's or another's, a
        Spark sink's) changes the token, and the round is a full :meth:`dispatch`. A full
        round also comes at least every :data:`FULL_ROUND_S` (the safety net).
        """
        watch = self._watch
        if watch is not None and watch.failed:  # the watch stopped: poll again
            self._watch, self.interval_s = None, self._poll_s
            watch.close()
        if self._direct and self._waiting_for_direct():  # this process's direct puts dispatch themselves
            return False
        if (
            self._idle_at is not None
            and self._full_at is not None
            and now - self._full_at < FULL_ROUND_S
            and self.tail_version is not None
            and self.tail_version() == self._idle_at
        ):
            return False
        self._full_at = now
        return self.dispatch(max_bytes=DISPATCH_CHUNK) > 0
