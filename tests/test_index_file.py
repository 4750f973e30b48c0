"""Index files: Java hashing, the byte layout (checked by an independent reader and writer written
here from the format doc and RocketMQ 4.9.8's IndexFile rules), rolling, damage.

The reference below shares no code with ``store/``: a per-character ``String.hashCode``, a
scalar ``putKey`` on a ``bytearray`` (RocketMQ's order of operations, one key at a time) and a
``struct`` reader with RocketMQ's ``selectPhyOffset`` walk. ``test_index_service.py`` imports it.
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from rmqlog.errors import DiskFullError, InvalidArgumentError, StoreError
from rmqlog.index import CorruptIndexError, IndexConfig, IndexService
from rmqlog.index.index_append import time_diffs
from rmqlog.index.index_keys import key_hash, message_keys
from rmqlog.index.java_hash import index_key_hash, java_hash_column
from rmqlog.index.layout import file_size

# --------------------------------------------------------------------------- the reference

INT_MIN = -(1 << 31)
INT_MAX = (1 << 31) - 1


def ref_java_hash(s: str) -> int:
    """Java ``String.hashCode``: ``h = 31*h + unit`` over UTF-16 code units, signed 32-bit."""
    raw = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(raw), 2):
        h = (31 * h + int.from_bytes(raw[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def ref_key_hash(key: str) -> int:
    """RocketMQ's ``indexKeyHashMethod``: ``Math.abs(hashCode)``, 0 when that stays negative."""
    h = ref_java_hash(key)
    a = abs(h)
    return 0 if a > INT_MAX else a  # Math.abs(Integer.MIN_VALUE) == Integer.MIN_VALUE < 0


class RefIndexFile:
    """A RocketMQ index file in a bytearray, written one key at a time (format doc, IndexFile.putKey).

    Header 40 B: long beginTimestamp, long endTimestamp, long beginPhyOffset, long
    endPhyOffset, int hashSlotCount, int indexCount. Slots of 4 B at 40. Entries of 20 B at
    40 + slots*4 + i*20: int keyHash, long phyOffset, int timeDiff, int prevIndex.
    """

    def __init__(
        self, slots: int, num: int, prev_end_phy: int = 0, prev_end_ts: int = 0, *, on_disk_count: int = 1
    ) -> None:
        self.slots, self.num = slots, num
        self.buf = bytearray(40 + slots * 4 + num * 20)
        # RocketMQ's in-memory header starts with indexCount 1; the new file's header holds
        # the previous file's end offset/time as begin and end when positive
        self.begin_ts = self.end_ts = prev_end_ts if prev_end_ts > 0 else 0
        self.begin_phy = self.end_phy = prev_end_phy if prev_end_phy > 0 else 0
        self.slot_count, self.count = 0, 1
        self._write_header(on_disk_count)

    def _write_header(self, count: int | None = None) -> None:
        struct.pack_into(
            ">qqqqii",
            self.buf,
            0,
            self.begin_ts,
            self.end_ts,
            self.begin_phy,
            self.end_phy,
            self.slot_count,
            self.count if count is None else count,
        )

    def full(self) -> bool:
        return self.count >= self.num

    def put_key(self, key_hash_: int, phy: int, ts: int) -> bool:
        if self.count >= self.num:
            return False
        slot_pos = key_hash_ % self.slots
        abs_slot = 40 + slot_pos * 4
        slot_value = struct.unpack_from(">i", self.buf, abs_slot)[0]
        if slot_value <= 0 or slot_value > self.count:
            slot_value = 0
        diff = ts - self.begin_ts
        diff = int(diff / 1000) if diff >= 0 else -((-diff) // 1000)  # Java long division
        if self.begin_ts <= 0:
            diff = 0
        elif diff > INT_MAX:
            diff = INT_MAX
        elif diff < 0:
            diff = 0
        at = 40 + self.slots * 4 + self.count * 20
        struct.pack_into(">iqii", self.buf, at, key_hash_, phy, diff, slot_value)
        struct.pack_into(">i", self.buf, abs_slot, self.count)
        if self.count <= 1:
            self.begin_phy, self.begin_ts = phy, ts
        if slot_value == 0:
            self.slot_count += 1
        self.count += 1
        self.end_phy, self.end_ts = phy, ts
        self._write_header()
        return True


class RefIndex:
    """Files of :class:`RefIndexFile`, rolled when full (IndexService.putKey / getAndCreateLastIndexFile)."""

    def __init__(self, slots: int, num: int) -> None:
        self.slots, self.num = slots, num
        self.files: list[RefIndexFile] = []

    def put(self, key_hash_: int, phy: int, ts: int) -> None:
        if not self.files or self.files[-1].full():
            prev = self.files[-1] if self.files else None
            self.files.append(
                RefIndexFile(self.slots, self.num, prev.end_phy if prev else 0, prev.end_ts if prev else 0)
            )
        assert self.files[-1].put_key(key_hash_, phy, ts)


def ref_read(buf: bytes, slots: int, num: int) -> tuple[tuple[int, ...], list[int], list[tuple[int, int, int, int]]]:
    """Independent reader: (header fields, slot values, entries 1..indexCount-1)."""
    assert len(buf) == 40 + slots * 4 + num * 20
    header = struct.unpack_from(">qqqqii", buf, 0)
    slot_values = list(struct.unpack_from(f">{slots}i", buf, 40))
    count = max(header[5], 1)
    base = 40 + slots * 4
    entries = [struct.unpack_from(">iqii", buf, base + i * 20) for i in range(1, count)]
    return header, slot_values, entries


def ref_select(buf: bytes, slots: int, num: int, kh: int, max_num: int, begin: int, end: int, out: list[int]) -> None:
    """RocketMQ's ``IndexFile.selectPhyOffset`` over raw bytes."""
    b_ts, _e_ts, _b, _e, _sc, count = struct.unpack_from(">qqqqii", buf, 0)
    slot_value = struct.unpack_from(">i", buf, 40 + (kh % slots) * 4)[0]
    if slot_value <= 0 or slot_value > count or count <= 1:
        return
    cur = slot_value
    while len(out) < max_num:
        h, phy, diff, prev = struct.unpack_from(">iqii", buf, 40 + slots * 4 + cur * 20)
        if diff < 0:
            break
        t = b_ts + diff * 1000
        if h == kh and begin <= t <= end:
            out.append(phy)
        if prev <= 0 or prev > count or prev == cur or t < begin:
            break
        cur = prev


def ref_query(
    files: list[bytes], slots: int, num: int, key: str, max_num: int = 64, begin: int = 0, end: int = (1 << 63) - 1
) -> list[int]:
    """RocketMQ's ``IndexService.queryOffset`` over the files' bytes (oldest first)."""
    kh = ref_key_hash(key)
    out: list[int] = []
    for buf in reversed(files):
        b_ts, e_ts = struct.unpack_from(">qq", buf, 0)
        matched = (begin < b_ts and end > e_ts) or (b_ts <= begin <= e_ts) or (b_ts <= end <= e_ts)
        if matched:
            ref_select(buf, slots, num, kh, max_num, begin, end, out)
        if b_ts < begin or len(out) >= max_num:
            break
    return out


def file_bytes(svc: IndexService) -> list[bytes]:
    return [f.path.read_bytes() for f in svc.files()]


def min_value_key(topic: str) -> str:
    """A key whose ``topic#key`` has ``hashCode() == Integer.MIN_VALUE`` (7 chars in 'A'..'_').

    hash(p + k) = hash(p)*31^7 + sum(k_i * 31^(6-i)); with k_i = 0x41 + d_i the d_i are the
    base-31 digits of what remains (31^7 > 2^32, so 7 digits always suffice)."""
    p = ref_java_hash(topic + "#") & 0xFFFFFFFF
    target = (INT_MIN - p * 31**7 - sum(0x41 * 31 ** (6 - i) for i in range(7))) % (1 << 32)
    digits = []
    for _ in range(7):
        target, d = divmod(target, 31)
        digits.append(d)
    key = "".join(chr(0x41 + d) for d in reversed(digits))
    assert ref_java_hash(f"{topic}#{key}") == INT_MIN
    return key


SMALL = IndexConfig(max_hash_slot_num=100, max_index_num=400)


class Clock:
    def __init__(self, ms: int = 1_700_000_000_000) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def open_service(root: Path, config: IndexConfig = SMALL, **kw: object) -> IndexService:
    kw.setdefault("now_ms", Clock())
    return IndexService.open(root, config, writable=True, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- hashing

HASH_SAMPLES = [
    "",
    "a",
    "TAG1",
    "TagA",
    "Aa",
    "BB",
    "polygenelubricants",
    "héllo wörld",
    "日本語のキー",
    "😀",
    "a😀b𝄞c",
    "\uffff\u0800\u07ff",
    "x" * 31,
    "y" * 32,
    "z" * 33,
    "k" * 200,
    "ü" * 40,
    "😀" * 20,
    "TopicTest#ORDER-1",
]


def test_java_hash_matches_the_reference_on_mixed_rows() -> None:
    """General path: rows of different lengths, ASCII and not, surrogate pairs, a null."""
    arr = pa.array([*HASH_SAMPLES, None])
    h, lengths = java_hash_column(arr)
    assert h.dtype == np.int32
    expected = [ref_java_hash(s) for s in HASH_SAMPLES] + [0]
    assert h.tolist() == expected
    assert lengths.tolist() == [len(s.encode("utf-16-le")) // 2 for s in HASH_SAMPLES] + [0]
    assert ref_java_hash("TAG1") == 2567159 and ref_java_hash("TagA") == 2598919  # the format doc's values
    assert ref_java_hash("polygenelubricants") == INT_MIN


@pytest.mark.parametrize("width", [1, 7, 32, 33, 65])
@pytest.mark.parametrize("alphabet", ["ascii", "bmp", "astral"])
def test_java_hash_matches_the_reference_on_equal_lengths(width: int, alphabet: str) -> None:
    """Fixed-width path (float products of up to 32 columns): the largest units included."""
    rng = np.random.default_rng(width)
    if alphabet == "ascii":
        pool = [chr(c) for c in range(0x20, 0x7F)]
    elif alphabet == "bmp":
        pool = [chr(c) for c in (0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF)]
    else:
        pool = ["😀", "𝄞", "\U0010ffff"]  # two UTF-16 units each
    rows = ["".join(rng.choice(pool, width)) for _ in range(50)] + [pool[-1] * width]
    h, _ = java_hash_column(pa.array(rows))
    assert h.tolist() == [ref_java_hash(s) for s in rows]


def test_java_hash_of_large_and_binary_columns() -> None:
    rows = ["abc", "日本", "", "😀x"]
    for typ in (pa.large_string(), pa.binary(), pa.large_binary()):
        arr = pa.array([s.encode() for s in rows], typ) if "binary" in str(typ) else pa.array(rows, typ)
        assert java_hash_column(arr)[0].tolist() == [ref_java_hash(s) for s in rows]
    sliced = pa.array(["zz", *rows]).slice(1)  # an offset into the buffers
    assert java_hash_column(sliced)[0].tolist() == [ref_java_hash(s) for s in rows]
    chunked = pa.chunked_array([pa.array(rows[:2]), pa.array(rows[2:])])
    assert java_hash_column(chunked)[0].tolist() == [ref_java_hash(s) for s in rows]


def test_java_hash_of_malformed_utf8_is_javas_replacement_decoding() -> None:
    """RocketMQ decodes properties with new String(bytes, UTF_8): U+FFFD per malformed sequence."""
    raw = [b"ab\xffcd", b"\xed\xa0\x80", b"ok", b"\xe6\x97", b"\xf0\x9f\x98\x80", b"\xc0\xaf"]
    h, lengths = java_hash_column(pa.array(raw, pa.binary()))
    assert h.tolist() == [ref_java_hash(b.decode("utf-8", "replace")) for b in raw]
    assert lengths[0] == 5  # "ab\ufffdcd"


def test_java_hash_rejects_other_types() -> None:
    with pytest.raises(TypeError):
        java_hash_column(pa.array([1, 2]))


def test_key_hash_of_min_value_is_zero() -> None:
    """Math.abs(Integer.MIN_VALUE) is negative: RocketMQ's indexKeyHashMethod makes it 0."""
    key = min_value_key("TopicA")
    assert ref_key_hash(f"TopicA#{key}") == 0
    assert key_hash("TopicA", key) == 0
    batch = message_keys(pa.array(["TopicA", "TopicA"]), pa.array([key, None]), pa.array([None, f"x {key}"]))
    assert batch.key_hash.tolist() == [0, ref_key_hash("TopicA#x"), 0]
    assert index_key_hash(np.array([INT_MIN, -5, 5, INT_MAX], np.int32)).tolist() == [0, 5, 5, INT_MAX]


def test_message_keys_order_and_hashes() -> None:
    """Per message: UNIQ_KEY first, then every non-empty KEYS token (split on one space)."""
    topics = pa.array(["T1", "T2", "T1", "T日", "T1"])
    uniq = pa.array(["U1", None, "U3", "U4", ""])
    keys = pa.array(["a b", "  c  d ", None, "é😀 f", None])
    b = message_keys(topics, uniq, keys)
    expected = [
        (0, "T1#U1"),
        (0, "T1#a"),
        (0, "T1#b"),
        (1, "T2#c"),
        (1, "T2#d"),
        (2, "T1#U3"),
        (3, "T日#U4"),
        (3, "T日#é😀"),
        (3, "T日#f"),
        (4, "T1#"),  # an empty UNIQ_KEY is indexed (not null)
    ]
    assert b.message.tolist() == [m for m, _ in expected]
    assert b.key_hash.tolist() == [ref_key_hash(k) for _, k in expected]
    assert b.ordinal.tolist() == [0, 1, 2, 0, 1, 0, 0, 1, 2, 0]
    dict_topics = pa.array(["T1", "T2", "T1", "T日", "T1"]).dictionary_encode()
    assert message_keys(dict_topics, uniq, keys).key_hash.tolist() == b.key_hash.tolist()


@pytest.mark.parametrize("topics", [["T1"] * 4, ["T1", "T2", "T1", "T3"]])
def test_message_keys_of_the_usual_shape(topics: list[str]) -> None:
    """Every message with a UNIQ_KEY and one KEYS token (the interleaved path), one topic or several."""
    uniq = [f"{i:032X}" for i in range(4)]
    keys = ["a", "bb", "日本", "😀"]
    b = message_keys(pa.array(topics), pa.array(uniq), pa.array(keys))
    expected = [k for t, u, x in zip(topics, uniq, keys, strict=True) for k in (f"{t}#{u}", f"{t}#{x}")]
    assert b.key_hash.tolist() == [ref_key_hash(k) for k in expected]
    assert b.message.tolist() == [0, 0, 1, 1, 2, 2, 3, 3] and b.ordinal.tolist() == [0, 1] * 4


def test_message_keys_skip_rolled_back_transactions_only() -> None:
    """RocketMQ 4.9.8 buildIndex returns for TRANSACTION_ROLLBACK_TYPE (0xC), indexes prepared (0x4)."""
    topics = pa.array(["T"] * 4)
    b = message_keys(topics, pa.array(["a", "b", "c", "d"]), None, np.array([0, 0x4, 0x8, 0xC], np.int32))
    assert b.message.tolist() == [0, 1, 2]


def test_message_keys_bad_columns_are_typed() -> None:
    with pytest.raises(InvalidArgumentError, match="uniq_keys has 1 rows"):
        message_keys(pa.array(["T", "T"]), pa.array(["a"]), None)
    with pytest.raises(InvalidArgumentError, match="keys must be a string column"):
        message_keys(pa.array(["T"]), None, pa.array([1]))
    with pytest.raises(InvalidArgumentError, match="topics has nulls"):
        message_keys(pa.array(["T", None]), pa.array(["a", "b"]), None)
    with pytest.raises(InvalidArgumentError, match="sys_flags"):
        message_keys(pa.array(["T"]), pa.array(["a"]), None, np.array([0, 0]))


# --------------------------------------------------------------------------- layout


def test_time_diffs_follow_rocketmq() -> None:
    ts = np.array([1999, 2000, 999, 0, 10**15, -5000], np.int64)
    assert time_diffs(ts, np.full(6, 1000, np.int64)).tolist() == [0, 1, 0, 0, INT_MAX, 0]
    assert time_diffs(ts, np.zeros(6, np.int64)).tolist() == [0] * 6  # beginTimestamp <= 0: 0
    assert time_diffs(np.array([5000]), np.array([-1])).tolist() == [0]


def _random_stream(seed: int, n: int, *, topic: str = "T") -> tuple[list[int], list[int], list[int]]:
    """Key hashes (some repeated, many in few slots), offsets and store times (some going back)."""
    rng = np.random.default_rng(seed)
    names = [f"k{int(x)}" for x in rng.integers(0, n // 3 + 1, n)]
    hashes = [ref_key_hash(f"{topic}#{k}") for k in names]
    phys = (np.cumsum(rng.integers(1, 500, n)) + 4096).tolist()
    ts = (1_700_000_000_000 + np.cumsum(rng.integers(-800, 3000, n))).tolist()
    return hashes, phys, ts


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_files_are_byte_identical_to_the_reference_writer(tmp_path: Path, seed: int) -> None:
    """Batches of any size (one key, a whole file, several files at once) give the same bytes as
    RocketMQ's putKey one key at a time: slots, chains, timeDiffs, header, rolls."""
    hashes, phys, ts = _random_stream(seed, 1500)
    ref = RefIndex(100, 400)
    for h, p, t in zip(hashes, phys, ts, strict=True):
        ref.put(h, p, t)
    svc = open_service(tmp_path)
    f_sizes = np.random.default_rng(seed).integers(1, 500, 50)
    pos = 0
    for size in f_sizes:
        lo, hi = pos, min(pos + int(size), len(hashes))
        if lo >= hi:
            break
        f = svc.files()[-1] if svc.files() and not svc.files()[-1].is_full() else None
        # straight through IndexFile.add_batch, rolling like the service
        while lo < hi:
            if f is None or f.is_full():
                f = svc._writable_last()
            lo += f.add_batch(np.array(hashes[lo:hi], np.int32), np.array(phys[lo:hi]), np.array(ts[lo:hi]))
        pos = hi
    got = file_bytes(svc)
    assert len(got) == len(ref.files) == 4  # 1500 keys at 399 per file
    for mine, theirs in zip(got, ref.files, strict=True):
        assert mine == bytes(theirs.buf)
    svc.close()


def test_time_diff_edge_cases_byte_exact(tmp_path: Path) -> None:
    """First key with store time 0 (beginTimestamp <= 0: every diff 0), times going back
    (negative diff: 0), a diff past Integer.MAX_VALUE seconds (capped); then a roll, whose
    first key's diff counts from the previous file's endTimestamp (RocketMQ's order)."""
    cfg = IndexConfig(max_hash_slot_num=7, max_index_num=4)
    cases = [
        [(11, 100, 0), (12, 200, 5000), (13, 300, 9000)],
        [(14, 400, 50_000), (15, 500, 40_000), (16, 600, 50_000 + (INT_MAX + 10) * 1000)],
        [(17, 700, 70_000_123), (18, 800, 70_003_999)],
    ]
    ref = RefIndex(7, 4)
    svc = open_service(tmp_path, cfg)
    for batch in cases:
        for h, p, t in batch:
            ref.put(h, p, t)
        svc.add_keys(*_key_batch(batch))
    got = file_bytes(svc)
    assert got == [bytes(f.buf) for f in ref.files]
    diffs = [[e[2] for e in ref_read(raw, 7, 4)[2]] for raw in got]
    # file 1 begins at store time 0: every diff 0; file 2's first key counts from file 1's end
    # (9000 -> 50000: 41 s), then a time going back (0) and one past Integer.MAX_VALUE s;
    # file 3's first key is before file 2's end (0), the next 3.876 s after it (3)
    assert diffs == [[0, 0, 0], [41, 0, INT_MAX], [0, 3]]
    svc.close()


def _key_batch(items: list[tuple[int, int, int]]) -> tuple[object, np.ndarray, np.ndarray]:
    """(KeyBatch, phy per message, ts per message) for one key per message."""
    from rmqlog.index import KeyBatch

    n = len(items)
    batch = KeyBatch(np.arange(n, dtype=np.int64), np.zeros(n, np.int64), np.array([h for h, _, _ in items], np.int32))
    return batch, np.array([p for _, p, _ in items], np.int64), np.array([t for _, _, t in items], np.int64)


def test_a_100_slot_400_entry_file_takes_399_keys_then_a_new_file(tmp_path: Path) -> None:
    clock = Clock(1_700_000_000_123)
    svc = open_service(tmp_path, now_ms=clock)
    n = 399
    topics = pa.array(["T"] * (n + 1))
    uniq = pa.array([f"U{i}" for i in range(n + 1)])
    phy = np.arange(n + 1, dtype=np.int64) * 200
    ts = 1_700_000_000_000 + np.arange(n + 1, dtype=np.int64) * 10
    assert svc.build(topics[:n], phy[:n], ts[:n], uniq[:n], None) == 399
    (first,) = svc.files()
    hdr = first.header()
    assert hdr.index_count == 400 and first.is_full()
    assert (hdr.begin_phy_offset, hdr.end_phy_offset) == (0, 398 * 200)
    assert first.path.stat().st_size == file_size(100, 400) == 40 + 400 + 8000
    clock.ms += 5
    assert svc.build(topics[n:], phy[n:], ts[n:], uniq[n:], None) == 1
    names = [f.name for f in svc.files()]
    assert len(names) == 2 and all(len(x) == 17 and x.isdigit() for x in names) and names[0] < names[1]
    # the second file starts from the first one's end, its first key at entry 1
    raw = svc.files()[1].path.read_bytes()
    h2, _, entries = ref_read(raw, 100, 400)
    assert h2[5] == 2 and entries == [(ref_key_hash("T#U399"), 399 * 200, 0, 0)]
    assert (h2[0], h2[2]) == (int(ts[n]), 399 * 200)
    assert sorted(os.listdir(tmp_path / "index")) == names
    svc.close()


def test_file_name_is_the_creation_time_and_never_repeats(tmp_path: Path) -> None:
    """yyyyMMddHHmmssSSS in local time; two files in one millisecond get increasing names."""
    import datetime as dt

    ms = 1_700_000_000_999
    cfg = IndexConfig(max_hash_slot_num=3, max_index_num=2)  # one key per file
    svc = open_service(tmp_path, cfg, now_ms=Clock(ms))
    svc.build(pa.array(["T"] * 3), np.arange(3), np.full(3, ms), pa.array(["a", "b", "c"]), None)
    names = [f.name for f in svc.files()]
    local = dt.datetime.fromtimestamp(ms / 1000)
    first = local.strftime("%Y%m%d%H%M%S") + "999"
    assert names[0] == first
    assert names == sorted(names) and len(set(names)) == 3
    svc.close()


def test_full_size_file_is_sparse(tmp_path: Path) -> None:
    """Default counts: 40 + 5M*4 + 20M*20 = 420,000,040 bytes, created sparse (header and slots
    allocated only)."""
    svc = open_service(tmp_path, IndexConfig())
    svc.build(pa.array(["T"]), np.array([0]), np.array([1_700_000_000_000]), pa.array(["k"]), None)
    (f,) = svc.files()
    st = f.path.stat()
    assert st.st_size == 420_000_040
    assert st.st_blocks * 512 < 64 << 20
    assert svc.query("T", "k") == [0]
    svc.close()


# --------------------------------------------------------------------------- damage


def _one_file_store(tmp_path: Path, n: int = 50) -> Path:
    svc = open_service(tmp_path)
    svc.build(
        pa.array(["T"] * n),
        1000 + np.arange(n) * 100,
        1_700_000_000_000 + np.arange(n),
        pa.array([f"k{i}" for i in range(n)]),
        None,
    )
    (f,) = svc.files()
    svc.close()
    return f.path


@pytest.mark.parametrize(
    ("offset", "value", "fmt", "field"),
    [
        (36, 401, ">i", "indexCount"),
        (36, -3, ">i", "indexCount"),
        (32, -1, ">i", "hashSlotCount"),
        (32, 101, ">i", "hashSlotCount"),
        (16, -8, ">q", "beginPhyOffset"),
        (24, 5, ">q", "endPhyOffset"),
    ],
)
def test_damaged_header_is_a_typed_error_naming_file_and_field(
    tmp_path: Path, offset: int, value: int, fmt: str, field: str
) -> None:
    path = _one_file_store(tmp_path)
    before_other = path.read_bytes()
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(struct.pack(fmt, value))
    with pytest.raises(CorruptIndexError, match=field) as info:
        IndexService.open(tmp_path, SMALL)
    assert info.value.path == str(path) and info.value.offset == offset
    assert isinstance(info.value, StoreError)
    assert (
        path.read_bytes()[offset + struct.calcsize(fmt) :] == before_other[offset + struct.calcsize(fmt) :]
    )  # nothing else touched
    with pytest.raises(CorruptIndexError):
        IndexService.open(tmp_path, SMALL, writable=True)


def test_truncated_or_resized_file_is_a_typed_error(tmp_path: Path) -> None:
    path = _one_file_store(tmp_path)
    os.truncate(path, 100)
    with pytest.raises(CorruptIndexError, match="100 bytes, expected 8440") as info:
        IndexService.open(tmp_path, SMALL)
    assert info.value.path == str(path) and info.value.offset is None
    # a file written with other counts is refused too, not misread
    path2 = _one_file_store(tmp_path / "b")
    with pytest.raises(CorruptIndexError, match="expected"):
        IndexService.open(tmp_path / "b", IndexConfig(max_hash_slot_num=50, max_index_num=400))
    assert path2.exists()


def test_repair_sets_the_damaged_file_aside_and_removes_later_ones(tmp_path: Path) -> None:
    svc = open_service(tmp_path)
    n = 1000
    svc.build(
        pa.array(["T"] * n),
        np.arange(n) * 100,
        1_700_000_000_000 + np.arange(n) * 1000,
        pa.array([f"k{i}" for i in range(n)]),
        None,
    )
    paths = [f.path for f in svc.files()]
    assert len(paths) == 3
    svc.close()
    with open(paths[1], "r+b") as fh:
        fh.seek(36)
        fh.write(struct.pack(">i", 10**6))
    with pytest.raises(CorruptIndexError):
        IndexService.open(tmp_path, SMALL, writable=True)
    svc = IndexService.open(tmp_path, SMALL, writable=True, repair=True, now_ms=Clock(1_800_000_000_000))
    assert [f.path for f in svc.files()] == [paths[0]]
    assert paths[1].with_name(paths[1].name + ".damaged").exists() and not paths[2].exists()
    resume = svc.resume_offset()
    assert resume == 398 * 100
    # feeding the records from resume_offset on again completes the index
    again = np.arange(n) * 100 >= resume
    svc.build(
        pa.array(["T"] * int(again.sum())),
        (np.arange(n) * 100)[again],
        (1_700_000_000_000 + np.arange(n) * 1000)[again],
        pa.array([f"k{i}" for i in range(n)]).filter(pa.array(again)),
        None,
    )
    for i in (0, 398, 399, 500, 999):
        assert svc.query("T", f"k{i}") == [i * 100]
    svc.close()


def test_read_only_service_cannot_write(tmp_path: Path) -> None:
    _one_file_store(tmp_path)
    ro = IndexService.open(tmp_path, SMALL)
    with pytest.raises(InvalidArgumentError, match="read-only"):
        ro.build(pa.array(["T"]), np.array([10**6]), np.array([1]), pa.array(["x"]), None)
    with pytest.raises(InvalidArgumentError, match="read-only"):
        ro.files()[0].add_batch(np.array([1], np.int32), np.array([1]), np.array([1]))
    assert ro.query("T", "k7") == [1700]
    ro.close()
    assert not IndexService.open(tmp_path / "none", SMALL).files()  # a reader creates nothing
    assert not (tmp_path / "none").exists()


def test_disk_full_while_writing_entries_publishes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _one_file_store(tmp_path)
    before = path.read_bytes()
    svc = open_service(tmp_path)
    real = os.pwrite

    def failing(fd: int, data: bytes, offset: int) -> int:
        if len(data) > 20:  # the entries, not the intent
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", failing)
    with pytest.raises(DiskFullError) as info:
        svc.build(pa.array(["T"] * 2), np.array([10**6, 10**6 + 1]), np.array([2, 3]), pa.array(["x", "y"]), None)
    assert str(path) in str(info.value)
    monkeypatch.setattr(os, "pwrite", real)
    assert path.read_bytes() == before  # intent cleared, nothing published
    assert (
        svc.build(pa.array(["T"] * 2), np.array([10**6, 10**6 + 1]), np.array([2, 3]), pa.array(["x", "y"]), None) == 2
    )
    assert svc.query("T", "y") == [10**6 + 1]
    svc.close()


def test_disk_full_when_creating_a_file_leaves_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = open_service(tmp_path)

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(DiskFullError, match="allocating"):
        svc.build(pa.array(["T"]), np.array([1]), np.array([T_MS]), pa.array(["k"]), None)
    assert os.listdir(tmp_path / "index") == [] and svc.files() == []
    monkeypatch.undo()
    assert svc.build(pa.array(["T"]), np.array([1]), np.array([T_MS]), pa.array(["k"]), None) == 1
    svc.close()


T_MS = 1_700_000_000_000


def test_config_is_checked() -> None:
    from rmqlog.errors import ConfigError

    for bad in (
        {"max_hash_slot_num": 0},
        {"max_index_num": 1},
        {"max_msgs_num_batch": -1},
        {"max_hash_slot_num": True},
        {"max_hash_slot_num": 500_000_000},
    ):
        with pytest.raises(ConfigError):
            IndexConfig(**bad)  # type: ignore[arg-type]


def test_index_file_rejects_bad_hashes_and_lengths(tmp_path: Path) -> None:
    svc = open_service(tmp_path)
    f = svc._writable_last()
    with pytest.raises(InvalidArgumentError, match="same length"):
        f.add_batch(np.array([1, 2], np.int32), np.array([1]), np.array([1, 2]))
    with pytest.raises(InvalidArgumentError, match=r"\[0, 2\*\*31\)"):
        f.add_batch(np.array([-1], np.int64), np.array([1]), np.array([1]))
    assert f.header().index_count == 1
    svc.close()
    with pytest.raises(InvalidArgumentError, match="closed"):
        f.header()


def test_reference_reader_sees_every_key_of_our_files(tmp_path: Path) -> None:
    """Each key reachable from its slot in the file that holds it, by the independent reader."""
    n = 900
    names = [f"key-{i % 300}" for i in range(n)]
    svc = open_service(tmp_path)
    svc.build(pa.array(["T"] * n), np.arange(n) * 64, 1_700_000_000_000 + np.arange(n) * 1000, None, pa.array(names))
    files = file_bytes(svc)
    for name in set(names):
        expected = [i * 64 for i in reversed(range(n)) if names[i] == name]
        assert ref_query(files, 100, 400, f"T#{name}") == expected
    svc.close()


def test_rocketmq_writer_killed_between_slot_and_header_loses_no_key(tmp_path: Path) -> None:
    """RocketMQ's putKey writes the entry, then the slot, then the header fields: killed in
    between, a slot points at entry indexCount, which is not published. Our first writer walks
    that slot back before it writes its own entry there."""
    (tmp_path / "index").mkdir()
    ref = RefIndexFile(100, 400)
    kh = ref_key_hash("T#old")
    for i in range(5):
        ref.put_key(kh, 100 + i, 1_650_000_000_000 + i * 1000)
    count = ref.count
    # the killed put: entry and slot written, header not
    struct.pack_into(">iqii", ref.buf, 40 + 400 + count * 20, kh, 999, 9, count - 1)
    struct.pack_into(">i", ref.buf, 40 + (kh % 100) * 4, count)
    (tmp_path / "index" / "20220415132000123").write_bytes(bytes(ref.buf))
    reader = IndexService.open(tmp_path, SMALL)
    assert reader.query("T", "old") == [104, 103, 102, 101, 100]  # the unpublished entry is not seen
    reader.close()
    svc = open_service(tmp_path)
    other = next(k for k in (f"o{i}" for i in range(1000)) if ref_key_hash(f"T#{k}") % 100 != kh % 100)
    assert svc.build(pa.array(["T"]), np.array([5000]), np.array([1_650_000_100_000]), pa.array([other]), None) == 1
    assert svc.query("T", "old") == [104, 103, 102, 101, 100]
    assert svc.query("T", other) == [5000]
    svc.close()


def test_rocketmq_written_file_is_read(tmp_path: Path) -> None:
    """An index file as RocketMQ leaves it (indexCount 0 on disk until the first key, sparse,
    named by time) made by the reference writer: the service opens it, finds keys, appends."""
    (tmp_path / "index").mkdir()
    ref = RefIndexFile(100, 400, on_disk_count=0)
    empty = bytes(ref.buf)
    keys = [f"ORDER-{i % 40}" for i in range(300)]
    for i, k in enumerate(keys):
        ref.put_key(ref_key_hash(f"TopicTest#{k}"), 1000 + i * 300, 1_650_000_000_000 + i * 1500)
    (tmp_path / "index" / "20220415132000123").write_bytes(bytes(ref.buf))
    (tmp_path / "index" / "20220415131000000").write_bytes(empty)  # an older, never-written file
    svc = IndexService.open(tmp_path, SMALL)
    assert [f.name for f in svc.files()] == ["20220415131000000", "20220415132000123"]
    assert svc.files()[0].header().index_count == 1  # 0 on disk reads as 1
    got = svc.query("TopicTest", "ORDER-7", max_count=64)
    assert got == [1000 + i * 300 for i in reversed(range(300)) if keys[i] == "ORDER-7"]
    assert svc.query("TopicTest", "ORDER-7", begin_ms=1_650_000_000_000 + 200 * 1500) == [
        1000 + i * 300 for i in reversed(range(200, 300)) if keys[i] == "ORDER-7"
    ]
    svc.close()
    w = open_service(tmp_path)
    assert (
        w.build(pa.array(["TopicTest"]), np.array([10**6]), np.array([1_650_001_000_000]), None, pa.array(["ORDER-7"]))
        == 1
    )
    assert w.query("TopicTest", "ORDER-7", max_count=3) == [10**6, 1000 + 287 * 300, 1000 + 247 * 300]
    w.close()
