"""IndexService: building from dispatched columns, queries across files (collisions, time range),
idempotent re-dispatch, a writer killed mid-batch, recovery (truncate, checkpoint drop), retention,
another process's writes, and the store's own records indexed and found.

Expected answers come from the independent reference in ``test_index_file.py``.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from test_index_file import (
    SMALL,
    Clock,
    RefIndex,
    file_bytes,
    open_service,
    ref_key_hash,
    ref_query,
)

from rmqlog.errors import InvalidArgumentError
from rmqlog.index import IndexConfig, IndexService, key_matches, matching_messages
from rmqlog.index.index_file import IndexFile
from rmqlog.index.layout import INTENT_MAGIC

T0 = 1_700_000_000_000


class Msgs:
    """A stream of messages: topic, offset, store time, UNIQ_KEY, KEYS (RocketMQ's strings)."""

    def __init__(
        self, n: int, seed: int = 0, *, topics: tuple[str, ...] = ("T",), distinct: int = 50, step_ms: int = 700
    ) -> None:
        rng = np.random.default_rng(seed)
        self.topic = [topics[int(i)] for i in rng.integers(0, len(topics), n)]
        self.phy = np.cumsum(rng.integers(50, 400, n)).astype(np.int64)
        self.ts = T0 + np.cumsum(rng.integers(0, step_ms, n)).astype(np.int64)
        self.uniq: list[str | None] = [f"{int(x):032X}" if x % 5 else None for x in rng.integers(0, 2**62, n)]
        self.keys: list[str | None] = [
            None if x % 7 == 0 else " ".join(f"key{int(y)}" for y in rng.integers(0, distinct, 1 + int(x) % 3))
            for x in rng.integers(0, 1000, n)
        ]

    def __len__(self) -> int:
        return len(self.phy)

    def then(self, more: Msgs) -> Msgs:
        """These messages followed by ``more`` (shifted to come after them in offset and time)."""
        out = Msgs(0)
        out.topic, out.uniq, out.keys = self.topic + more.topic, self.uniq + more.uniq, self.keys + more.keys
        out.phy = np.concatenate([self.phy, more.phy + self.phy[-1]])
        out.ts = np.concatenate([self.ts, more.ts - T0 + self.ts[-1]])
        return out

    def cols(self, lo: int = 0, hi: int | None = None) -> tuple[pa.Array, np.ndarray, np.ndarray, pa.Array, pa.Array]:
        s = slice(lo, hi)
        return (
            pa.array(self.topic[s]),
            self.phy[s],
            self.ts[s],
            pa.array(self.uniq[s], pa.string()),
            pa.array(self.keys[s], pa.string()),
        )

    def key_stream(self) -> list[tuple[str, int, int]]:
        """(``topic#key``, offset, time) in RocketMQ's order."""
        out = []
        for i in range(len(self)):
            ks = ([self.uniq[i]] if self.uniq[i] is not None else []) + [
                k for k in (self.keys[i] or "").split(" ") if k
            ]
            out += [(f"{self.topic[i]}#{k}", int(self.phy[i]), int(self.ts[i])) for k in ks]
        return out

    def reference(self, slots: int = 100, num: int = 400) -> RefIndex:
        ref = RefIndex(slots, num)
        for k, p, t in self.key_stream():
            ref.put(ref_key_hash(k), p, t)
        return ref


def build_in_batches(svc: IndexService, msgs: Msgs, sizes: list[int]) -> int:
    total, lo = 0, 0
    for size in sizes:
        total += svc.build(*msgs.cols(lo, lo + size))
        lo += size
    total += svc.build(*msgs.cols(lo))
    return total


# --------------------------------------------------------------------------- building, queries


def test_build_matches_the_reference_byte_for_byte_and_key_for_key(tmp_path: Path) -> None:
    msgs = Msgs(1200, seed=3, topics=("T", "Other", "T日"))
    svc = open_service(tmp_path)
    added = build_in_batches(svc, msgs, [1, 7, 300, 2, 500])
    ref = msgs.reference()
    assert added == len(msgs.key_stream())
    got = file_bytes(svc)
    assert got == [bytes(f.buf) for f in ref.files]
    assert len(got) >= 4
    # every key: the same offsets as RocketMQ's query over the same bytes, newest first
    for full in sorted({k for k, _, _ in msgs.key_stream()})[::7]:
        topic, key = full.split("#", 1)
        expected = ref_query(got, 100, 400, full)
        assert svc.query(topic, key) == expected
        really = [p for k, p, _ in reversed(msgs.key_stream()) if k == full]
        assert [p for p in expected if p in really] == really[: len([p for p in expected if p in really])]
    svc.close()


def test_queries_are_exact_across_files_with_hash_collisions(tmp_path: Path) -> None:
    """ "Aa" and "BB" have the same Java hash: the index returns both messages, key_matches keeps
    the right one; keys sharing a slot (hash % 100) are told apart by hash."""
    assert ref_key_hash("T#Aa") == ref_key_hash("T#BB")
    names = ["Aa", "BB", "AaAa", "BBBB", "AaBB", "other"]
    same_slot = [
        k for k in (f"s{i}" for i in range(2000)) if ref_key_hash(f"T#{k}") % 100 == ref_key_hash("T#Aa") % 100
    ][:5]
    names += same_slot
    n = 1500
    rng = np.random.default_rng(9)
    pick = [names[int(i)] for i in rng.integers(0, len(names), n)]
    phy = np.arange(n, dtype=np.int64) * 100 + 7
    ts = T0 + np.arange(n, dtype=np.int64) * 1000
    svc = open_service(tmp_path)
    svc.build(pa.array(["T"] * n), phy, ts, None, pa.array(pick))
    assert len(svc.files()) == 4
    for name in names:
        exact = [int(phy[i]) for i in reversed(range(n)) if pick[i] == name]
        got = svc.query("T", name, max_count=10**6)  # capped at max_msgs_num_batch
        assert len(got) == 64 or len(exact) < 64
        if name in ("Aa", "BB"):
            both = [int(phy[i]) for i in reversed(range(n)) if pick[i] in ("Aa", "BB")]
            assert got == both[:64]
        elif name in ("AaAa", "BBBB", "AaBB"):  # all three collide: "Aa"*2 == "BB"*2 == "AaBB"
            trio = [int(phy[i]) for i in reversed(range(n)) if pick[i] in ("AaAa", "BBBB", "AaBB")]
            assert got == trio[:64]
        else:
            assert got == exact[:64]
        # the caller's check against the real keys removes the collisions
        table = pa.table(
            {
                "topic": ["T"] * len(got),
                "keys": [[pick[(p - 7) // 100]] for p in got],
                "properties": pa.array([[] for _ in got], pa.map_(pa.string(), pa.string())),
                "commitLogOffset": got,
            }
        )
        assert matching_messages(table, "T", name).column("commitLogOffset").to_pylist() == [
            p for p in got if pick[(p - 7) // 100] == name
        ]
    svc.close()


def test_query_walks_no_further_than_max_count_and_filters_time(tmp_path: Path) -> None:
    n = 1200
    phy = np.arange(n, dtype=np.int64) * 10
    ts = T0 + np.arange(n, dtype=np.int64) * 1000  # one message a second: diffs are exact
    svc = open_service(tmp_path)
    svc.build(pa.array(["T"] * n), phy, ts, None, pa.array(["k"] * n))
    assert svc.query("T", "k", max_count=5) == [11990, 11980, 11970, 11960, 11950]
    # [begin, end] inclusive, across the file boundary at key 399
    got = svc.query("T", "k", max_count=64, begin_ms=int(ts[390]), end_ms=int(ts[410]))
    assert got == [int(p) for p in phy[390:411][::-1]]
    # a file wholly before the range is not searched; the walk stops at the first file that begins before it
    assert svc.query("T", "k", begin_ms=int(ts[1199]) + 1) == []
    assert svc.query("T", "k", end_ms=T0 - 1) == []
    assert svc.query("T", "k", begin_ms=int(ts[5]), end_ms=int(ts[7])) == [70, 60, 50]
    assert svc.query("T", "nope") == [] and svc.query("U", "k") == []
    svc.close()


def test_query_arguments_are_checked(tmp_path: Path) -> None:
    svc = open_service(tmp_path)
    with pytest.raises(InvalidArgumentError, match="max_count"):
        svc.query("T", "k", max_count=0)
    with pytest.raises(InvalidArgumentError, match="max_count"):
        svc.query("T", "k", max_count=1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="key"):
        svc.query("T", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="end_ms"):
        svc.query("T", "k", end_ms=1 << 63)
    with pytest.raises(InvalidArgumentError, match="topic"):
        svc.query(b"T", "k")  # type: ignore[arg-type]
    assert svc.query("../x", "k") == []  # any string: the index makes no path of it
    with pytest.raises(InvalidArgumentError, match="strictly increasing"):
        svc.build(pa.array(["T", "T"]), np.array([5, 5]), np.array([1, 2]), pa.array(["a", "b"]), None)
    with pytest.raises(InvalidArgumentError, match="store_timestamps"):
        svc.build(pa.array(["T", "T"]), np.array([5, 6]), np.array([1]), pa.array(["a", "b"]), None)
    assert svc.files() == []  # nothing created by refused input
    svc.close()


# --------------------------------------------------------------------------- idempotence


def test_dispatching_the_same_batches_again_adds_nothing(tmp_path: Path) -> None:
    msgs = Msgs(900, seed=5)
    svc = open_service(tmp_path)
    first = build_in_batches(svc, msgs, [450])
    before = file_bytes(svc)
    assert svc.build(*msgs.cols()) == 0
    assert svc.build(*msgs.cols(100, 700)) == 0
    assert svc.build(*msgs.cols(899)) == 0
    assert file_bytes(svc) == before
    # a re-dispatch overlapping new records adds only the new ones
    more = msgs.then(Msgs(100, seed=6))
    assert svc.build(*more.cols(850)) == len(more.key_stream()) - first
    assert file_bytes(svc) == [bytes(f.buf) for f in more.reference().files]
    svc.close()


def test_a_message_cut_by_a_full_file_gets_exactly_its_missing_keys(tmp_path: Path) -> None:
    """Keys of one message split over two files; the writer killed before the second file
    existed (simulated by removing it): dispatching again adds only the missing keys."""
    n = 199
    topics = pa.array(["T"] * (n + 1))
    phy = np.arange(n + 1, dtype=np.int64) * 100
    ts = T0 + np.arange(n + 1, dtype=np.int64)
    uniq = pa.array([f"U{i}" for i in range(n + 1)])
    keys = pa.array([f"a{i}" for i in range(n)] + ["x y z"])  # message 199: keys 399..402
    clean = open_service(tmp_path / "clean")
    clean.build(topics, phy, ts, uniq, keys)
    expected = file_bytes(clean)
    clean.close()
    svc = open_service(tmp_path / "cut")
    svc.build(topics, phy, ts, uniq, keys)
    assert [f.header().index_count for f in svc.files()] == [400, 4]
    svc.files()[1].path.unlink()
    svc.close()
    svc = open_service(tmp_path / "cut")
    assert svc.build(topics, phy, ts, uniq, keys) == 3  # x, y, z; not U199 again
    assert file_bytes(svc) == expected
    assert svc.query("T", "U199") == [19900] and svc.query("T", "z") == [19900]
    svc.close()


def test_rocketmq_would_index_the_last_message_twice_here_it_does_not(tmp_path: Path) -> None:
    """RocketMQ skips only offsets below endPhyOffset; the message at endPhyOffset dispatched
    again would get its keys twice. Here: once."""
    svc = open_service(tmp_path)
    cols = (pa.array(["T"]), np.array([500]), np.array([T0]), pa.array(["U"]), pa.array(["k1 k2"]))
    assert svc.build(*cols) == 3
    assert svc.build(*cols) == 0
    assert svc.files()[0].header().index_count == 4
    assert svc.query("T", "k2") == [500]
    svc.close()


# --------------------------------------------------------------------------- crashes


class Killed(BaseException):
    pass


def kill_before_header(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next header write of any IndexFile die like a killed process (nothing after it runs)."""
    real = IndexFile._pwrite

    def dying(self: IndexFile, data: object, offset: int) -> None:
        if offset == 0:
            monkeypatch.setattr(IndexFile, "_pwrite", real)
            raise Killed
        real(self, data, offset)  # type: ignore[arg-type]

    monkeypatch.setattr(IndexFile, "_pwrite", dying)


def test_writer_killed_mid_batch_loses_nothing_and_duplicates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    msgs = Msgs(700, seed=11, distinct=20)
    clean = open_service(tmp_path / "clean")
    clean.build(*msgs.cols())
    expected = file_bytes(clean)
    clean.close()

    svc = open_service(tmp_path / "s")
    svc.build(*msgs.cols(0, 120))
    published = file_bytes(svc)[0][:40]
    kill_before_header(monkeypatch)
    with pytest.raises(Killed):
        svc.build(*msgs.cols(120, 200))  # entries and slots written, header not
    f = svc.files()[0]
    assert f.intent() is not None and f.path.read_bytes()[:40] == published
    assert (f.slots() >= f.header().index_count).any()  # slots point at unpublished entries

    # a reader meanwhile sees exactly the published keys, none lost behind the new slots
    reader = IndexService.open(tmp_path / "s", SMALL)
    stream = msgs.key_stream()
    upto = msgs.phy[119]
    for full in sorted({k for k, _, _ in stream}):
        topic, key = full.split("#", 1)
        want = [p for k, p, _ in reversed(stream) if k == full and p <= upto][:64]
        got = [p for p in reader.query(topic, key) if p <= upto]
        assert got == want, full
        assert all(p <= upto for p in reader.query(topic, key))
    reader.close()

    # the next writer (another process: a new service) repairs, and the batch dispatched again
    svc.close()
    svc = open_service(tmp_path / "s")
    svc.build(*msgs.cols(100, 700))
    assert svc.files()[0].intent() is None
    assert file_bytes(svc) == expected
    svc.close()


def test_killed_batch_replaced_by_other_records_loses_no_published_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The killed writer's batch never comes back (recovery cut its records; other records take
    their offsets): the slots it moved must still lead to every published key, not into the
    chains of the entries that now occupy its places."""
    first = Msgs(150, seed=21, distinct=15)
    lost = Msgs(100, seed=22, distinct=15)
    other = Msgs(100, seed=23, distinct=15)
    for m in (lost, other):
        m.keys = [None if k is None else " ".join(f"new-{t}" for t in k.split()) for k in m.keys]
    svc = open_service(tmp_path)
    svc.build(*first.cols())
    kill_before_header(monkeypatch)
    with pytest.raises(Killed):
        svc.build(*first.then(lost).cols(150))
    svc.close()
    svc = open_service(tmp_path)
    final = first.then(other)
    svc.build(*final.cols(150))
    stream = final.key_stream()
    files = [bytes(f.buf) for f in final.reference().files]
    assert file_bytes(svc) == files
    for full in sorted({k for k, _, _ in stream}):
        topic, key = full.split("#", 1)
        assert svc.query(topic, key) == ref_query(files, 100, 400, full)
    svc.close()


def test_truncate_removes_entries_at_and_past_the_commitlog_cut(tmp_path: Path) -> None:
    msgs = Msgs(1100, seed=12)
    clean = open_service(tmp_path / "clean")
    clean.build(*msgs.cols())
    expected = file_bytes(clean)
    clean.close()
    svc = open_service(tmp_path / "s")
    svc.build(*msgs.cols())
    nfiles = len(svc.files())
    cut_at = int(msgs.phy[500])
    removed = svc.truncate(cut_at)
    stream = msgs.key_stream()
    assert removed == sum(1 for _, p, _ in stream if p >= cut_at)
    assert len(svc.files()) < nfiles
    last = svc.files()[-1].header()
    assert last.end_phy_offset == int(msgs.phy[499])
    prefix = RefIndex(100, 400)
    for k, p, t in stream:
        if p < cut_at:
            prefix.put(ref_key_hash(k), p, t)
    prefix_files = [bytes(f.buf) for f in prefix.files]
    for full in sorted({k for k, _, _ in stream})[::3]:
        topic, key = full.split("#", 1)
        got = svc.query(topic, key)
        assert all(p < cut_at for p in got)
        assert got == ref_query(prefix_files, 100, 400, full)
    # the slot count is exact, the reference reader's walk finds what remains
    raw = svc.files()[-1].path.read_bytes()
    hdr = struct.unpack_from(">qqqqii", raw, 0)
    slots = struct.unpack_from(">100i", raw, 40)
    assert hdr[4] == sum(1 for s in slots if s) and all(0 <= s < hdr[5] for s in slots)
    # new records at the cut (the commitlog reuses the offsets) are indexed, not skipped
    resume = svc.resume_offset()
    assert resume == int(msgs.phy[499])
    svc.build(*msgs.cols(499))
    assert file_bytes(svc) == expected
    svc.close()


def test_truncate_into_an_older_file_after_a_reopen(tmp_path: Path) -> None:
    """A cut that removes the last file(s) and falls in an older one, by a service just opened
    (its older files opened read-only): the older file becomes the last, writable, and is cut
    (it raised "open read-only" when the cut came from recovery after a repair)."""
    msgs = Msgs(1100, seed=12)
    svc = open_service(tmp_path)
    svc.build(*msgs.cols())
    nfiles = len(svc.files())
    svc.close()
    svc = open_service(tmp_path)
    cut_at = int(msgs.phy[500])
    assert svc.truncate(cut_at) == sum(1 for _, p, _ in msgs.key_stream() if p >= cut_at)
    assert len(svc.files()) < nfiles and svc.files()[-1].header().end_phy_offset == int(msgs.phy[499])
    svc.close()


def test_truncate_below_everything_removes_all_but_what_remains(tmp_path: Path) -> None:
    msgs = Msgs(600, seed=13)
    svc = open_service(tmp_path)
    svc.build(*msgs.cols())
    assert svc.truncate(0) == len(msgs.key_stream())
    assert svc.files() == [] and svc.resume_offset() == 0
    assert svc.build(*msgs.cols()) == len(msgs.key_stream())
    assert file_bytes(svc) == [bytes(f.buf) for f in msgs.reference().files]
    assert svc.truncate(10**12) == 0
    svc.close()


def test_flush_returns_the_newest_full_files_end_and_drop_after_uses_it(tmp_path: Path) -> None:
    """RocketMQ's indexMsgTimestamp: the endTimestamp of the newest full index file flushed. After
    an abnormal exit the files it does not cover go, and the records from resume_offset() on
    rebuild them."""
    msgs = Msgs(1000, seed=14)
    svc = open_service(tmp_path)
    svc.build(*msgs.cols(0, 100))
    assert svc.flush() == 0  # no full file yet
    svc.build(*msgs.cols(100))
    files = svc.files()
    full = [f for f in files if f.is_full()]
    assert len(full) >= 2 and not files[-1].is_full()
    ts = svc.flush()
    full_end = full[-1].header()
    assert ts == full_end.end_timestamp
    expected = file_bytes(svc)
    svc.close()

    svc = open_service(tmp_path)
    assert svc.drop_after(ts) == [files[-1].path]
    resume = svc.resume_offset()
    assert resume == full_end.end_phy_offset
    again = msgs.phy >= resume
    svc.build(*msgs.cols(int(np.argmax(again))))
    assert file_bytes(svc) == expected
    paths = [f.path for f in svc.files()]
    assert svc.drop_after(0) == paths
    assert svc.files() == []
    svc.close()


def test_delete_below_removes_old_files_never_the_last(tmp_path: Path) -> None:
    msgs = Msgs(1500, seed=15)
    svc = open_service(tmp_path)
    svc.build(*msgs.cols())
    files = svc.files()
    assert len(files) >= 4
    ends = [f.header().end_phy_offset for f in files]
    assert svc.delete_below(ends[0]) == []
    assert svc.delete_below(ends[1] + 1) == [files[0].path, files[1].path]
    assert not files[0].path.exists() and files[2].path.exists()
    assert svc.delete_below(1 << 62) == [f.path for f in files[2:-1]]
    assert [f.path for f in svc.files()] == [files[-1].path]
    assert svc.query("T", "key1")  # the last file still answers
    svc.close()


# --------------------------------------------------------------------------- processes


def test_another_process_writes_and_a_reader_sees_it(tmp_path: Path) -> None:
    """The writer changes between processes (any process may dispatch): a child process
    continues the index; an open reader in this process sees its files and keys."""
    msgs = Msgs(800, seed=16)
    svc = open_service(tmp_path)
    svc.build(*msgs.cols(0, 300))
    reader = IndexService.open(tmp_path, SMALL)
    before = len(reader.files())
    np.savez(tmp_path / "m.npz", phy=msgs.phy, ts=msgs.ts)
    (tmp_path / "m.txt").write_text(
        "\n".join(
            f"{t}\t{u or ''}\t{k or ''}\t{int(u is None)}\t{int(k is None)}"
            for t, u, k in zip(msgs.topic, msgs.uniq, msgs.keys, strict=True)
        )
    )
    child = textwrap.dedent(f"""
        import numpy as np, pyarrow as pa
        from pathlib import Path
        from rmqlog.index import IndexService, IndexConfig
        d = np.load({str(tmp_path / "m.npz")!r})
        rows = [line.split("\\t") for line in Path({str(tmp_path / "m.txt")!r}).read_text().split("\\n")]
        svc = IndexService.open(Path({str(tmp_path)!r}), IndexConfig(100, 400), writable=True, now_ms=lambda:
            1_800_000_000_000)
        svc.build(pa.array([r[0] for r in rows]), d["phy"], d["ts"],
                  pa.array([None if r[3] == "1" else r[1] for r in rows], pa.string()),
                  pa.array([None if r[4] == "1" else r[2] for r in rows], pa.string()))
        svc.close()
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    subprocess.run([sys.executable, "-c", child], check=True, env=env, timeout=120)
    assert len(reader.files()) == before  # a snapshot until the next call
    stream = msgs.key_stream()
    for full in sorted({k for k, _, _ in stream})[::5]:
        topic, key = full.split("#", 1)
        assert reader.query(topic, key) == ref_query(file_bytes(reader), 100, 400, full)
    assert len(reader.files()) > before
    assert file_bytes(reader) == [bytes(f.buf) for f in msgs.reference().files]
    # this process's writer continues after the child: no duplicate, nothing lost
    assert svc.build(*msgs.cols()) == 0
    reader.close()
    svc.close()


# --------------------------------------------------------------------------- the store's records


def test_store_records_are_indexed_and_found(tmp_path: Path) -> None:
    """From what the dispatcher has (decoded record columns and parsed properties) to the
    messages: UNIQ_KEY (the client msgId) and KEYS tokens; collisions removed by key_matches."""
    from rmqlog import MessageStore, StoreConfig
    from rmqlog.log.decode import read_columns
    from rmqlog.log.properties import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, ParsedProperties
    from rmqlog.schema import MESSAGE_SCHEMA

    ms = MessageStore.open(
        tmp_path / "store", StoreConfig(message_index_enable=False)
    )  # the index is built by hand here
    n = 120  # TopicA: 20 "Aa" and 20 "BB" messages, under the 64 a query returns
    keys = [["Aa"] if i % 3 == 0 else ["BB", f"order-{i}"] if i % 3 == 1 else [] for i in range(n)]
    put = ms.put_batch(
        pa.table(
            {
                "topic": ["TopicA"] * (n // 2) + ["TopicB"] * (n - n // 2),
                "body": [b"x%d" % i for i in range(n)],
                "keys": keys,
            }
        )
    )
    idx = IndexService.open(tmp_path / "store", IndexConfig(100, 400), writable=True)
    tail = ms.published_tail()
    for seg, scan in ms.commitlog.scan(0, tail):
        cols = read_columns(seg.buffer(), seg.start, scan.positions, with_body=False)
        props = ParsedProperties(cols.properties)
        idx.build(
            cols.topic,
            cols.offsets,
            cols.header["storeTimestamp"],
            props.column(PROPERTY_UNIQ_KEY),
            props.column(PROPERTY_KEYS),
            cols.header["sysFlag"],
        )

    def messages(offsets: list[int]) -> pa.Table:
        return pa.Table.from_pylist([ms.message_by_offset(o) for o in offsets], schema=MESSAGE_SCHEMA)

    offsets = idx.query("TopicA", "Aa")
    found = matching_messages(messages(offsets), "TopicA", "Aa")
    assert sorted(found.column("commitLogOffset").to_pylist()) == [
        put["commitLogOffset"][i].as_py() for i in range(0, n // 2, 3)
    ]
    assert len(offsets) > found.num_rows  # "BB" collides with "Aa": removed by the check
    row = 61
    uniq = dict(ms.message_by_offset(put["commitLogOffset"][row].as_py())["properties"])["UNIQ_KEY"]
    hit = idx.query("TopicB", uniq)
    assert matching_messages(messages(hit), "TopicB", uniq).column("commitLogOffset").to_pylist() == [
        put["commitLogOffset"][row].as_py()
    ]
    assert not key_matches(messages(hit), "TopicA", uniq).any()
    assert idx.query("TopicB", "order-61") == [put["commitLogOffset"][row].as_py()]
    idx.close()
    ms.close()


def test_index_files_carry_no_write_intent_after_a_batch(tmp_path: Path) -> None:
    """Entry 0 is RocketMQ's unused entry: our write intent lives there only during a batch."""
    svc = open_service(tmp_path)
    svc.build(*Msgs(200, seed=1).cols())
    f = svc.files()[0]
    raw = f.path.read_bytes()
    assert raw[40 + 400 : 40 + 400 + 20] == bytes(20)
    assert struct.pack(">i", INTENT_MAGIC) not in raw[440:460]
    svc.close()


def test_clock_gives_names_and_two_services_do_not_collide(tmp_path: Path) -> None:
    clock = Clock(T0)
    svc = open_service(tmp_path, IndexConfig(10, 3), now_ms=clock)
    svc.build(pa.array(["T"] * 6), np.arange(6), T0 + np.arange(6), pa.array(list("abcdef")), None)
    names = [f.name for f in svc.files()]
    assert len(names) == 3 and names == sorted(names)
    svc.close()
