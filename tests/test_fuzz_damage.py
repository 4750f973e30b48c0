"""Fuzzing damaged stores: seeded mutations of real segments, consume queues and state files.

Each case copies an undamaged store (one written by this store over several 4 KiB segments,
or the RocketMQ 4.9 fixture segment), applies one to three random mutations (flipped bytes,
record fields set to extreme values, zeroed or duplicated ranges, truncated or deleted
files, consume-queue units pointing at other records), sometimes leaves ``abort``, then:

1. opens it: the store opens, or raises a :class:`rmqlog.StoreError` (typed; never IndexError,
   ValueError, AssertionError...);
2. if it opened: ``verify()`` returns a report, and every queue is read through
   ``read_queue`` and ``get_messages``: each call returns messages or raises a StoreError, and
   every message returned is the original message at that commitlog offset (same topic,
   queue, queue offset and body: never another record's data, never another queue's);
3. opens it with ``repair=True``: that always succeeds (an empty log is a valid prefix) and
   leaves a store whose ``verify()`` is clean, which reads back only original messages, and
   whose queues continue at the right offsets.

The timer's files (``timer/log``, ``timer/wheel``, ``timer/state``) of a store with timed
messages pending get their own cases (:func:`run_timer_case`): the same kinds of mutations
(fields of entries, of non-empty slots and of the state among them), then a normal open or
``repair=True`` and passes: no error, and each pending message delivered exactly once, never
before its time (tests/timed_store.py).

The suite runs ``FUZZ_CASES`` cases and ``TIMER_FUZZ_CASES`` timer cases; ``RMQ_OPTIN=1``
adds long runs of ``RMQ_FUZZ_CASES`` (10,000 by default) of each, whose figures they print.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import FIXTURE_COMMITLOG, copy_file, small_store_config, walk
from timed_store import Outcome, Timed, deliver_after, make_timed_store

import refcodec as rc
import rmqlog

CFG = small_store_config(mapped_file_size_consume_queue=20 * 8)
FUZZ_CASES = 150
#: Record fields (offset, width) a mutation may set to an extreme value.
FIELDS = [
    (0, 4),
    (4, 4),
    (8, 4),
    (12, 4),
    (16, 4),
    (20, 8),
    (28, 8),
    (36, 4),
    (40, 8),
    (56, 8),
    (72, 4),
    (76, 8),
    (84, 4),
]
EXTREMES = [0, 1, -1, 0x7FFFFFFF, -0x80000000, 2**63 - 1, -(2**63), 4096, 4095, 8]


@dataclass
class Base:
    root: Path
    originals: dict[int, tuple[str, int, int, bytes]]  # commitlog offset -> (topic, queue, queue offset, body)
    record_starts: list[int]


def _originals(root: Path) -> dict[int, tuple[str, int, int, bytes]]:
    return {r.physical_offset: (r.topic, r.queue_id, r.queue_offset, r.body) for r in walk(root)}


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> list[Base]:
    ours = tmp_path_factory.mktemp("fuzz") / "ours"
    with rmqlog.MessageStore.open(ours, CFG) as s:
        s.create_topic("A", 3)
        s.create_topic("B", 2)
        for i in range(8):
            topic = "A" if i % 2 else "B"
            s.put_batch(
                pa.table(
                    {
                        "topic": [topic] * 7,
                        "body": [f"{topic}{i}.{k}|".encode() * 5 for k in range(7)],
                        "tags": [f"t{k % 2}" for k in range(7)],
                    }
                )
            )
        s.dispatch()
    theirs = tmp_path_factory.mktemp("fuzz") / "rocketmq"
    copy_file(FIXTURE_COMMITLOG, theirs / "commitlog" / FIXTURE_COMMITLOG.name)
    with rmqlog.MessageStore.open(theirs) as s:  # dispatched at open: consume queues, state files
        assert s.max_offset("abc", 0) == 47
    return [Base(r, o, sorted(o)) for r in (ours, theirs) for o in [_originals(r)]]


# --------------------------------------------------------------------------- mutations


def _files(root: Path) -> dict[str, list[Path]]:
    return {
        "commitlog": sorted((root / "commitlog").iterdir()),
        "consumequeue": sorted(p for p in (root / "consumequeue").rglob("*") if p.is_file()),
        "state": [
            p
            for p in (
                root / n
                for n in (
                    "append.state",
                    "flush.state",
                    "dispatch.state",
                    "checkpoint",
                    "config/topics.json",
                    "config/consumerOffset.json",
                )
            )
            if p.exists()
        ],
    }


def _mutate(rng: random.Random, root: Path, base: Base) -> str:
    files = _files(root)
    kind = rng.choices(["commitlog", "consumequeue", "state"], [6, 3, 1])[0]
    if not files[kind]:
        kind = next((k for k in ("commitlog", "consumequeue", "state") if files[k]), "")
        if not kind:
            return "nothing left to damage"
    path = rng.choice(files[kind])
    data = bytearray(path.read_bytes())
    op = rng.choice(
        ["flip", "field", "zero", "copy", "truncate", "delete"]
        if kind != "consumequeue"
        else ["flip", "unit", "unit", "zero", "truncate", "delete"]
    )
    seg_start = int(path.name) if kind == "commitlog" else 0
    if op == "delete" and rng.random() < 0.3:
        path.unlink()
        return f"delete {path.relative_to(root)}"
    if not data or op == "truncate":
        os.truncate(path, rng.randrange(0, max(1, len(data))))
        return f"truncate {path.relative_to(root)}"
    if op == "flip" or op == "delete":
        at = [rng.randrange(len(data)) for _ in range(rng.randint(1, 4))]
        for a in at:
            data[a] ^= 1 << rng.randrange(8)
        desc = f"flip {path.relative_to(root)} at {at}"
    elif op == "field":
        starts = [s - seg_start for s in base.record_starts if 0 <= s - seg_start < len(data)] or [0]
        rec = rng.choice(starts)
        off, width = rng.choice(FIELDS)
        value = rng.choice(EXTREMES + [rng.randrange(-(2**31), 2**31)])
        at = rec + off
        if at + width <= len(data):
            data[at : at + width] = (value % (1 << (8 * width))).to_bytes(width, "big")
        desc = f"field {path.relative_to(root)} record {rec} +{off} = {value}"
    elif op == "unit":  # a consume-queue unit pointing at another record, or a wild value
        unit = rng.randrange(max(1, len(data) // 20)) * 20
        if rng.random() < 0.6 and base.record_starts:
            other = rng.choice(base.record_starts)
            data[unit : unit + 8] = other.to_bytes(8, "big")
            if rng.random() < 0.5:  # with that record's true size: only topic/queue/offset tell
                size = (
                    int.from_bytes(_record_bytes(base, root, other)[:4], "big")
                    if _record_bytes(base, root, other)
                    else 0
                )
                data[unit + 8 : unit + 12] = size.to_bytes(4, "big")
        else:
            off, width = rng.choice([(0, 8), (8, 4), (12, 8)])
            value = rng.choice(EXTREMES)
            data[unit + off : unit + off + width] = (value % (1 << (8 * width))).to_bytes(width, "big")
        desc = f"unit {path.relative_to(root)} at {unit}"
    elif op == "zero":
        a = rng.randrange(len(data))
        b = min(len(data), a + rng.randint(1, 512))
        data[a:b] = bytes(b - a)
        desc = f"zero {path.relative_to(root)} [{a}, {b})"
    else:  # copy: a range of the file written over another place (a duplicated record)
        a = rng.randrange(len(data))
        n = rng.randint(8, 400)
        chunk = bytes(data[a : a + n])
        c = rng.randrange(len(data))
        data[c : c + len(chunk)] = chunk[: len(data) - c]
        desc = f"copy {path.relative_to(root)} {a}+{n} -> {c}"
    path.write_bytes(bytes(data))
    return desc


def _record_bytes(base: Base, root: Path, offset: int) -> bytes:
    seg = base.root / "commitlog"
    for p in sorted(seg.iterdir()):
        start, size = int(p.name), p.stat().st_size
        if start <= offset < start + size:
            return p.read_bytes()[offset - start : offset - start + 8]
    return b""


# --------------------------------------------------------------------------- checks


def _check_rows(base: Base, root: Path, table: pa.Table, topic: str, qid: int) -> None:
    """Every row is of the queue asked for, is the record the reference decoder finds at its
    commitlog offset now, and carries the original message's body there (never another
    record's data). Its topic, queue and queue offset are the record's as stored: a damaged
    header field that every check accepts (a QUEUEID changed to the queue whose next offset
    the record happens to carry) is not detectable in RocketMQ's format."""
    got = zip(
        table["commitLogOffset"].to_pylist(),
        table["topic"].to_pylist(),
        table["queueId"].to_pylist(),
        table["queueOffset"].to_pylist(),
        table["body"].to_pylist(),
        strict=True,
    )
    for off, t, q, qoff, body in got:
        assert (t, q) == (topic, qid), f"a read of {topic}/{qid} returned a message of {t}/{q}"
        assert off in base.originals, f"a message at {off}, where no record started"
        assert base.originals[off][3] == body, f"the message at {off} does not carry its original body"
        seg = max((p for p in (root / "commitlog").iterdir() if int(p.name) <= off), key=lambda p: int(p.name))
        assert _stored(seg.read_bytes(), off - int(seg.name)) == (t, q, qoff, body), (
            f"the message at {off} is not the record stored there"
        )


def _stored(data: bytes, pos: int) -> tuple[str, int, int, bytes]:
    """(topic, queue id, queue offset, body) of the record at ``pos``, by the reference decoder;
    properties whose bytes were damaged into invalid UTF-8 (not checksummed, so read as
    they are) are skipped by reading the fields up to the topic by hand (IPv4 hosts, V1)."""
    try:
        kind, rec = rc.decode_record(data, pos)
        assert kind == "record" and isinstance(rec, rc.RefRecord), kind
        return rec.topic, rec.queue_id, rec.queue_offset, rec.body
    except UnicodeDecodeError:
        (qid,), (qoff,) = struct.unpack_from(">i", data, pos + 12), struct.unpack_from(">q", data, pos + 20)
        n = struct.unpack_from(">i", data, pos + 84)[0]
        body = data[pos + 88 : pos + 88 + n]
        tl = data[pos + 88 + n]
        return data[pos + 89 + n : pos + 89 + n + tl].decode("utf-8", "replace"), qid, qoff, body


#: queue ids below this are read whether or not their folder exists; above it, only those
#: with a folder (a damaged queue id can make a topic list 65,535 queues, nearly all empty:
#: reading each of those twice cost a minute and proves nothing the first 64 do not)
ALWAYS_READ_QUEUES = 64


def _queue_ids(root: Path, topic: str, count: int) -> list[int]:
    """The queue ids of ``topic`` (``count`` of them) that the harness reads."""
    folder = root / "consumequeue" / topic
    present = {int(n) for n in os.listdir(folder) if n.isdigit()} if folder.is_dir() else set()
    return sorted(set(range(min(count, ALWAYS_READ_QUEUES))) | {q for q in present if q < count})


def _read_everything(base: Base, root: Path, s: rmqlog.MessageStore) -> int:
    """Read every queue both ways; returns how many messages came back (typed errors allowed)."""
    n = 0
    for topic, tc in s.topics().items():
        for qid in _queue_ids(root, topic, max(tc.read_queue_nums, tc.write_queue_nums)):
            try:
                t = s.read_queue(topic, qid, 0, 1 << 40)
                _check_rows(base, root, t, topic, qid)
                n += t.num_rows
            except rmqlog.StoreError:
                pass
            offset = 0
            for _ in range(1000):
                try:
                    res = s.get_messages("fuzz", topic, qid, offset, max_count=7)
                except rmqlog.StoreError:
                    break
                _check_rows(base, root, res.messages, topic, qid)
                if res.next_begin_offset <= offset:
                    break
                offset = res.next_begin_offset
    return n


def run_case(base: Base, work: Path, seed: int) -> str:
    """One fuzz case; raises AssertionError (or an untyped exception) on a failure."""
    rng = random.Random(seed)
    root = work / f"case-{seed}"
    shutil.copytree(base.root, root)
    what = [_mutate(rng, root, base) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.5:
        (root / "abort").touch()
    try:
        try:
            s = rmqlog.MessageStore.open(root)
        except rmqlog.StoreError:
            s = None
        if s is not None:
            with s:
                s.verify()
                _read_everything(base, root, s)
        with rmqlog.MessageStore.open(root, repair=True) as s:
            report = s.verify()
            assert report.ok, f"verify after repair: {report.problems[:3]}"
            _read_everything(base, root, s)
            for topic, tc in s.topics().items():
                for qid in _queue_ids(root, topic, tc.write_queue_nums):
                    if s.max_offset(topic, qid) or s.min_offset(topic, qid):
                        before = s.max_offset(topic, qid)
                        assert s.put(topic, b"after", queue_id=qid).queue_offset == before
    except Exception as exc:
        raise AssertionError(f"seed {seed} ({base.root.name}): {'; '.join(what)}: {type(exc).__name__}: {exc}") from exc
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return "; ".join(what)


def test_fuzz_damaged_stores(bases: list[Base], tmp_path: Path) -> None:
    for seed in range(FUZZ_CASES):
        run_case(bases[seed % len(bases)], tmp_path, seed)


#: Seeds the long run found failing, each kept here: a truncated single segment whose size
#: was inferred from the file, with under 8 bytes left for the end blank (ValueError: write
#: outside segment); a queue offset flipped far past its queue's end in a log whose first
#: segment was deleted (MemoryError: a filler per missing unit); a record's queue id moved past
#: its topic's queue count in a store without topics.json (``topics()`` listed 9 queues, a put
#: to queue 8 was refused: the auto-created topic had the default 4; a queue id past 65535 made
#: ``topics()`` list more queues than a topic can have).
REGRESSION_SEEDS = [
    963,
    1097,
    2541,
    3319,
    3865,
    14607,
    pytest.param(
        12210,
        marks=pytest.mark.xfail(
            strict=True,
            reason=(
                "open defect: first segment deleted, a unit damaged and the next segment truncated: after repair, "
                "verify "
                "finds that queue's unit offsets do not increase (repair does not check units below the log start)"
            ),
        ),
    ),
    pytest.param(
        1490,
        marks=pytest.mark.xfail(
            strict=True,
            reason=(
                "known limitation: a QUEUEOFFSET damaged on the first record of a queue in a log whose first segment "
                "is gone cannot be told from a real one; open and repair no longer crash (MemoryError), but verify "
                "after repair reports the consume-queue file missing inside the queue"
            ),
        ),
    ),
]


@pytest.mark.parametrize("seed", REGRESSION_SEEDS)
def test_fuzz_regressions(bases: list[Base], tmp_path: Path, seed: int) -> None:
    run_case(bases[seed % len(bases)], tmp_path, seed)


@pytest.mark.optin
def test_fuzz_damaged_stores_long(bases: list[Base], tmp_path: Path) -> None:
    cases = int(os.environ.get("RMQ_FUZZ_CASES", "10000"))
    first = int(os.environ.get("RMQ_FUZZ_FIRST", str(FUZZ_CASES)))
    started = time.monotonic()
    failed: list[str] = []
    for seed in range(first, first + cases):
        try:
            run_case(bases[seed % len(bases)], tmp_path, seed)
        except AssertionError as exc:  # every failing case is listed, not only the first
            failed.append(str(exc))
    print(
        f"fuzz: {cases} cases (seeds {first}..{first + cases - 1}), {len(failed)} failed, "
        f"in {time.monotonic() - started:.0f} s"
    )
    assert not failed, "\n".join(failed[:50])


# --------------------------------------------------------------------------- the timer's files

#: timer cases of the default run (a few seconds); the opt-in long run takes RMQ_FUZZ_CASES
TIMER_FUZZ_CASES = 30
#: values a timer-file field may be set to: ends of the ranges, entry indices, small counts
TIMER_EXTREMES = [0, 1, -1, -2, 2, 3, 7, 2**62, 2**63 - 1, -(2**63), 10**6]


@pytest.fixture(scope="module")
def timer_base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Timed]:
    root = tmp_path_factory.mktemp("fuzz-timer") / "timed"
    return root, make_timed_store(root)


def _mutate_timer(rng: random.Random, root: Path, timed: Timed) -> str:
    """One mutation of ``timer/log``, ``timer/wheel`` or ``timer/state``: flipped bits, a field
    (of an entry, a non-empty slot, the state) set to an extreme or a nearby due time, a range
    zeroed or copied over another place, the file truncated or deleted."""
    files = [p for p in (root / "timer" / n for n in ("log", "wheel", "state")) if p.exists()]
    if not files:
        return "nothing left to damage"
    path = rng.choice(files)
    name = path.relative_to(root)
    data = bytearray(path.read_bytes())
    op = rng.choice(["flip", "field", "field", "zero", "copy", "truncate", "delete"])
    if op == "delete" and rng.random() < 0.3:
        path.unlink()
        return f"delete {name}"
    if not data or op == "truncate":
        os.truncate(path, rng.randrange(0, max(1, len(data))))
        return f"truncate {name}"
    if op in ("flip", "delete"):
        at = [rng.randrange(len(data)) for _ in range(rng.randint(1, 4))]
        for a in at:
            data[a] ^= 1 << rng.randrange(8)
        desc = f"flip {name} at {at}"
    elif op == "field":
        if path.name == "log":
            at = rng.randrange(max(1, len(data) // 40)) * 40 + rng.choice([0, 0, 8, 16, 24])
        elif path.name == "wheel":
            counts = np.frombuffer(bytes(data[: len(data) // 24 * 24]), "<i8").reshape(-1, 3)[:, 2]
            live = np.flatnonzero(counts) if rng.random() < 0.8 else np.zeros(0, np.int64)
            slot = int(rng.choice(live.tolist())) if len(live) else rng.randrange(max(1, len(data) // 24))
            at = slot * 24 + rng.choice([0, 8, 16])
        else:
            at = rng.randrange(1, 11) * 8
        value = rng.choice(TIMER_EXTREMES + [timed.t0 + rng.randrange(0, 40_000)])
        if at + 8 <= len(data):
            data[at : at + 8] = struct.pack("<Q", value % (1 << 64))
        desc = f"field {name} +{at} = {value}"
    elif op == "zero":
        a = rng.randrange(len(data))
        b = min(len(data), a + rng.randint(1, 256))
        data[a:b] = bytes(b - a)
        desc = f"zero {name} [{a}, {b})"
    else:
        a, c, n = rng.randrange(len(data)), rng.randrange(len(data)), rng.randint(8, 120)
        chunk = bytes(data[a : a + n])
        data[c : c + len(chunk)] = chunk[: len(data) - c]
        desc = f"copy {name} {a}+{n} -> {c}"
    path.write_bytes(bytes(data))
    return desc


def run_timer_case(base: Path, timed: Timed, work: Path, seed: int) -> tuple[str, Outcome]:
    """One timer case: 1-3 mutations of the timer's files, sometimes ``abort``, then
    :func:`timed_store.deliver_after` (a normal open or, one case in three, ``repair=True``).
    An untyped exception propagates, named by the seed and the mutations."""
    rng = random.Random(seed)
    root = work / f"timer-{seed}"
    shutil.copytree(base, root)
    what = [_mutate_timer(rng, root, timed) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.3:
        (root / "abort").touch()
        what.append("abort")
    repair = rng.random() < 0.3
    desc = f"seed {seed}{' repair' if repair else ''}: {'; '.join(what)}"
    try:
        return desc, deliver_after(root, timed, repair=repair)
    except Exception as exc:
        raise AssertionError(f"{desc}: {type(exc).__name__}: {exc}") from exc
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_fuzz_damaged_timer_files(timer_base: tuple[Path, Timed], tmp_path: Path) -> None:
    for seed in range(TIMER_FUZZ_CASES):
        desc, out = run_timer_case(*timer_base, tmp_path, seed)
        assert out.ok, f"{desc}: {out}"


@pytest.mark.optin
def test_fuzz_damaged_timer_files_long(timer_base: tuple[Path, Timed], tmp_path: Path) -> None:
    """``RMQ_OPTIN=1 RMQ_FUZZ_CASES=10000 pytest -s tests/test_fuzz_damage.py -k timer_files_long``:
    prints the cases, untyped errors, typed errors, duplicates, lost, early and late deliveries."""
    cases = int(os.environ.get("RMQ_FUZZ_CASES", "10000"))
    first = int(os.environ.get("RMQ_FUZZ_FIRST", str(TIMER_FUZZ_CASES)))
    started = time.monotonic()
    untyped: list[str] = []
    failed: list[str] = []
    totals = {"typed errors": 0, "duplicates": 0, "lost": 0, "early": 0, "late": 0, "foreign": 0}
    for seed in range(first, first + cases):
        try:
            desc, out = run_timer_case(*timer_base, tmp_path, seed)
        except AssertionError as exc:
            untyped.append(str(exc))
            continue
        totals["typed errors"] += out.error is not None
        totals["duplicates"] += out.duplicates
        for k in ("lost", "early", "late", "foreign"):
            totals[k] += len(getattr(out, k))
        if not out.ok:
            failed.append(f"{desc}: {out}")
    print(
        f"fuzz timer: {cases} cases (seeds {first}..{first + cases - 1}), {len(untyped)} untyped errors, "
        + ", ".join(f"{v} {k}" for k, v in totals.items())
        + f", in {time.monotonic() - started:.0f} s"
    )
    assert not untyped and not failed, "\n".join((untyped + failed)[:50])


# --------------------------------------------------------------------------- the store's other state files
#: Cases of the state-file fuzz in the suite (``RMQ_OPTIN=1`` with ``RMQ_FUZZ_STATE_CASES``: a long run).
STATE_FUZZ_CASES = 24
_STATE_FILES = ("config/delayOffset.json", "config/delayOffset.json.bak", "retention.state", "config/indexFile.json")
_DELIVERED = [b"due%d" % i for i in range(3)]
_PENDING = [b"wait%d" % i for i in range(5)]
_NORMAL = [b"n%d" % i for i in range(20)]


@pytest.fixture(scope="module")
def state_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with every state file of its own: delivered and pending delay messages
    (``delayOffset.json`` and its ``.bak``, writer markers), a retention pass
    (``retention.state``), keys in index files (``indexFile.json``)."""
    root = tmp_path_factory.mktemp("fuzz") / "state"
    with rmqlog.MessageStore.open(root, CFG) as s:
        s.create_topic("A", 2)
        s.put_batch(pa.table({"topic": ["A"] * 20, "body": _NORMAL, "keys": [[f"k{i}"] for i in range(20)]}))
        for b in _DELIVERED:
            s.put("A", b, delay_level=1)
        assert s.deliver_due(1 << 50) == 3
        for i, b in enumerate(_PENDING):
            s.put("A", b, delay_level=2 + i % 2)
        s.put("A", b"last", delay_level=2)
        assert s.deliver_due(0) == 0  # the file written again: a .bak
        s.retention.disk_used = lambda path: 10.0
        s.clean_expired(0)
    assert all((root / n).exists() for n in _STATE_FILES) and list((root / "index").iterdir())
    return root


def _mutate_state(rng: random.Random, root: Path) -> str:
    files = [root / n for n in _STATE_FILES if (root / n).exists()]
    files += sorted(p for p in (root / "index").glob("*") if p.is_file() and p.name.isdigit())
    if not files:
        return "nothing left to damage"
    path = rng.choice(files)
    name = str(path.relative_to(root))
    # (a file of the wrong type, a directory in its place, is tests/test_wrong_types_matrix.py's)
    op = rng.choice(["flip", "flip", "zero", "truncate", "delete", "value"])
    if op == "delete":
        path.unlink()
        return f"delete {name}"
    data = bytearray(path.read_bytes())
    if op == "truncate" or not data:
        os.truncate(path, rng.randrange(0, max(1, len(data))))
        return f"truncate {name}"
    if op == "value":  # a plausible but wrong value in a field
        value = rng.choice(EXTREMES + [rng.randrange(0, 64), rng.randrange(0, 1 << 40), 4096 * rng.randrange(1, 8)])
        if path.parent.name == "index":
            off = rng.choice([0, 8, 16, 24, 32, 36])
            width = 4 if off >= 32 else 8
            data[off : off + width] = (value % (1 << (8 * width))).to_bytes(width, "big")
        elif path.name.startswith("delayOffset"):
            data = bytearray(f'{{"offsetTable":{{{rng.randint(1, 4)}:{value}}}}}'.encode())
        elif path.name == "retention.state":
            data = bytearray(f'{{"version": 1, "logStart": {abs(value)}, "queuesCleaned": 0}}'.encode())
        else:
            data = bytearray(f'{{"maxHashSlotNum": {value}, "maxIndexNum": {rng.choice([value, 16_000, 2])}}}'.encode())
        desc = f"value {name} {value}"
    elif op == "zero":
        a = rng.randrange(len(data))
        b = min(len(data), a + rng.randint(1, 64))
        data[a:b] = bytes(b - a)
        desc = f"zero {name} [{a}, {b})"
    else:
        at = [rng.randrange(min(len(data), 4096)) for _ in range(rng.randint(1, 3))]
        for a in at:
            data[a] ^= 1 << rng.randrange(8)
        desc = f"flip {name} at {at}"
    path.write_bytes(bytes(data))
    return desc


def _real_bodies(s: rmqlog.MessageStore) -> list[bytes]:
    s.dispatch()
    return [m["body"] for q in range(2) for m in s.read_queue("A", q, 0, 1 << 40).to_pylist()]


def _check_keys(s: rmqlog.MessageStore, rng: random.Random) -> None:
    """Queries by key return only the message that has the key (an index may miss keys: its
    entries are not checksummed, as in RocketMQ), or a typed error."""
    for i in rng.sample(range(20), 4):
        try:
            rows = s.query_by_key("A", f"k{i}").to_pylist()
        except rmqlog.StoreError:
            continue
        assert [r["body"] for r in rows] in ([], [b"n%d" % i]), (i, rows)


def run_state_case(base: Path, work: Path, seed: int) -> str:
    """One case: damage 1-3 of the state files; a normal open loses and duplicates nothing (or
    raises a typed error), ``repair=True`` always opens, ``verify()`` is clean and every delayed
    message is delivered exactly once."""
    rng = random.Random(seed)
    root = work / f"state-{seed}"
    shutil.copytree(base, root)
    what = [_mutate_state(rng, root) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.5:
        (root / "abort").touch()
    everything = sorted([*_NORMAL, *_DELIVERED, *_PENDING, b"last"])
    try:
        try:
            s = rmqlog.MessageStore.open(root, CFG)
        except rmqlog.StoreError:
            s = None
        if s is not None:
            with s:
                assert s.verify().ok
                bodies = _real_bodies(s)
                assert sorted(bodies) == sorted([*_NORMAL, *_DELIVERED]), "a normal open lost or added messages"
                try:
                    s.deliver_due(1 << 50)
                    assert sorted(_real_bodies(s)) == everything, "delivered twice or not at all"
                except rmqlog.StoreError:
                    pass
                _check_keys(s, rng)
        with rmqlog.MessageStore.open(root, CFG, repair=True) as s:
            assert s.verify().ok
            s.deliver_due(1 << 50)
            assert sorted(_real_bodies(s)) == everything, "after repair: delivered twice or not at all"
            _check_keys(s, rng)
            before = s.max_offset("A", 0)
            assert s.put("A", b"after", queue_id=0).queue_offset == before
    except Exception as exc:
        raise AssertionError(f"state seed {seed}: {'; '.join(what)}: {type(exc).__name__}: {exc}") from exc
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return "; ".join(what)


def test_fuzz_damaged_state_files(state_base: Path, tmp_path: Path) -> None:
    for seed in range(STATE_FUZZ_CASES):
        run_state_case(state_base, tmp_path, seed)


@pytest.mark.optin
def test_fuzz_damaged_state_files_long(state_base: Path, tmp_path: Path) -> None:
    cases = int(os.environ.get("RMQ_FUZZ_STATE_CASES", "2000"))
    first = int(os.environ.get("RMQ_FUZZ_FIRST", str(STATE_FUZZ_CASES)))
    started = time.monotonic()
    failed: list[str] = []
    for seed in range(first, first + cases):
        try:
            run_state_case(state_base, tmp_path, seed)
        except AssertionError as exc:
            failed.append(str(exc))
    print(
        f"state fuzz: {cases} cases (seeds {first}..{first + cases - 1}), {len(failed)} failed, "
        f"in {time.monotonic() - started:.0f} s"
    )
    assert not failed, "\n".join(failed[:50])
