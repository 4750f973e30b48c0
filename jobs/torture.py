"""Kill -9 torture of the store: writers, dispatchers and recovering processes killed at random moments.

    python jobs/torture.py --trials N --seed S [--flush sync|async|both] [--max-writers 4]
                           [--root DIR] [--keep] [--small] [--trials-per-store 12]

A *trial* runs against one store (``rmqlog.MessageStore``), which lives on for several trials
(so it accumulates crashes) before a fresh one is started:

1. 1 to ``--max-writers`` writer processes (one process group) append random batches:
   1..2000 rows, bodies from empty to a few KiB, three topics (4, 4 and 8 queues), explicit
   or round-robin queue ids, tags, keys, properties; some writers are idempotent
   (``put_batch(writer=, sequence=)``), replay batches on purpose, and an idempotent writer
   killed in an earlier trial is resumed by replaying its last batch. Some trials put with
   ``dispatch=True`` and run a dispatcher/reader process beside the writers. The flush mode
   is ``SYNC_FLUSH`` or ``ASYNC_FLUSH`` (``--flush``); segments are small most of the time
   (64 KiB..4 MiB commitlog segments, so rolls happen), the defaults sometimes.
2. SIGKILL at a random moment: one, some or all writers (or the whole process group), during
   start-up/recovery, after some time or after some acknowledged batches; survivors are
   killed later or finish and close cleanly; the dispatcher with them or on its own.
3. 0..3 *recovery kills*: a process opens the store (the first opener recovers it) and is
   killed at a random moment of the open; then the next one recovers again.
4. A checker process opens the store (recovery), then checks it with the store's API and
   with the independent decoder ``tests/refcodec.py`` (see :func:`check_store`), appends one
   batch and checks where it landed, then closes the store, or kills itself with the store
   open (so the next trial's writers recover it).

Every message identifies itself: a non-empty body starts with ``HEAD`` (writer uid, batch
sequence, row, rows in the batch, topic index, requested queue id, CRC-32 of the rest of the
body); an empty body carries the same fields in its KEYS (``tt:uid:seq:row:n:topic:queue``).
Bodies are generated from (run seed, writer uid, sequence), so a replay is byte-identical.

Writers note, in their own append-only log, ``B`` before each ``put_batch`` and ``A`` (then
``fsync``) once it returned: *acknowledged* = ``put_batch`` returned. A process kill keeps
the page cache, so under both flush modes nothing acknowledged may be lost.

Counted per trial and in the summary (``lost``/``duplicated`` are messages, ``torn``
incidents):

- ``acknowledged``: messages whose ``put_batch`` returned during the trial;
- ``lost``: acknowledged messages absent from the commitlog or unreadable through the queues;
- ``duplicated``: extra copies of a message (idempotent replays must not add any);
- ``torn``: a batch partly present, a record the reference decoder rejects (CRC, lengths), a
  body failing its checksum, a record no writer began, consume-queue units or
  ``read_queue``/``get_messages`` disagreeing with the commitlog, queue offsets not dense, an
  acknowledged offset not holding its message, a torn message seen by the live reader;
- ``verify``: problems ``MessageStore.verify()`` reported (before and after ``dispatch()``);
- ``errors``: the reopen failing (typed or not), a child process failing or hanging, an
  append after recovery landing in the wrong place, a SYNC_FLUSH put returning unflushed.

Exit status 1 if any of them is non-zero. A failing store is kept and its path printed;
the others are deleted unless ``--keep``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import pickle
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import pyarrow as pa  # noqa: E402

import refcodec as rc  # noqa: E402
import rmqlog  # noqa: E402

# ------------------------------------------------------------------ messages

#: Body header: magic, writer uid, batch sequence, row, rows in the batch, topic index,
#: requested queue id (-1: round robin); then a big-endian CRC-32 of header + payload.
HEAD = struct.Struct(">4sIIIIBh")
CRC = struct.Struct(">I")
MAGIC = b"TRT1"
KEY_PREFIX = "tt"
TOPICS = ("TortA", "TortB", "TortQ8")
TOPIC_QUEUES = (4, 4, 8)  # TortQ8 is created with 8 queues; the others are auto-created (4)
TAGS = (None, "TagA", "TagB", "c")
#: Identity of a message: (uid, seq, row, rows in batch, topic index, requested queue).
Ident = tuple[int, int, int, int, int, int]
#: Writer uids: trial * UID_SLOTS + slot, one slot per writer process of a trial: the first
#: phase's writers take slots 0..3, writers started during a recovery the next ones, the
#: checker's own batch the last slot. (Two processes writing as one uid would write the same
#: bytes twice: duplicates the store did not make.)
UID_SLOTS = 16
CHECKER_SLOT = UID_SLOTS - 1
MAX_WRITERS = 4
#: A child process that outlives this (an orphan, or a hang) kills itself (SIGALRM).
CHILD_LIFETIME_S = 900


class BadMessage(Exception):
    """A record whose body (or KEYS, for an empty body) does not identify a torture message."""


def writer_name(uid: int) -> str:
    return f"torture-{uid}"


def batch_size(rng: random.Random, small: bool) -> int:
    r = rng.random()
    n = rng.randint(1, 10) if r < 0.4 else rng.randint(10, 200) if r < 0.7 else rng.randint(200, 2000)
    return min(n, 120) if small else n


def make_batch(run_seed: int, uid: int, seq: int, small: bool) -> pa.Table:
    """The batch ``seq`` of writer ``uid``: always the same bytes for the same arguments."""
    rng = random.Random(f"{run_seed}/{uid}/{seq}")
    n = batch_size(rng, small)
    profile = rng.choice(("tiny", "mixed", "mixed", "big", "empty"))
    if profile == "big":
        n = min(n, 150)
    one_topic = rng.randrange(3) if rng.random() < 0.7 else None
    queue_mode = rng.choice(("explicit", "round-robin", "mixed"))
    tag_mode = rng.choice(("none", "one", "random"))
    with_props = rng.random() < 0.2
    topics, queues, bodies, tags, keys, props = [], [], [], [], [], []
    tag0 = rng.choice(TAGS)
    for row in range(n):
        t = one_topic if one_topic is not None else rng.randrange(3)
        explicit = queue_mode == "explicit" or (queue_mode == "mixed" and rng.random() < 0.5)
        q = rng.randrange(TOPIC_QUEUES[t]) if explicit else -1
        if profile == "empty" or (profile == "mixed" and rng.random() < 0.05):
            size = -1  # an empty body
        elif profile == "tiny":
            size = rng.randint(0, 48)
        elif profile == "big":
            size = rng.randint(1024, 1024 if small else 6000)
        else:
            size = rng.randint(0, 300) if rng.random() < 0.8 else rng.randint(300, 1000 if small else 4000)
        ident = (uid, seq, row, n, t, q)
        if size < 0:
            body = b""
            k = [f"{KEY_PREFIX}:" + ":".join(map(str, ident))]
        else:
            head = HEAD.pack(MAGIC, *ident)
            payload = rng.randbytes(size)
            body = head + CRC.pack(zlib.crc32(head + payload)) + payload
            k = [] if rng.random() < 0.7 else [f"k{row % 5}", "other"]
        topics.append(TOPICS[t])
        queues.append(q if q >= 0 else None)
        bodies.append(body)
        tags.append(tag0 if tag_mode == "one" else rng.choice(TAGS) if tag_mode == "random" else None)
        keys.append(k)
        props.append([("p", f"v{row % 7}")] if row % 3 else [])
    cols: dict[str, pa.Array] = {
        "topic": pa.array(topics, pa.string()),
        "body": pa.array(bodies, pa.binary()),
        "queueId": pa.array(queues, pa.int32()),
        "tags": pa.array(tags, pa.string()),
        "keys": pa.array(keys, pa.list_(pa.string())),
    }
    if with_props:
        cols["properties"] = pa.array(props, pa.map_(pa.string(), pa.string()))
    return pa.table(cols)


def identify(body: bytes, keys: str | None) -> Ident:
    """The identity a message carries; raises :class:`BadMessage` if its body is not intact."""
    if not body:
        for key in (keys or "").split(" "):
            parts = key.split(":")
            if parts[0] == KEY_PREFIX and len(parts) == 7:
                u, s, r, n, t, q = (int(x) for x in parts[1:])
                return (u, s, r, n, t, q)
        raise BadMessage(f"empty body without an identity key (KEYS {keys!r})")
    if len(body) < HEAD.size + CRC.size or body[:4] != MAGIC:
        raise BadMessage(f"body of {len(body)} bytes without the torture header")
    (crc,) = CRC.unpack_from(body, HEAD.size)
    if zlib.crc32(body[: HEAD.size] + body[HEAD.size + CRC.size :]) != crc:
        raise BadMessage("body does not match its checksum")
    _, u, s, r, n, t, q = HEAD.unpack_from(body)
    return (u, s, r, n, t, q)


def store_config(values: dict[str, Any]) -> rmqlog.StoreConfig:
    return rmqlog.StoreConfig(**values)


# ------------------------------------------------------------------ children


class Notes:
    """A child's append-only log of what it did (``B``/``A`` lines are the ack ledger)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def __call__(self, *fields: object, sync: bool = False) -> None:
        os.write(self.fd, (" ".join(str(f) for f in fields) + "\n").encode())
        if sync:
            os.fsync(self.fd)


def _child_setup() -> None:
    """An orphan never outlives the job: SIGKILL when the parent dies, SIGALRM after a while."""
    signal.alarm(CHILD_LIFETIME_S)
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def child_writer(spec: dict[str, Any]) -> None:
    """Append ``batches`` batches from ``start_seq`` on; note B before and A (fsync) after each put."""
    note = Notes(spec["log"])
    cfg = store_config(spec["config"])
    uid, idem, small = spec["uid"], spec["idempotent"], spec["small"]
    rng = random.Random(spec["seed"])
    note("I")
    if spec.get("wait_go"):
        sys.stdin.buffer.read(1)
    t0 = time.monotonic()
    s = rmqlog.MessageStore.open(spec["root"], cfg)
    note("O", f"{time.monotonic() - t0:.4f}", int(s.recovery is not None))
    sync = cfg.flush_disk_type == rmqlog.SYNC_FLUSH
    for seq in range(spec["start_seq"], spec["start_seq"] + spec["batches"]):
        table = make_batch(spec["run_seed"], uid, seq, small)
        n = table.num_rows
        dispatch = rng.random() < spec["dispatch_p"]
        note("B", uid, seq, n)
        if idem:
            out = s.put_batch(table, writer=writer_name(uid), sequence=seq, dispatch=dispatch)
        else:
            out = s.put_batch(table, dispatch=dispatch)
        offs = out["commitLogOffset"].to_pylist()
        first, last = (offs[0], offs[-1]) if offs else (-1, -1)
        note("A", uid, seq, n, len(offs), first, last, sync=True)
        if len(offs) not in ((0, n) if idem else (n,)):
            note("E", f"put of {n} rows returned {len(offs)} results (uid {uid} seq {seq})")
        if sync and offs and s.flushed_offset() <= last:
            note("E", f"SYNC_FLUSH put returned with flushed offset {s.flushed_offset()} <= {last}")
        if idem and rng.random() < spec["replay_p"]:  # a deliberate replay: must be a no-op
            r = seq if rng.random() < 0.6 else rng.randint(max(0, seq - 20), seq)
            again = s.put_batch(make_batch(spec["run_seed"], uid, r, small), writer=writer_name(uid), sequence=r)
            note("R", uid, r, again.num_rows)
            if again.num_rows:
                note("E", f"replay of uid {uid} seq {r} appended {again.num_rows} rows")
        if rng.random() < 0.03:
            s.dispatch()
    s.close()
    note("C")


def child_reader(spec: dict[str, Any]) -> None:
    """Dispatch and read random queue ranges until killed; note every message that is not intact."""
    note = Notes(spec["log"])
    rng = random.Random(spec["seed"])
    note("I")
    s = rmqlog.MessageStore.open(spec["root"], store_config(spec["config"]))
    note("O")
    if spec["background"]:
        s.start_services()
    reads = 0
    while True:
        if not spec["background"] or rng.random() < 0.1:
            s.dispatch()
        t = rng.randrange(3)
        q = rng.randrange(TOPIC_QUEUES[t])
        lo, hi = s.min_offset(TOPICS[t], q), s.max_offset(TOPICS[t], q)
        if hi > lo:
            off = rng.randint(lo, hi - 1)
            res = s.get_messages("torture-reader", TOPICS[t], q, off, max_count=rng.randint(1, 600))
            got = res.messages
            qoffs = got["queueOffset"].to_pylist()
            if qoffs != list(range(off, off + len(qoffs))):
                note("P", f"{TOPICS[t]}/{q} from {off}: queue offsets {qoffs[:5]}... not dense")
            for body, keys, topic, qid in zip(
                got["body"].to_pylist(), got["keys"].to_pylist(), got["topic"].to_pylist(),
                got["queueId"].to_pylist(), strict=True,
            ):
                try:
                    ident = identify(body, " ".join(keys or []))
                except BadMessage as exc:
                    note("P", f"{TOPICS[t]}/{q} from {off}: {exc}")
                    continue
                if TOPICS[ident[4]] != topic or (ident[5] >= 0 and ident[5] != qid):
                    note("P", f"message {ident} read from {topic}/{qid}")
            reads += len(qoffs)
        if rng.random() < 0.05:
            note("N", reads)
        time.sleep(rng.random() * 0.003)


def child_recover(spec: dict[str, Any]) -> None:
    """Wait for the go byte on stdin, open the store (recovering it), then hold it open until killed."""
    note = Notes(spec["log"])
    cfg = store_config(spec["config"])
    note("I")
    sys.stdin.buffer.read(1)
    t0 = time.monotonic()
    s = rmqlog.MessageStore.open(spec["root"], cfg)
    rep = s.recovery
    note("O", f"{time.monotonic() - t0:.4f}", int(rep is not None))
    time.sleep(CHILD_LIFETIME_S)


def child_check(spec: dict[str, Any]) -> None:
    """Recover and check the store, write the result as JSON; then close it or die with it open."""
    out_path = Path(spec["out"])
    result = check_store(spec)
    opened = result.pop("_store", None)
    tmp = out_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out_path)
    if spec["crash_after"]:
        os.kill(os.getpid(), signal.SIGKILL)
    if opened is not None:
        opened.close()


CHILDREN = {"writer": child_writer, "reader": child_reader, "recover": child_recover, "check": child_check}


# ------------------------------------------------------------------ ledger


@dataclass
class Ledger:
    """What every process of one store noted: batches begun, acknowledged, replays, problems."""

    begun: dict[tuple[int, int], int] = field(default_factory=dict)
    acked: dict[tuple[int, int], int] = field(default_factory=dict)
    #: (uid, seq, first offset, last offset) of acknowledged puts that returned rows
    ack_offsets: list[tuple[int, int, int, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # E lines
    torn_reads: list[str] = field(default_factory=list)  # P lines

    @classmethod
    def load(cls, paths: list[Path]) -> Ledger:
        led = cls()
        for path in paths:
            for line in path.read_text().splitlines(keepends=True):
                if not line.endswith("\n"):
                    continue  # a line cut by the kill (a write is atomic here, but be safe)
                parts = line.split()
                if not parts:
                    continue
                tag = parts[0]
                if tag == "B" and len(parts) == 4:
                    led.begun[(int(parts[1]), int(parts[2]))] = int(parts[3])
                elif tag == "A" and len(parts) == 7:
                    key = (int(parts[1]), int(parts[2]))
                    led.acked[key] = int(parts[3])
                    if int(parts[4]):
                        led.ack_offsets.append((key[0], key[1], int(parts[5]), int(parts[6])))
                elif tag == "E":
                    led.errors.append(f"{path.name}: {line[2:].strip()}")
                elif tag == "P":
                    led.torn_reads.append(f"{path.name}: {line[2:].strip()}")
        return led

    def acked_messages(self) -> int:
        return sum(self.acked.values())


# ------------------------------------------------------------------ the reference walk

#: One record as the reference decoder saw it: offset, size, topic, queue id, queue offset,
#: tags code, identity (or why the body is not intact).
RefRec = tuple[int, int, str, int, int, int, "Ident | str"]


def _data_end(path: str, size: int) -> int:
    """Where the last non-hole byte of a (sparse) segment file ends: past it, only zeros."""
    fd = os.open(path, os.O_RDONLY)
    try:
        end, pos = 0, 0
        while pos < size:
            try:
                lo = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            pos = end = os.lseek(fd, lo, os.SEEK_HOLE)
        return min(end, size)
    except OSError:
        return size
    finally:
        os.close(fd)


def decode_segment(start: int, data: bytes) -> tuple[list[RefRec], list[str], str, int]:
    """Decode one segment with the reference codec: records, problems, how it ended, where."""
    recs: list[RefRec] = []
    pos = 0
    while pos < len(data):
        try:
            kind, value = rc.decode_record(data, pos)
        except ValueError as exc:
            return recs, [f"commitlog offset {start + pos}: reference decoder: {exc}"], "bad", pos
        if kind == rc.KIND_END:
            return recs, [], "end", pos
        if kind == rc.KIND_BLANK:
            return recs, [], "blank", pos
        assert isinstance(value, rc.RefRecord)
        probs = []
        if value.physical_offset != start + pos:
            probs.append(f"commitlog offset {start + pos}: PHYSICALOFFSET {value.physical_offset}")
        try:
            ident: Ident | str = identify(value.body, value.properties.get("KEYS"))
        except BadMessage as exc:
            ident = str(exc)
        recs.append((start + pos, value.total_size, value.topic, value.queue_id, value.queue_offset, value.tags_code, ident))
        if probs:
            return recs, probs, "bad", pos
        pos += value.total_size
    return recs, [], "full", pos


def walk_log(cl_dir: Path, cache_path: Path) -> tuple[list[RefRec], list[str], int]:
    """Every record of the commitlog by the reference decoder: (records, problems, end of log).

    Decoded segments are cached by a hash of their bytes (same bytes, same records), so a
    store that lives on for many trials is not decoded from scratch each time.
    """
    segs = rc.list_segments(str(cl_dir)) if cl_dir.is_dir() else []
    try:
        cache = pickle.loads(cache_path.read_bytes())
    except (OSError, pickle.PickleError, EOFError):
        cache = {}
    new_cache: dict[int, Any] = {}
    records: list[RefRec] = []
    problems: list[str] = []
    seg_size = os.path.getsize(segs[0][1]) if segs else 0
    log_end: int | None = None
    for i, (start, path) in enumerate(segs):
        if i and start != segs[i - 1][0] + seg_size:
            problems.append(f"segment {path} starts at {start}, expected {segs[i - 1][0] + seg_size}")
        if os.path.getsize(path) != seg_size:
            problems.append(f"segment {path} has {os.path.getsize(path)} bytes, not {seg_size}")
        with open(path, "rb") as f:
            data = f.read(_data_end(path, seg_size))
        digest = hashlib.blake2b(data, digest_size=16).digest()
        hit = cache.get(start)
        got = hit[1] if hit is not None and hit[0] == digest else decode_segment(start, data)
        new_cache[start] = (digest, got)
        recs, probs, how, pos = got
        if log_end is not None and recs:
            problems.append(f"segment {path}: {len(recs)} records after the end of the log at {log_end}")
        records.extend(recs)
        problems.extend(probs)
        # zeros (or a hole) before the segment's end, or a bad record: the log ends here
        if log_end is None and (how in ("end", "bad") or (how == "full" and pos < seg_size)):
            log_end = start + pos
    tmp = cache_path.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(new_cache, protocol=pickle.HIGHEST_PROTOCOL))
    tmp.replace(cache_path)
    if log_end is None:
        log_end = segs[-1][0] + seg_size if segs else 0
    return records, problems, log_end


# ------------------------------------------------------------------ the check


def check_store(spec: dict[str, Any]) -> dict[str, Any]:
    """Recover the store, then count lost, duplicated and torn messages and verify problems.

    The commitlog is read with ``tests/refcodec.py`` (every record, CRC checked) and every
    queue through the store's API (``read_queue`` and ``get_messages`` pages) and, raw, with
    the reference decoder's consume-queue reader; both views are compared with the ledger
    of acknowledged batches and with each other. See the module docstring for the counts.
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
    res["recovery"] = None if rep is None else {
        "abnormal": rep.abnormal, "end": rep.end, "dropped": rep.dropped_bytes, "redispatched": rep.redispatched,
        "rebuilt": rep.state_rebuilt, "seconds": round(time.monotonic() - t0, 4),
    }
    for err in led.errors:
        res["errors"].append(err)
    for p in led.torn_reads:
        torn(1, f"live reader: {p}")
    try:
        _check_open_store(s, spec, led, res, torn, rng)
    except Exception as exc:
        res["errors"].append(f"the store raised {type(exc).__name__} while being checked: {exc}\n{traceback.format_exc()}")
    return res


def _check_open_store(s: rmqlog.MessageStore, spec: dict[str, Any], led: Ledger, res: dict[str, Any], torn: Any, rng: random.Random) -> None:
    detail = res["details"].append
    root = Path(spec["root"])
    for when in ("before dispatch", "after dispatch"):
        if when == "after dispatch":
            s.dispatch()
        v = s.verify()
        res["verify"] += len(v.problems)
        for p in v.problems[:5]:
            detail(f"verify {when}: {p}")
    tail = s.published_tail()
    records, problems, log_end = walk_log(root / "commitlog", Path(spec["cache"]))
    res["records"] = len(records)
    for p in problems:
        torn(1, p)
    past = sum(1 for r in records if r[0] + r[1] > tail)
    if past:
        torn(past, f"{past} records past the published tail {tail} (log end {log_end})")
    # ---- the commitlog, by the reference decoder
    ref_count: Counter[tuple[int, int, int]] = Counter()
    batches: dict[tuple[int, int], list[int]] = {}
    at: dict[int, Ident] = {}
    by_queue: dict[tuple[str, int], list[RefRec]] = {}
    for r in records:
        ident = r[6]
        by_queue.setdefault((r[2], r[3]), []).append(r)
        if isinstance(ident, str):
            torn(1, f"record at {r[0]}: {ident}")
            continue
        u, sq, row, n, t, q = ident
        ref_count[(u, sq, row)] += 1
        batches.setdefault((u, sq), []).append(row)
        at[r[0]] = ident
        if TOPICS[t] != r[2] or (q >= 0 and q != r[3]):
            torn(1, f"message {ident} stored in {r[2]}/{r[3]}")
    for (u, sq), rows in batches.items():
        n = led.begun.get((u, sq))
        if n is None:
            torn(1, f"batch uid {u} seq {sq} present ({len(rows)} rows) but never begun by a writer")
            continue
        c = Counter(rows)
        extra = sum(k - 1 for k in c.values() if k > 1)
        if extra:
            res["duplicated"] += extra
            detail(f"duplicated: batch uid {u} seq {sq}: {extra} extra copies")
        if set(c) != set(range(n)):
            torn(1, f"batch uid {u} seq {sq} partly present: {len(c)} of {n} rows")
    # ---- every queue, through the store's API and the raw consume queue
    api_count: Counter[tuple[int, int, int]] = Counter()
    queues = set(by_queue)
    cq_root = root / "consumequeue"
    for tdir in sorted(cq_root.iterdir()) if cq_root.is_dir() else []:
        for qdir in sorted(tdir.iterdir()):
            if qdir.name.isdigit():
                queues.add((tdir.name, int(qdir.name)))
    for topic, q in sorted(queues):
        _check_queue(s, root, topic, q, sorted(by_queue.get((topic, q), []), key=lambda r: r[4]), api_count, torn, rng)
    # ---- acknowledged batches
    for (u, sq), n in led.acked.items():
        gone = sum(1 for row in range(n) if not ref_count[(u, sq, row)] or not api_count[(u, sq, row)])
        if gone:
            res["lost"] += gone
            detail(f"lost: {gone} of {n} acknowledged messages of uid {u} seq {sq}"
                   f" (commitlog has {sum(1 for row in range(n) if ref_count[(u, sq, row)])})")
    for u, sq, first, last in led.ack_offsets:
        n = led.acked[(u, sq)]
        if at.get(first, (None, None, None))[:3] != (u, sq, 0) or at.get(last, (None, None, None))[:3] != (u, sq, n - 1):
            torn(1, f"acknowledged batch uid {u} seq {sq}: offsets {first}..{last} hold {at.get(first)}..{at.get(last)}")
    _append_after_recovery(s, spec, res, tail)


def _check_queue(
    s: rmqlog.MessageStore, root: Path, topic: str, q: int, ref: list[RefRec],
    api_count: Counter[tuple[int, int, int]], torn: Any, rng: random.Random,
) -> None:
    """One queue: dense offsets, raw units, ``read_queue`` and ``get_messages`` against the log."""
    where = f"{topic}/{q}"
    n = len(ref)
    qoffs = [r[4] for r in ref]
    if qoffs != list(range(n)):
        bad = next(i for i, o in enumerate(qoffs) if o != i)
        torn(1, f"queue {where}: queue offsets not dense/unique from position {bad} ({qoffs[bad:bad + 3]})")
    d = root / "consumequeue" / topic / str(q)
    units = rc.read_consume_queue(str(d)) if d.is_dir() else []
    want = [(r[0], r[1], r[5]) for r in ref]
    if units != want:
        diff = sum(1 for a, b in zip(units, want, strict=False) if a != b) + abs(len(units) - len(want))
        torn(diff, f"queue {where}: {len(units)} consume-queue units vs {n} records, {diff} disagree")
    lo, hi = s.min_offset(topic, q), s.max_offset(topic, q)
    if (lo, hi) != (0, n):
        torn(abs(hi - n) or 1, f"queue {where}: min/max offset {lo}/{hi}, the log holds {n}")
    try:
        table = s.read_queue(topic, q, 0, max(hi, n))
    except rmqlog.StoreError as exc:  # reads check units against records: damage is a typed error
        torn(max(n, 1), f"queue {where}: read_queue raised {type(exc).__name__}: {exc}")
        return
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
    # get_messages, page by page with random page sizes
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
        if r.status not in (rmqlog.GetMessageStatus.OFFSET_OVERFLOW_ONE, rmqlog.GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                            rmqlog.GetMessageStatus.NO_MATCHED_LOGIC_QUEUE):
            torn(1, f"queue {where}: get_messages at {off} answered {r.status.name}")
        break
    if phys != [r[0] for r in ref]:
        diff = sum(1 for a, b in zip(phys, ref, strict=False) if a != b[0]) + abs(len(phys) - n)
        torn(diff, f"queue {where}: get_messages read {len(phys)} messages, the log holds {n}, {diff} disagree")


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


# ------------------------------------------------------------------ the parent


@dataclass
class Child:
    role: str
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    err: Path
    uid: int = -1
    idempotent: bool = False
    start_seq: int = 0
    killed: bool = False
    go_at: float = 0.0

    def lines(self) -> list[str]:
        try:
            return self.log.read_text().splitlines()
        except FileNotFoundError:
            return []

    def has(self, tag: str) -> bool:
        return any(line.split(" ", 1)[0] == tag for line in self.lines())

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
            self.killed = True


@dataclass
class StoreRun:
    """One store and its ledger, living on for several trials."""

    index: int
    dir: Path
    config: dict[str, Any]
    trials_left: int
    trials: int = 0
    acked_total: int = 0
    #: idempotent writers killed mid-way: uid -> the sequence to resume from (replaying it)
    resumable: dict[int, int] = field(default_factory=dict)
    issued: set[int] = field(default_factory=set)  # writer uids handed out

    @property
    def root(self) -> Path:
        return self.dir / "store"

    @property
    def acks(self) -> Path:
        return self.dir / "acks"


@dataclass
class Totals:
    trials: int = 0
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    torn: int = 0
    verify: int = 0
    errors: int = 0

    def add(self, other: Totals) -> None:
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(other, k))

    def line(self) -> str:
        return (f"trials={self.trials} acknowledged={self.acknowledged} lost={self.lost} duplicated={self.duplicated} "
                f"torn={self.torn} verify_problems={self.verify} errors={self.errors}")

    @property
    def failed(self) -> bool:
        return bool(self.lost or self.duplicated or self.torn or self.verify or self.errors)


KiB, MiB = 1 << 10, 1 << 20


class Torture:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.rng = random.Random(args.seed)
        self.store: StoreRun | None = None
        self.stores = 0
        self.per_mode: dict[str, Totals] = {}
        self.total = Totals()
        self.kills = Counter[str]()
        self.est_open = 0.05  # seconds an open (with recovery) takes: kill moments are drawn from it
        self.failed_stores: list[Path] = []

    # -------------------------------------------------------------- stores
    def new_store(self) -> StoreRun:
        rng = self.rng
        self.stores += 1
        if self.args.small:
            seg = rng.choice([64 * KiB, 128 * KiB, 256 * KiB])
        else:
            seg = rng.choices([64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 1 << 30], weights=[4, 3, 2, 2, 1])[0]
        cq = rng.choice([20 * 64, 20 * 1000, 300_000 * 20])
        config = {
            "mapped_file_size_commit_log": seg, "mapped_file_size_consume_queue": cq,
            "flush_interval_commit_log": rng.choice([5, 50, 500]),
            "flush_commit_log_least_pages": rng.choice([1, 4]),
        }
        d = self.root / f"store-{self.stores:04d}"
        run = StoreRun(self.stores, d, config, trials_left=rng.randint(2, self.args.trials_per_store))
        run.acks.mkdir(parents=True)
        with rmqlog.MessageStore.open(run.root, store_config(config)) as s:
            s.create_topic(TOPICS[2], TOPIC_QUEUES[2])
        return run

    def retire_store(self, failed: bool) -> None:
        assert self.store is not None
        if failed:
            self.failed_stores.append(self.store.dir)
        elif not self.args.keep:
            shutil.rmtree(self.store.dir, ignore_errors=True)
        self.store = None

    # -------------------------------------------------------------- children
    def spawn(self, role: str, name: str, spec: dict[str, Any], tdir: Path, group: int | None, stdin: bool = False) -> Child:
        assert self.store is not None
        log = self.store.acks / f"{tdir.name}-{name}.log"
        err = tdir / f"{name}.err"
        spec = dict(spec, log=str(log), root=str(self.store.root), run_seed=self.args.seed, small=self.args.small)
        with open(err, "wb") as ef:
            proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--child", role, json.dumps(spec)],
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=ef,
                process_group=group,
            )
        return Child(role, name, proc, log, err, uid=spec.get("uid", -1), idempotent=spec.get("idempotent", False),
                     start_seq=spec.get("start_seq", 0))

    @staticmethod
    def wait_for(pred: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.002)
        return bool(pred())

    def writer_spec(self, uid: int, cfg: dict[str, Any], dispatch_trial: bool) -> dict[str, Any]:
        """A new writer ``uid``, or (sometimes) an idempotent writer killed earlier, resumed."""
        assert self.store is not None
        rng, run = self.rng, self.store
        if run.resumable and rng.random() < 0.5:
            uid = rng.choice(sorted(run.resumable))
            start_seq, idem = run.resumable.pop(uid), True
        else:
            start_seq, idem = 0, rng.random() < 0.5
            # a uid is issued once: only resuming an idempotent writer writes as an earlier one
            assert uid not in run.issued, f"harness: writer uid {uid} issued twice"
            run.issued.add(uid)
        return {
            "config": cfg, "uid": uid, "seed": rng.randrange(1 << 30), "start_seq": start_seq, "idempotent": idem,
            "batches": rng.randint(2, 30 if self.args.small else 300), "replay_p": rng.choice([0.0, 0.1, 0.3]),
            "dispatch_p": rng.choice([0.3, 1.0]) if dispatch_trial else 0.0,
        }

    @staticmethod
    def go(c: Child) -> None:
        """Send the go byte to a child waiting on its stdin."""
        assert c.proc.stdin is not None
        c.go_at = time.monotonic()
        with contextlib.suppress(BrokenPipeError):
            c.proc.stdin.write(b"g")
            c.proc.stdin.flush()

    def collect(self, children: list[Child], errors: list[str]) -> None:
        """After the children exited: count kills, note failures, learn open times, keep resumable writers."""
        assert self.store is not None
        for c in children:
            rc_ = c.proc.returncode
            if rc_ == -signal.SIGKILL:
                self.kills[c.role] += 1
            elif rc_ != 0:
                errors.append(f"{c.name} exited with {rc_}: {c.err.read_text()[-3000:]}")
            for line in c.lines():
                parts = line.split()
                if parts[0] == "O" and len(parts) == 3 and parts[2] == "1":  # it opened first: it recovered
                    self.est_open = 0.8 * self.est_open + 0.2 * float(parts[1])
            if c.role == "writer" and c.idempotent and not c.has("C"):  # resumed later, replaying its last batch
                begun = [int(ln.split()[2]) for ln in c.lines() if ln.startswith("B ")]
                self.store.resumable[c.uid] = max(begun) if begun else c.start_seq

    # -------------------------------------------------------------- one trial
    def trial(self, t: int, mode: str) -> Totals:
        if self.store is None:
            self.store = self.new_store()
        run = self.store
        rng = self.rng
        small = self.args.small
        tdir = run.dir / "trials" / f"t{t:05d}"
        tdir.mkdir(parents=True)
        cfg = dict(run.config, flush_disk_type=mode)
        t_start = time.monotonic()
        errors: list[str] = []
        plan: list[str] = []

        # ---- writers (and a dispatcher/reader) in one process group
        leader = subprocess.Popen(["sleep", str(CHILD_LIFETIME_S)], process_group=0)
        pg = leader.pid
        nw = rng.randint(1, self.args.max_writers)
        dispatch_trial = rng.random() < 0.4
        writers: list[Child] = []
        resumed = 0
        for w in range(nw):
            spec = self.writer_spec(t * UID_SLOTS + w, cfg, dispatch_trial)
            resumed += int(spec["uid"] != t * UID_SLOTS + w)
            writers.append(self.spawn("writer", f"w{w}", spec, tdir, pg))
        children = list(writers)
        reader = None
        if dispatch_trial or rng.random() < 0.3:
            reader = self.spawn("reader", "reader", {"config": cfg, "seed": rng.randrange(1 << 30),
                                                      "background": rng.random() < 0.3}, tdir, pg)
            children.append(reader)
        plan.append(f"w={nw}" + (f"({resumed} resumed)" if resumed else "") +
                    f" idem={sum(c.idempotent for c in writers)}" + (" reader" if reader else "") +
                    (" dispatch=True" if dispatch_trial else ""))

        # ---- when to kill
        trigger = rng.choices(["early", "time", "acks"], weights=[2, 5, 3])[0]
        if trigger == "early":  # while a writer starts up, opens or recovers the store
            self.wait_for(lambda: any(c.has("I") for c in writers), 60)
            time.sleep(rng.uniform(0, 1.5 * self.est_open))
        elif trigger == "time":
            self.wait_for(lambda: any(c.has("O") for c in writers) or all(c.proc.poll() is not None for c in writers), 60)
            time.sleep(rng.choice([rng.uniform(0, 0.05), rng.uniform(0, 0.5), rng.uniform(0.2, 1.0 if small else 2.5)]))
        else:
            k = rng.randint(1, 10 if small else 40)
            self.wait_for(lambda: sum(sum(1 for ln in c.lines() if ln.startswith("A ")) for c in writers) >= k
                          or all(c.proc.poll() is not None for c in writers), 60)
        how = rng.choices(["all", "group", "some", "one"], weights=[3, 3, 2, 2])[0]
        at = time.monotonic() - t_start
        if how == "group":
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pg, signal.SIGKILL)
            for c in children:
                c.killed = c.killed or c.proc.poll() is None
        elif how == "all":
            for c in rng.sample(children, len(children)):
                c.kill()
        else:
            victims = [rng.choice(writers)] if how == "one" else rng.sample(writers, rng.randint(1, len(writers)))
            if reader is not None and rng.random() < 0.5:
                victims.append(reader)
            for c in victims:
                c.kill()
            if rng.random() < 0.4:  # the survivors run to their end and close the store
                self.wait_for(lambda: all(c.proc.poll() is not None for c in writers), 20 if small else 60)
            else:
                time.sleep(rng.uniform(0, 0.5 if small else 1.5))
        plan.append(f"kill={how}@{trigger}:{at:.2f}s")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pg, signal.SIGKILL)  # whatever is left (the reader, survivors that did not finish)
        for c in children:
            c.killed = c.killed or c.proc.poll() is None
        for c in [*children]:
            c.proc.wait()
        leader.wait()
        self.collect(children, errors)

        # ---- kills during recovery, some while writers wait to open the store
        nrk = rng.choices([0, 1, 2, 3], weights=[4, 3, 2, 1])[0] if not small else rng.choice([0, 1])
        mid = waiters = 0
        for i in range(nrk):
            c = self.spawn("recover", f"rec{i}", {"config": cfg}, tdir, None, stdin=True)
            late = []
            if rng.random() < 0.35:  # writers that open while the recovery runs (they wait for its lock)
                for j in range(rng.randint(1, 2)):
                    slot = MAX_WRITERS + waiters  # a slot of its own: never another process's uid
                    assert slot < CHECKER_SLOT
                    spec = dict(self.writer_spec(t * UID_SLOTS + slot, cfg, False), wait_go=True, batches=rng.randint(2, 40))
                    late.append(self.spawn("writer", f"rec{i}w{j}", spec, tdir, None, stdin=True))
                    waiters += 1
            self.wait_for(lambda c=c, late=late: all(x.has("I") or x.proc.poll() is not None for x in [c, *late]), 60)
            delay = rng.uniform(0, 1.3 * self.est_open)
            self.go(c)
            time.sleep(rng.uniform(0, min(delay, 0.3 * self.est_open)))
            for x in late:
                self.go(x)
            time.sleep(max(0.0, delay - (time.monotonic() - c.go_at)))
            c.kill()
            c.proc.wait()
            if not c.has("O"):
                mid += 1
            if late:  # they go on as openers of a store whose recovery was cut short: kill them later
                self.wait_for(lambda late=late: all(x.proc.poll() is not None for x in late), rng.uniform(0.05, 1.5))
                for x in late:
                    x.kill()
                    x.proc.wait()
            self.collect([c, *late], errors)
        self.kills["recoveries"] += nrk
        self.kills["mid-recovery"] += mid
        if nrk:
            plan.append(f"rec-kills={nrk}(mid {mid}" + (f", {waiters} writers waiting)" if waiters else ")"))

        # ---- the check
        crash_after = rng.random() < 0.4
        out = tdir / "check.json"
        spec = {"config": cfg, "acks": str(run.acks), "cache": str(run.dir / "walk-cache.pkl"), "out": str(out),
                "seed": rng.randrange(1 << 30), "crash_after": crash_after, "uid": t * UID_SLOTS + CHECKER_SLOT, "trial": t}
        c = self.spawn("check", "check", spec, tdir, None)
        t_check = time.monotonic()
        try:
            c.proc.wait(timeout=CHILD_LIFETIME_S)
        except subprocess.TimeoutExpired:
            c.kill()
            c.proc.wait()
        if c.proc.returncode not in ((0, -signal.SIGKILL) if crash_after else (0,)) or not out.exists():
            errors.append(f"checker exited with {c.proc.returncode}: {c.err.read_text()[-3000:]}")
            result: dict[str, Any] = {"lost": 0, "duplicated": 0, "torn": 0, "verify": 0, "errors": [], "details": [],
                                      "acked_total": run.acked_total}
        else:
            result = json.loads(out.read_text())
        if crash_after:
            plan.append("check-then-kill")
        t_check = time.monotonic() - t_check

        # ---- the counts
        tot = Totals(trials=1, acknowledged=result["acked_total"] - run.acked_total, lost=result["lost"],
                     duplicated=result["duplicated"], torn=result["torn"], verify=result["verify"],
                     errors=len(errors) + len(result["errors"]))
        run.acked_total = result["acked_total"]
        run.trials += 1
        run.trials_left -= 1
        rec = result.get("recovery") or {}
        print(f"trial {t:4d} {mode.split('_')[0]:5s} store {run.index}.{run.trials} "
              f"seg={run.config['mapped_file_size_commit_log'] // KiB}K {' '.join(plan)} | "
              f"acked +{tot.acknowledged} (store {run.acked_total}) records {result.get('records', '?')} "
              f"lost {tot.lost} dup {tot.duplicated} torn {tot.torn} verify {tot.verify} errors {tot.errors} | "
              f"recovery {'abnormal' if rec.get('abnormal') else 'normal'} {rec.get('seconds', '?')}s | "
              f"check {t_check:.1f}s, trial {time.monotonic() - t_start:.1f}s", flush=True)
        if tot.failed:
            for msg in (errors + result["errors"] + result["details"])[:40]:
                print("    " + msg.replace("\n", "\n    "), flush=True)
            print(f"    FAILED: store kept at {run.dir} (store root {run.root}, ledger {run.acks})", flush=True)
            self.retire_store(failed=True)
        else:
            shutil.rmtree(tdir, ignore_errors=True)
            segments = len(list((run.root / "commitlog").glob("[0-9]" * 20)))
            if run.trials_left <= 0 or result.get("records", 0) > (300_000 if not small else 50_000) or segments > 300:
                self.retire_store(failed=False)
        return tot

    def run(self) -> int:
        modes = {"sync": [rmqlog.SYNC_FLUSH], "async": [rmqlog.ASYNC_FLUSH], "both": [rmqlog.SYNC_FLUSH, rmqlog.ASYNC_FLUSH]}[self.args.flush]
        t0 = time.monotonic()
        for t in range(self.args.trials):
            mode = modes[t % len(modes)]
            tot = self.trial(t, mode)
            self.per_mode.setdefault(mode, Totals()).add(tot)
            self.total.add(tot)
            if len(self.failed_stores) >= self.args.max_failed_stores:
                print(f"stopping: {len(self.failed_stores)} failing stores kept", flush=True)
                break
        if self.store is not None:
            self.retire_store(failed=False)
        for mode, tot in self.per_mode.items():
            print(f"torture {mode}: {tot.line()}")
        print(f"torture total: {self.total.line()} | kills: writers {self.kills['writer']}, "
              f"readers {self.kills['reader']}, recoveries {self.kills['recoveries']} "
              f"({self.kills['mid-recovery']} before the open returned); stores {self.stores}; "
              f"{time.monotonic() - t0:.0f}s")
        for d in self.failed_stores:
            print(f"failing store kept: {d}")
        return 1 if self.total.failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child_setup()
        CHILDREN[argv[1]](json.loads(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--flush", choices=("sync", "async", "both"), default="both",
                    help="flush mode of the trials (both: SYNC_FLUSH and ASYNC_FLUSH alternate)")
    ap.add_argument("--max-writers", type=int, default=4)
    ap.add_argument("--root", type=Path, default=None, help="work directory (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep every store (failing stores are always kept)")
    ap.add_argument("--small", action="store_true", help="small batches, short runs: the CI round")
    ap.add_argument("--trials-per-store", type=int, default=12, help="a store lives for 2..N trials")
    ap.add_argument("--max-failed-stores", type=int, default=3, help="stop after this many failing stores")
    args = ap.parse_args(argv)
    if not 1 <= args.max_writers <= MAX_WRITERS:
        ap.error(f"--max-writers must be in 1..{MAX_WRITERS}")
    if args.trials_per_store < 2:
        ap.error("--trials-per-store must be at least 2")
    root = args.root or Path(tempfile.mkdtemp(prefix="torture-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"torture: {args.trials} trials, seed {args.seed}, flush {args.flush}, up to {args.max_writers} writers, "
          f"work directory {root}", flush=True)
    code = Torture(args, root).run()
    if code == 0 and not args.keep and args.root is None:
        shutil.rmtree(root, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
