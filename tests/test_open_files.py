"""Open files bounded: descriptors and mappings do not grow with the
number of queues and segments a store touches (:mod:`rmqlog.log.open_files`).

Each scenario that depends on the process's ``RLIMIT_NOFILE`` runs in a child process that
lowers it with ``resource.setrlimit`` (the limit of the test runner itself is left alone).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import small_store_config, subprocess_env

import rmqlog

#: what every child script starts with: its store's config (tiny consume-queue files, as in
#: the rest of the suite), helpers to count this process's descriptors and mappings
CHILD_HEAD = """
import json, os, resource, sys
import numpy as np, pyarrow as pa
import rmqlog
from conftest import small_store_config

def fds():
    return len(os.listdir("/proc/self/fd"))

def set_nofile(n):
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

def put_one_each(s, topic, queues, tag="m"):
    n = len(queues)
    return s.put_batch(pa.table({"topic": [topic] * n, "body": [f"{tag}-{q}".encode() for q in queues],
                                 "queueId": np.asarray(queues, np.int64)}), dispatch=True)
"""


def run_child(body: str, *, timeout: float = 300) -> dict:
    """Run ``CHILD_HEAD + body`` in a new interpreter; returns the JSON it prints last."""
    script = CHILD_HEAD + textwrap.dedent(body)
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=subprocess_env(), timeout=timeout
    )
    assert res.returncode == 0, f"child failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
    return json.loads(res.stdout.strip().splitlines()[-1])


def own_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def mappings_under(root: Path) -> int:
    """Mappings of this process of the commitlog and consume-queue files under ``root``
    (``/proc/self/maps``; the index and timer files are a few per store, not per queue)."""
    prefixes = tuple(str(root.resolve() / d) + "/" for d in ("commitlog", "consumequeue"))
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if line.rstrip().split(maxsplit=5)[-1].startswith(prefixes))


# ------------------------------------------------------------------- the cap


def test_open_files_stay_under_the_cap(tmp_path: Path) -> None:
    """300 queues touched (put, dispatched, bounds, read) with ``max_open_mapped_files=8``:
    the store never holds more than 8 mapped files, 2 descriptors each (plus its few state
    and lock files), nor more than 8 mappings of its files; every queue still reads right."""
    root, cap, n = tmp_path / "s", 8, 300
    cfg = small_store_config(max_open_mapped_files=cap)
    before = own_fds()
    with rmqlog.MessageStore.open(root, cfg) as s:
        s.create_topic("T", n)
        s.put_batch(
            pa.table({"topic": ["T"] * n, "body": [f"b{q}".encode() for q in range(n)], "queueId": np.arange(n)}),
            dispatch=True,
        )
        # a few more rounds so each queue rolls over a small consume-queue segment or two
        for r in range(2):
            s.put_batch(
                pa.table(
                    {"topic": ["T"] * n, "body": [f"r{r}-{q}".encode() for q in range(n)], "queueId": np.arange(n)}
                ),
                dispatch=True,
            )
        peak = own_fds()
        assert mappings_under(root) <= cap
        for q in range(n):
            assert (s.min_offset("T", q), s.max_offset("T", q)) == (0, 3)
            assert s.read_queue("T", q, 0, 3).column("body").to_pylist() == [
                f"b{q}".encode(),
                f"r0-{q}".encode(),
                f"r1-{q}".encode(),
            ]
            peak = max(peak, own_fds())
        assert mappings_under(root) <= cap
        # 2 descriptors per mapped file; the rest: locks, state files, index files, the
        # flush/append state, the timer files (fixed per store, not per queue)
        fixed = 24
        assert peak - before <= 2 * cap + fixed, (peak - before, cap)
    assert own_fds() <= before


def test_a_file_in_use_is_not_closed_under_its_user(tmp_path: Path) -> None:
    """A segment whose descriptor an operation holds (a pwrite, a read pin, a queued write) is
    not closed to make room, and a view of a mapping stays valid after its file is closed."""
    from rmqlog.log.mapped_file_queue import MappedFileQueue
    from rmqlog.log.open_files import OpenFiles

    open_files = OpenFiles(2)
    q = MappedFileQueue(tmp_path / "q", 4096, infer=False, open_files=open_files)
    a, b, c = (q.get(i * 4096, create=True) for i in range(3))
    assert a is not None and b is not None and c is not None
    a.write(0, b"a" * 10)
    view = a.array()[:10]  # a zero-copy view: the mapping must outlive the close
    fd = a.acquire_fd()  # an operation in progress on a
    b.write(0, b"b" * 10)
    c.write(0, b"c" * 10)  # over the cap: b (idle) is closed, a (held) is not
    assert a.is_open and not b.is_open and c.is_open
    os.pwrite(fd, b"A", 1)  # the held descriptor is still a's
    a.release_fd()
    b.write(1, b"B")  # reopened by its use; a is idle now and the oldest: closed
    assert not a.is_open and b.is_open
    assert bytes(view) == b"aA" + b"a" * 8  # the view kept its mapping
    assert a.read(0, 3) == b"aAa" and b.read(0, 3) == b"bBb" and c.read(0, 2) == b"cc"
    q.close()
    assert len(open_files) == 0


def test_concurrent_readers_and_writer_over_the_cap(tmp_path: Path) -> None:
    """Threads reading and a writer writing more queues than the cap, at once: every read
    returns its own queue's messages (never another record's), and nothing fails."""
    root, n = tmp_path / "s", 64
    cfg = small_store_config(max_open_mapped_files=4)
    errors: list[BaseException] = []
    with rmqlog.MessageStore.open(root, cfg) as s:
        s.create_topic("T", n)
        s.put_batch(
            pa.table({"topic": ["T"] * n, "body": [f"{q}/0".encode() for q in range(n)], "queueId": np.arange(n)}),
            dispatch=True,
        )

        def reader(k: int) -> None:
            try:
                for i in range(300):
                    q = (k * 7 + i * 13) % n
                    bodies = s.read_queue("T", q, 0, 1).column("body").to_pylist()
                    assert bodies == [f"{q}/0".encode()], (q, bodies)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        def writer() -> None:
            try:
                for r in range(1, 6):
                    s.put_batch(
                        pa.table(
                            {
                                "topic": ["T"] * n,
                                "body": [f"{q}/{r}".encode() for q in range(n)],
                                "queueId": np.arange(n),
                            }
                        ),
                        dispatch=True,
                    )
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(k,)) for k in range(3)] + [threading.Thread(target=writer)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for q in range(n):
            assert s.read_queue("T", q, 0, 6).column("body").to_pylist() == [f"{q}/{r}".encode() for r in range(6)]
        assert s.verify().problems == []


def test_default_cap_follows_the_descriptor_limit() -> None:
    import resource

    from rmqlog.log.open_files import default_limit

    cap = default_limit()

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert 16 <= cap <= 4096
    if soft != resource.RLIM_INFINITY:
        assert cap <= max(16, soft // 8)
    assert rmqlog.StoreConfig().max_open_mapped_files == 0  # 0: derived when the store opens
    with pytest.raises(rmqlog.ConfigError, match="max_open_mapped_files"):
        rmqlog.StoreConfig(max_open_mapped_files=-1)


# ----------------------------------------------------------- low ulimit -n


def test_1200_queues_under_ulimit_1024(tmp_path: Path) -> None:
    """1,200 queues under ``ulimit -n 1024``: put, dispatch, read and reopen all work (each
    queue used to keep 2 descriptors for the store's life: the put failed with EMFILE)."""
    out = run_child(f"""
        set_nofile(1024)
        root, n = {str(tmp_path / "s")!r}, 1200
        with rmqlog.MessageStore.open(root, small_store_config()) as s:
            s.create_topic("T", n)
            put_one_each(s, "T", list(range(n)))
            s.dispatch()
            ends = [s.max_offset("T", q) for q in range(n)]
            bodies = [[b.decode() for b in s.read_queue("T", q, 0, 1).column("body").to_pylist()] for q in range(0, n,
                7)]
            peak = fds()
        with rmqlog.MessageStore.open(root, small_store_config()) as s:
            again = [s.max_offset("T", q) for q in range(n)]
            got = [b.decode() for b in s.get_messages("g", "T", n - 1, 0,
                max_count=4).messages.column("body").to_pylist()]
            problems = s.verify().problems
        print(json.dumps({{"ends": ends, "again": again, "bodies": bodies, "got": got, "peak": peak,
                          "problems": [str(p) for p in problems]}}))
    """)
    assert out["ends"] == [1] * 1200 and out["again"] == [1] * 1200
    assert out["bodies"] == [[f"m-{q}"] for q in range(0, 1200, 7)]
    assert out["got"] == ["m-1199"]
    assert out["problems"] == []
    assert out["peak"] < 1024


@pytest.mark.optin  # minutes: RMQ_OPTIN=1
def test_100000_queues_under_the_default_limit(tmp_path: Path) -> None:
    """A store with 100,000 queues, one message each, under this machine's default ``ulimit
    -n`` (each queue used to keep 2 descriptors: 20,000 queues failed at 20,000): put,
    dispatched, every queue's bounds, a read of every 97th, reopened (recovery passes over
    every queue), bounds again. Slow: the store creates a folder and a file per queue and
    recovery checks each queue, which this test does 100,000 times over."""
    out = run_child(
        f"""
        root, topics, per = {str(tmp_path / "s")!r}, 2, 50_000
        # tiny consume-queue files (no readahead of 6 MB of holes per queue), but commitlog
        # segments of a realistic size: every bounds query lists the commitlog's folder
        cfg = small_store_config(mapped_file_size_commit_log=64 << 20)
        with rmqlog.MessageStore.open(root, cfg) as s:
            for t in range(topics):
                s.create_topic(f"T{{t}}", per)
                put_one_each(s, f"T{{t}}", list(range(per)), tag=f"t{{t}}")
            ends = sum(s.max_offset(f"T{{t}}", q) for t in range(topics) for q in range(per))
            bad = [(t, q) for t in range(topics) for q in range(0, per, 97)
                   if s.read_queue(f"T{{t}}", q, 0, 1).column("body").to_pylist() != [f"t{{t}}-{{q}}".encode()]]
            peak = fds()
        with rmqlog.MessageStore.open(root, cfg) as s:
            again = sum(s.max_offset(f"T{{t}}", q) for t in range(topics) for q in range(0, per, 13))
        print(json.dumps({{"ends": ends, "bad": bad, "again": again, "peak": peak,
                          "limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}}))
    """,
        timeout=900,
    )
    assert out["ends"] == 100_000
    assert out["bad"] == []
    assert out["again"] == 2 * len(range(0, 50_000, 13))
    assert out["peak"] < out["limit"]


def test_out_of_descriptors_is_typed_and_harms_nothing(tmp_path: Path) -> None:
    """Descriptor limits just above what the process already uses, at each step: an open
    (lock, owner files, folders listed, segments mapped in recovery), then puts to new
    queues, dispatch and reads on an open store whose cap is above the limit. Each either
    works or raises :class:`rmqlog.TooManyOpenFilesError` naming a file and what to do;
    nothing else. Afterwards, with the limit back, the store opens, verify is clean and
    every acknowledged message is there exactly once."""
    root = tmp_path / "s"
    out = run_child(f"""
        root = {str(root)!r}
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        with rmqlog.MessageStore.open(root, small_store_config()) as s:
            s.create_topic("T", 2000)
            put_one_each(s, "T", list(range(20)), tag="base")
        acked, typed, other, ok = [], [], [], 0
        next_queue = 20

        def attempt(step, open_store, limit):
            global ok, next_queue
            queues = list(range(next_queue, next_queue + 10))
            next_queue += 10
            s = None
            set_nofile(limit)
            try:
                s = open_store()
                put_one_each(s, "T", queues, tag=step)
                acked.extend((q, f"{{step}}-{{q}}") for q in queues)
                s.dispatch()
                for q in queues:
                    s.read_queue("T", q, 0, 1)
                ok += 1
            except rmqlog.TooManyOpenFilesError as e:
                typed.append([step, e.filename, str(e)])
            except BaseException as e:  # noqa: BLE001
                other.append([step, repr(e)])
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            return s

        # the open itself, with a small cap (the store works with a few descriptors)
        base = fds()
        for extra in range(0, 40, 2):
            s = attempt(f"open{{extra}}", lambda: rmqlog.MessageStore.open(root,
                small_store_config(max_open_mapped_files=4)),
                        base + extra)
            if s is not None:
                s.close()
        # an open store whose cap is above the limit: the put, dispatch or read runs out
        with rmqlog.MessageStore.open(root, small_store_config(max_open_mapped_files=4096)) as store:
            for extra in range(0, 30, 3):
                attempt(f"put{{extra}}", lambda: store, fds() + extra)
        print(json.dumps({{"acked": acked, "typed": typed, "other": other, "ok": ok}}))
    """)
    assert out["other"] == []
    steps = {step.rstrip("0123456789") for step, _, _ in out["typed"]}
    assert steps == {"open", "put"}, out["typed"]  # both kinds ran out somewhere
    for _, filename, message in out["typed"]:
        assert filename and "ulimit -n" in message and "max_open_mapped_files" in message, message
    assert out["ok"] > 0  # and with a little room, it all works
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.verify().problems == []
        for q in range(20):
            assert s.read_queue("T", q, 0, 1).column("body").to_pylist() == [f"base-{q}".encode()]
        for q, body in out["acked"]:
            got = s.read_queue("T", q, 0, s.max_offset("T", q)).column("body").to_pylist()
            assert got.count(body.encode()) == 1, (q, body, got)
