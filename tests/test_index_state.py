"""The index's state files against the log (a file the log can rebuild is never trusted over it):
``config/indexFile.json`` is checked (CRC, ranges, the index files' size) before anything is
sized from it and a repair rebuilds the index from the log; an index file's header offsets
are checked against its entries and the log's end."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import SMALL_INDEX_ENTRIES, SMALL_INDEX_SLOTS, small_store_config

import rmqlog
from rmqlog.index.layout import file_size

T = "IDX"


def put_keys(s: rmqlog.MessageStore, n: int, start: int = 0) -> None:
    s.put_batch(
        pa.table(
            {
                "topic": [T] * n,
                "body": [b"m%d" % i for i in range(start, start + n)],
                "keys": [[f"k{i}"] for i in range(start, start + n)],
            }
        )
    )
    s.dispatch()


def found(s: rmqlog.MessageStore, *keys: str) -> list[int]:
    return [s.query_by_key(T, k).num_rows for k in keys]


def index_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "index").iterdir() if p.name.isdigit())


def geometry(root: Path) -> Path:
    return root / "config" / "indexFile.json"


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        json.dumps({"maxHashSlotNum": 1 << 40, "maxIndexNum": 100}).encode(),  # past Java's int
        json.dumps({"maxHashSlotNum": 64.5, "maxIndexNum": 100}).encode(),
        json.dumps({"maxHashSlotNum": True, "maxIndexNum": 100}).encode(),
        json.dumps({"maxHashSlotNum": 400_000_000, "maxIndexNum": 2}).encode(),  # 1.6 GB of slots; not the files' size
        json.dumps(
            {"maxHashSlotNum": SMALL_INDEX_SLOTS + 1, "maxIndexNum": SMALL_INDEX_ENTRIES}
        ).encode(),  # a flipped bit
        json.dumps({"maxHashSlotNum": SMALL_INDEX_SLOTS, "maxIndexNum": SMALL_INDEX_ENTRIES, "crc": 1}).encode(),
        b"[]",
    ],
)
@pytest.mark.parametrize("repair", [False, True], ids=["open", "repair"])
def test_a_bad_geometry_is_set_aside_and_the_index_rebuilt(root: Path, content: bytes, repair: bool) -> None:
    """``indexFile.json`` unreadable, past Java's int range, or absurd (a geometry the
    index files were not made with): nothing is sized from it. The index is derived, so
    rebuilding it loses nothing: the first opener (alone with the store), at a normal open as
    with ``repair=True``, sets it and the index files aside and rebuilds the index from the log.
    An opener that is not the first (the store held elsewhere) gets a typed error saying
    ``repair=True`` instead, and changes nothing."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        put_keys(s, 30)
        geometry(root).write_bytes(content)
        with pytest.raises(rmqlog.CorruptStoreError, match="repair=True") as err:
            rmqlog.MessageStore.open(root, small_store_config())
        assert err.value.path == str(geometry(root))
        assert geometry(root).read_bytes() == content
    with rmqlog.MessageStore.open(root, small_store_config(), repair=repair) as s:
        assert s.recovery is not None and any("indexFile.json set aside" in p for p in s.recovery.problems)
        assert found(s, "k0", "k17", "k29") == [1, 1, 1]
        put_keys(s, 5, start=30)
        assert found(s, "k33") == [1]
        assert s.verify().ok
    assert [p.stat().st_size for p in index_files(root)] == [file_size(SMALL_INDEX_SLOTS, SMALL_INDEX_ENTRIES)]
    assert any(p.name.endswith(".damaged") for p in (root / "index").iterdir())
    assert any(p.name.startswith("indexFile.json.damaged-") for p in (root / "config").iterdir())
    doc = json.loads(geometry(root).read_text())
    assert (doc["maxHashSlotNum"], doc["maxIndexNum"]) == (SMALL_INDEX_SLOTS, SMALL_INDEX_ENTRIES)


def test_an_older_geometry_file_without_crc_is_read(root: Path) -> None:
    """Files written before the CRC existed still open (checked against the index files)."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        put_keys(s, 3)
    geometry(root).write_text(json.dumps({"maxHashSlotNum": SMALL_INDEX_SLOTS, "maxIndexNum": SMALL_INDEX_ENTRIES}))
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert found(s, "k0", "k2") == [1, 1]


def _header(path: Path) -> list[int]:
    return list(struct.unpack(">qqqqii", path.read_bytes()[:40]))


def _set_header(path: Path, **fields: int) -> None:
    names = ["beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset", "hashSlotCount", "indexCount"]
    values = _header(path)
    for k, v in fields.items():
        values[names.index(k)] = v
    with open(path, "r+b") as f:
        f.write(struct.pack(">qqqqii", *values))


@pytest.mark.parametrize("end", [1 << 40, (1 << 62) + 5])
def test_an_end_offset_past_the_newest_entry_is_corrected(root: Path, end: int) -> None:
    """An index file's ``endPhyOffset`` damaged upwards (nothing checksums the header): the
    writer skipped every later key as already indexed, so messages put afterwards were never
    found by key. It is checked against the file's newest entry and corrected."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        put_keys(s, 10)
    [f] = index_files(root)
    _set_header(f, endPhyOffset=end)
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert found(s, "k0", "k9") == [1, 1]
        put_keys(s, 5, start=10)
        assert found(s, "k10", "k14") == [1, 1]
        assert _header(f)[3] < s.published_tail()


def test_an_empty_index_file_with_offsets_past_the_log_is_removed(root: Path) -> None:
    """An index file with no entry yet, whose header says it starts past the log's end: the
    keys of every message below that offset were skipped. It has nothing to lose: removed, and
    the index continues from the log."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("OTHER", b"no keys")  # (the index file is made by the first key)
        put_keys(s, 1)
    [f] = index_files(root)
    # as a file just created: no entries, the previous file's end, here damaged
    _set_header(f, indexCount=1, hashSlotCount=0, beginPhyOffset=1 << 40, endPhyOffset=1 << 40)
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        put_keys(s, 3, start=1)
        assert found(s, "k0", "k1", "k3") == [1, 1, 1]
