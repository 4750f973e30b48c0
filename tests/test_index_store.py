"""The index files inside a store: built by the dispatcher, kept by recovery and retention,
queried through the facade, the CLI and (tests/spark) the data source.

Entries are counted with the independent reader of ``test_index_file`` (struct.unpack from
the format doc), never with the store's own code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import (
    FIXTURE_COMMITLOG,
    REPO_ROOT,
    SMALL_INDEX_ENTRIES,
    SMALL_INDEX_SLOTS,
    copy_file,
    kill_at_crash_point,
    small_store_config,
)
from test_index_file import RefIndex, ref_key_hash, ref_read

import refcodec as rc
import rmqlog
from rmqlog.admin.cli import main as cli

T = "IDX"


def entries(
    root: Path, slots: int = SMALL_INDEX_SLOTS, num: int = SMALL_INDEX_ENTRIES
) -> list[tuple[int, int, int, int]]:
    """Every entry of every index file of ``root`` (keyHash, phyOffset, timeDiff, prevIndex)."""
    out: list[tuple[int, int, int, int]] = []
    index = root / "index"
    for name in sorted(os.listdir(index)) if index.is_dir() else []:
        if len(name) == 17 and name.isdigit():
            out += ref_read((index / name).read_bytes(), slots, num)[2]
    return out


def put_keys(s: rmqlog.MessageStore, n: int, *, start: int = 0, topic: str = T) -> pa.Table:
    """``n`` messages with KEYS ``k<i> shared`` (two tokens) and the store's UNIQ_KEY."""
    return s.put_batch(
        pa.table(
            {
                "topic": [topic] * n,
                "body": [f"m{i}".encode() for i in range(start, start + n)],
                "queueId": [i % 2 for i in range(n)],
                "keys": [[f"k{i}", "shared"] for i in range(start, start + n)],
            }
        )
    )


@pytest.fixture
def ms(root: Path):
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        yield s


def test_dispatch_indexes_uniq_key_and_every_keys_token(ms: rmqlog.MessageStore, root: Path) -> None:
    res = put_keys(ms, 40)
    ms.dispatch()
    counts = Counter((h, phy) for h, phy, _, _ in entries(root))
    assert len(counts) == 40 * 3 and set(counts.values()) == {1}  # UNIQ_KEY + 2 tokens each, once
    offsets = res.column("commitLogOffset").to_pylist()
    assert counts[(ref_key_hash(f"{T}#k7"), offsets[7])] == 1
    got = ms.query_by_key(T, "k7")
    assert got.column("body").to_pylist() == [b"m7"] and got.column("commitLogOffset").to_pylist() == [offsets[7]]
    shared = ms.query_by_key(T, "shared", max_count=100)
    assert shared.column("commitLogOffset").to_pylist() == offsets  # oldest first, capped at 64 by default config
    ms.dispatch()  # nothing new: nothing added
    assert len(entries(root)) == 120


def test_query_caps_at_max_count_and_max_msgs_num_batch(ms: rmqlog.MessageStore) -> None:
    put_keys(ms, 80)
    ms.dispatch()
    assert ms.query_by_key(T, "shared", max_count=5).num_rows == 5
    assert ms.query_by_key(T, "shared", max_count=1000).num_rows == 64  # RocketMQ's maxMsgsNumBatch
    newest = ms.query_by_key(T, "shared", max_count=3).column("body").to_pylist()
    assert newest == [b"m77", b"m78", b"m79"]  # the newest entries, oldest first


def test_hash_collisions_are_removed(ms: rmqlog.MessageStore, root: Path) -> None:
    # "Aa" and "BB" have the same Java hashCode, so "IDX#Aa" and "IDX#BB" share every slot
    assert ref_key_hash(f"{T}#Aa") == ref_key_hash(f"{T}#BB")
    ms.put_batch(
        pa.table({"topic": [T, T, "OTHER"], "body": [b"aa", b"bb", b"other-aa"], "keys": [["Aa"], ["BB"], ["Aa"]]})
    )
    ms.dispatch()
    assert ms.query_by_key(T, "Aa").column("body").to_pylist() == [b"aa"]
    assert ms.query_by_key(T, "BB").column("body").to_pylist() == [b"bb"]
    assert ms.query_by_key("OTHER", "Aa").column("body").to_pylist() == [b"other-aa"]
    assert ms.query_by_key(T, "nothing").num_rows == 0


def test_client_msgid_by_unique_key_and_message_by_id(ms: rmqlog.MessageStore) -> None:
    put_keys(ms, 10)
    ms.dispatch()
    row = ms.read_queue(T, 1, 0, 10).to_pylist()[2]
    uniq = dict(row["properties"])["UNIQ_KEY"]
    one = ms.query_by_unique_key(T, uniq)
    assert one.num_rows == 1 and one.column("body").to_pylist() == [row["body"]]
    assert ms.message_by_id(uniq)["body"] == row["body"]  # a client msgId, through the index
    assert ms.message_by_id(row["msgId"])["body"] == row["body"]  # an offset msgId, by offset
    assert ms.message_by_id("0" * 32) is None
    assert ms.query_by_unique_key("OTHER", uniq).num_rows == 0


def test_time_range(ms: rmqlog.MessageStore) -> None:
    res = put_keys(ms, 5)
    ms.dispatch()
    stored = res.column("storeTimestamp")[0].value // 1000
    assert ms.query_by_key(T, "k1", begin_ms=stored - 5_000, end_ms=stored + 5_000).num_rows == 1
    assert ms.query_by_key(T, "k1", begin_ms=stored + 60_000).num_rows == 0
    assert ms.query_by_key(T, "k1", end_ms=stored - 60_000).num_rows == 0


def test_bad_arguments_are_typed(ms: rmqlog.MessageStore) -> None:
    for call in (
        lambda: ms.query_by_key(T, ""),
        lambda: ms.query_by_key(T, 5),
        lambda: ms.query_by_unique_key(T, None),
        lambda: ms.query_by_key(T, "k", max_count=0),
        lambda: ms.query_by_key(T, "k", begin_ms="x"),
    ):
        with pytest.raises(rmqlog.InvalidArgumentError):
            call()
    with pytest.raises(rmqlog.InvalidTopicError):
        ms.query_by_key("bad/topic", "k")


def test_index_disabled_writes_no_index_and_queries_say_so(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config(message_index_enable=False)) as s:
        put_keys(s, 5)
        s.dispatch()
        with pytest.raises(rmqlog.IndexDisabledError):
            s.query_by_key(T, "k1")
        assert s.message_by_id("0" * 32) is None
    assert not (root / "index").exists()


def test_index_turned_on_later_indexes_the_whole_log_at_open(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config(message_index_enable=False)) as s:
        put_keys(s, 30)
        s.dispatch()
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.recovery is not None and s.recovery.reindexed == 30
        assert s.query_by_key(T, "k29").column("body").to_pylist() == [b"m29"]
    assert len(entries(root)) == 90


EXIT_CHILD = r"""
import os, sys, pyarrow as pa, rmqlog
root, slots, num, flushed, more = sys.argv[1], *map(int, sys.argv[2:6])
cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=64 << 10, mapped_file_size_consume_queue=600,
                        max_hash_slot_num=slots, max_index_num=num)
s = rmqlog.MessageStore.open(root, cfg)
def put(n, start):
    s.put_batch(pa.table({"topic": ["IDX"] * n, "body": [f"m{i}".encode() for i in range(start, start + n)],
                          "keys": [[f"k{i}", "shared"] for i in range(start, start + n)]}))
put(flushed, 0)
s.dispatch()
s.flush()  # the checkpoint's index time: the full files synced so far
if more:
    put(more, flushed)
    s.dispatch()
os._exit(0)  # no close: the next open takes the abnormal path
"""


def exit_without_close(root: Path, slots: int, num: int, flushed: int, more: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    subprocess.run(
        [sys.executable, "-c", EXIT_CHILD, str(root), str(slots), str(num), str(flushed), str(more)],
        env=env,
        check=True,
        timeout=120,
    )


def test_a_lost_index_is_rebuilt_at_open_after_an_abnormal_exit(root: Path) -> None:
    exit_without_close(root, 100, 400, 50, 0)
    for f in (root / "index").iterdir():
        f.unlink()
    cfg = small_store_config(max_hash_slot_num=100, max_index_num=400)
    with rmqlog.MessageStore.open(root, cfg) as s:
        assert s.recovery is not None and s.recovery.abnormal and s.recovery.reindexed == 50
        assert s.query_by_key(T, "k3").num_rows == 1
    keyed = Counter((h, p) for h, p, _, _ in entries(root, 100, 400))
    assert len(keyed) == 150 and set(keyed.values()) == {1}


def test_files_the_checkpoint_does_not_cover_are_dropped_then_rebuilt(root: Path) -> None:
    exit_without_close(root, 100, 40, 60, 20)  # 39 keys per file: many files, the last ones unflushed
    cfg = small_store_config(max_hash_slot_num=100, max_index_num=40)
    with rmqlog.MessageStore.open(root, cfg) as s:
        r = s.recovery
        assert r is not None and r.abnormal and r.index_files_dropped
        for i in (0, 59, 79):
            assert s.query_by_key(T, f"k{i}").column("body").to_pylist() == [f"m{i}".encode()]
    keyed = Counter((h, p) for h, p, _, _ in entries(root, 100, 40))
    assert len(keyed) == 240 and set(keyed.values()) == {1}


KILL_CHILD = r"""
import sys, pyarrow as pa, rmqlog
root = sys.argv[1]
cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=64 << 10, mapped_file_size_consume_queue=600,
                        max_hash_slot_num=50, max_index_num=60)
s = rmqlog.MessageStore.open(root, cfg)
for b in range(30):
    s.put_batch(pa.table({"topic": ["K"] * 20, "body": [b"x" * 10] * 20,
                          "keys": [[f"b{b}r{r}"] for r in range(20)]}))
print("put", flush=True)
s.dispatch()  # 1,200 keys (KEYS and UNIQ_KEY) into files of 59: 21 files, two consume-queue runs
s.close()
"""

#: (crash point, which time it is reached): the dispatch of KILL_CHILD killed at each step of
#: an index file's write (entries, slots, header), at a file's creation (first, a middle one,
#: the last), between a run's units and its index entries, and before dispatch.state moves
DISPATCH_KILLS = [
    ("index.entries", 1),
    ("index.entries", 11),
    ("index.slots", 2),
    ("index.slots", 22),
    ("index.created", 1),
    ("index.created", 10),
    ("index.created", 21),
    ("dispatch.units", 1),
    ("dispatch.units", 2),
    ("dispatch.position", 1),
]


@pytest.mark.slow
@pytest.mark.parametrize(("point", "n"), DISPATCH_KILLS)
def test_kill_during_dispatch_leaves_every_key_indexed_once(tmp_path: Path, point: str, n: int) -> None:
    """A dispatcher killed inside the dispatch (files rolling every 59 keys), at the crash
    point named: after the next open every key is indexed exactly once."""
    cfg = rmqlog.StoreConfig(
        mapped_file_size_commit_log=64 << 10, mapped_file_size_consume_queue=600, max_hash_slot_num=50, max_index_num=60
    )
    root = tmp_path / "s"
    assert kill_at_crash_point(["-c", KILL_CHILD, str(root)], point, n, tmp=tmp_path) == ["put"]
    with rmqlog.MessageStore.open(root, cfg) as s:
        assert s.recovery is not None and s.recovery.abnormal
        for b in (0, 29):
            assert s.query_by_key("K", f"b{b}r5").num_rows == 1
    keyed = Counter((h, p) for h, p, _, _ in entries(root, 50, 60))
    assert len(keyed) == 30 * 20 * 2 and set(keyed.values()) == {1}


def test_a_rocketmq_written_store_with_index_files_is_queried(tmp_path: Path) -> None:
    """The fixture commitlog (written by RocketMQ) plus index files made by the independent
    writer from the format doc: the store opens, adds no entry, and finds every key."""
    root = tmp_path / "rmq"
    copy_file(FIXTURE_COMMITLOG, root / "commitlog" / FIXTURE_COMMITLOG.name)
    records = rc.walk_commitlog(str(FIXTURE_COMMITLOG.parent))
    assert len(records) == 47 and all("KEYS" in r.properties for r in records)
    ref = RefIndex(64, 30)  # 29 keys per file: two files
    for r in records:
        ref.put(ref_key_hash(f"{r.topic}#{r.properties['KEYS']}"), r.physical_offset, r.store_timestamp)
    (root / "index").mkdir()
    for i, f in enumerate(ref.files):
        (root / "index" / f"2019030100000000{i}").write_bytes(bytes(f.buf))
    cfg = rmqlog.StoreConfig(max_hash_slot_num=64, max_index_num=30)
    with rmqlog.MessageStore.open(root, cfg) as s:
        by_key: dict[str, list[int]] = {}
        for r in records:
            by_key.setdefault(r.properties["KEYS"], []).append(r.physical_offset)
        for key, offsets in by_key.items():
            got = s.query_by_key("abc", key)
            assert got.column("commitLogOffset").to_pylist() == offsets
            assert got.column("body").to_pylist() == [r.body for r in records if r.properties["KEYS"] == key]
    assert len(entries(root, 64, 30)) == 47  # nothing indexed twice


def test_retention_deletes_index_files_below_the_log_start(root: Path) -> None:
    cfg = small_store_config(max_hash_slot_num=100, max_index_num=40, file_reserved_time=0)
    with rmqlog.MessageStore.open(root, cfg) as s:
        for b in range(6):
            put_keys(s, 100, start=b * 100)
        s.dispatch()
        s.flush()  # only flushed segments are deleted
        before = sorted(os.listdir(root / "index"))
        report = s.clean_expired(force=True)
        assert report.segments and report.index_files
        after = sorted(os.listdir(root / "index"))
        assert after and set(after) < set(before)
        assert s.query_by_key(T, "k599").num_rows == 1
        assert s.query_by_key(T, "k0").num_rows == 0  # its record is gone


def test_cli_query(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        put_keys(s, 5)
        s.dispatch()
        uniq = dict(s.read_queue(T, 0, 0, 1).to_pylist()[0]["properties"])["UNIQ_KEY"]
    capsys.readouterr()
    assert cli(["query", str(root), T, "--key", "k3"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["body"] for r in rows] == ["m3"]
    assert cli(["query", str(root), T, "--id", uniq]) == 0
    assert [json.loads(line)["body"] for line in capsys.readouterr().out.splitlines()] == ["m0"]
    assert cli(["get", str(root), "--id", uniq]) == 0
    assert json.loads(capsys.readouterr().out)["body"] == "m0"
    assert cli(["query", str(root), T, "--key", "nope"]) == 1
    assert cli(["query", str(root), T, "--id", "xyz"]) == 2
    err = capsys.readouterr().err  # (what it is not: either kind of msgId, named)
    assert "'xyz'" in err and "offset msgId" in err and "client msgId" in err
    assert cli(["query", str(root), T, "--key", "k1", "--begin", "2999-01-01T00:00"]) == 1
    with pytest.raises(SystemExit):
        cli(["query", str(root), T, "--key", "k1", "--begin", "yesterday"])
    assert "not a time" in capsys.readouterr().err


def test_the_stores_index_geometry_wins_over_the_configured_one(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config(max_hash_slot_num=64, max_index_num=100)) as s:
        put_keys(s, 5)
        s.dispatch()
    doc = json.loads((root / "config" / "indexFile.json").read_text())
    assert (doc["maxHashSlotNum"], doc["maxIndexNum"]) == (64, 100) and set(doc) == {
        "maxHashSlotNum",
        "maxIndexNum",
        "crc",
    }
    with rmqlog.MessageStore.open(root) as s:  # the default config: 5,000,000 slots
        assert s.query_by_key(T, "k4").num_rows == 1
    (root / "config" / "indexFile.json").write_text("{not json")
    # unreadable: the first opener sets it aside and rebuilds the index with the configured
    # geometry (the index is derived from the log); never sized from what it could not read
    with rmqlog.MessageStore.open(root, small_store_config(max_hash_slot_num=32, max_index_num=50)) as s:
        assert s.query_by_key(T, "k4").num_rows == 1
    doc = json.loads((root / "config" / "indexFile.json").read_text())
    assert (doc["maxHashSlotNum"], doc["maxIndexNum"]) == (32, 50)


def test_time_range_query_across_topics(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clock = rmqlog.ManualClock()
    with rmqlog.MessageStore.open(root, small_store_config(), clock=clock) as ms:
        first = put_keys(ms, 6, topic="A")
        clock.advance(10)  # B stored 10 ms after A
        second = put_keys(ms, 4, start=6, topic="B")
        ms.dispatch()
        t_a = first.column("storeTimestamp")[0].value // 1000
        t_b = second.column("storeTimestamp")[0].value // 1000
        everything = ms.query_by_time(0)
        assert everything.num_rows == 10
        assert everything.column("storeTimestamp").to_pylist() == sorted(
            everything.column("storeTimestamp").to_pylist()
        )
        assert ms.query_by_time(t_b).column("topic").to_pylist() == ["B"] * 4
        assert ms.query_by_time(0, t_a, topics=["A", "B"]).column("topic").to_pylist() == ["A"] * 6
        assert ms.query_by_time(0, max_count=3).num_rows == 3
        assert ms.query_by_time(t_b + 60_000).num_rows == 0
        with pytest.raises(rmqlog.InvalidArgumentError):
            ms.query_by_time(0, max_count=0)
        with pytest.raises(rmqlog.InvalidTopicError):
            ms.query_by_time(0, topics=["bad/topic"])
    capsys.readouterr()
    assert cli(["query", str(root), "*", "--begin", str(t_b), "--json"]) == 0
    assert [m["topic"] for m in json.loads(capsys.readouterr().out)["messages"]] == ["B"] * 4
    assert cli(["query", str(root), "A", "--max", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert cli(["query", str(root), "*", "--key", "k1"]) == 2
    assert "names one topic" in capsys.readouterr().err


def test_a_creator_killed_mid_file_leaves_no_short_index_file(root: Path) -> None:
    """A file is made whole under a temporary name, then linked into place: a leftover of a
    killed creator is ignored by readers and replaced by the next creator."""
    cfg = small_store_config(max_hash_slot_num=10, max_index_num=5)  # 4 keys per file
    with rmqlog.MessageStore.open(root, cfg) as s:
        put_keys(s, 1)
        s.dispatch()
        names = sorted(os.listdir(root / "index"))
        (root / "index" / "20991231235959999.creating").write_bytes(b"")  # a killed creator's
        put_keys(s, 4, start=1)
        s.dispatch()
        assert s.query_by_key(T, "k4").num_rows == 1
        assert not [n for n in os.listdir(root / "index") if n.endswith(".creating")]  # cleared by the next creator
    with rmqlog.MessageStore.open(root, cfg) as s:
        assert s.query_by_key(T, "k0").num_rows == 1 and len(os.listdir(root / "index")) > len(names)


@pytest.mark.parametrize(
    "shape", ["plain", "keys", "keys-and-properties", "several-tables", "keys-in-properties", "tags-in-properties"]
)
def test_an_index_fed_from_the_appended_batch_is_the_one_the_log_gives(root: Path, shape: str) -> None:
    """A put's dispatch feeds the index from the batch's own fields (its topics, the ids its
    encoding made, its keys column) instead of reading the records back: the entries must be
    exactly those a walk of the log makes (the index dropped and rebuilt from the log at open),
    for every shape of put, including those that fall back to reading (KEYS or TAGS in the
    properties map)."""
    cfg = small_store_config()
    n = 40
    props = pa.array(
        [
            [("p", str(i))]
            + ([("KEYS", f"pk{i}")] if shape == "keys-in-properties" else [])
            + ([("TAGS", "t")] if shape == "tags-in-properties" else [])
            for i in range(n)
        ],
        pa.map_(pa.string(), pa.string()),
    )
    table = pa.table({"topic": [T] * n, "body": [f"m{i}".encode() for i in range(n)]})
    if shape != "plain":
        table = table.append_column("queueId", pa.array([i % 2 for i in range(n)], pa.int32()))
    if shape in ("keys", "keys-and-properties", "several-tables"):
        table = table.append_column("keys", pa.array([[f"k{i}", "shared"] for i in range(n)]))
    if shape in ("keys-and-properties", "keys-in-properties", "tags-in-properties"):
        table = table.append_column("properties", props)
    with rmqlog.MessageStore.open(root, cfg) as s:
        if shape not in ("keys-in-properties", "tags-in-properties"):  # fed from the batch: nothing read back

            def no_read_back(*a: object, **k: object) -> int:
                raise AssertionError("the dispatch read the records back")

            s.parts.dispatcher.dispatch = no_read_back  # type: ignore[method-assign]
        if shape == "several-tables":
            s.put_batches([table.slice(0, 15), table.slice(15, 20), table.slice(35)], dispatch=True)
        else:
            s.put_batch(table, dispatch=True)
        s.put_batch(table.slice(0, 3), dispatch=True)  # a second put after it: the chain goes on
        first = s.read_queue(T, 0, 0, 1)
        got = s.query_by_unique_key(T, dict(first["properties"][0].as_py())["UNIQ_KEY"])
        assert got.num_rows == 1 and got["body"][0].as_py() == first["body"][0].as_py()
        if shape in ("keys", "keys-and-properties", "several-tables"):
            assert s.query_by_key(T, "k7")["body"].to_pylist() == [b"m7"]
            assert s.query_by_key(T, "shared", max_count=1000).num_rows == n + 3
        if shape == "keys-in-properties":
            assert s.query_by_key(T, "pk7")["body"].to_pylist() == [b"m7"]
    fed = sorted(entries(root))
    for f in (root / "index").iterdir():
        f.unlink()
    (root / "abort").touch()  # the index files are gone: rebuilt from the log at open
    with rmqlog.MessageStore.open(root, cfg) as s:
        assert s.recovery is not None and s.recovery.reindexed == n + 3
    assert sorted(entries(root)) == fed and len(fed) >= n + 3
