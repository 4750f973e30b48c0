"""Benchmark of durability: recovery time, SYNC_FLUSH group commit, ASYNC_FLUSH overhead.

    python jobs/bench_durability.py [--root PATH] [--recovery-gib 1.0] [--sync-batches 600] [--rounds 5] [--json]

Each figure is printed beside a peer measured in the same run:

1. Recovery after an abnormal exit of a commitlog of ``--recovery-gib`` GiB (1 KiB bodies,
   CRC checking on, one 1 GiB segment, no checkpoint yet: the whole segment is walked and
   re-dispatched) vs a plain sequential read of the segment file with a CRC-32 over all of
   it (the I/O + CRC floor). The writer is a child process that kills itself with SIGKILL.
2. SYNC_FLUSH: 4 writer processes, 1 KiB bodies, batches of 100, every put waits for the
   disk; vs one process doing plain ``pwrite`` + ``fdatasync`` of 100 KiB chunks (what one
   sync per batch would give), and vs the same 4 writers under ASYNC_FLUSH (the CPU ceiling
   of the put path itself). The number of syncs shows the group commit. For reference, the
   same SYNC_FLUSH run on tmpfs (``/dev/shm``, where a sync returns at once): what the put
   path and the group-commit protocol cost without the disk's sync latency. Throughput is
   counted over the span of the puts (the first put's start to the last put's return, on
   the machine-wide monotonic clock: a SYNC_FLUSH put returns once its messages are on
   disk); the figure timed through the writers' ``close()`` and interpreter exit is printed
   beside it. One run takes ~1.5 s and two runs of the same code differ by up to +-20% here, so ``--rounds`` runs
   of each (SYNC and ASYNC alternating) are made and the medians printed beside every run.
3. ASYNC_FLUSH ``put_batch`` (100-byte bodies, batches of 65,536, as jobs/bench_store.py)
   with the background flusher running vs the same store with the flusher held off (what the
   store did before it had an async flusher: the data stays in the page cache), both also timed up to the
   end of ``close()``, whose final flush puts everything on disk.

Figures are wall-clock on this machine; nothing here is a test threshold.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_store import warm_up  # noqa: E402
from harness import Bench  # noqa: E402

import rmqlog  # noqa: E402
from rmqlog.log.record import crc32  # noqa: E402

GiB = 1 << 30


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


# ------------------------------------------------------------------ 1. recovery

FILL_AND_DIE = """
import os, signal, sys
import numpy as np, pyarrow as pa
import rmqlog
root, nbytes = sys.argv[1], int(float(sys.argv[2]))
cfg = rmqlog.StoreConfig(flush_interval_commit_log=3_600_000, flush_commit_log_thorough_interval=3_600_000_000)
rng = np.random.default_rng(1)
rows = 4096
body = pa.array([rng.bytes(1024) for _ in range(rows)], pa.binary())
t = pa.table({"topic": ["RecoveryTopic"] * rows, "body": body, "tags": ["TagA"] * rows})
s = rmqlog.MessageStore.open(root, cfg)
while s.published_tail() < nbytes:
    s.put_batch(t)
s.dispatch()
s.flush_service.flush_to(s.published_tail())  # the data is on disk; the checkpoint never written
os.kill(os.getpid(), signal.SIGKILL)
"""


def bench_recovery(workdir: Path, gib: float) -> dict[str, float]:
    root = workdir / "recovery"
    shutil.rmtree(root, ignore_errors=True)
    nbytes = int(gib * GiB * 0.98)  # stay inside the first 1 GiB segment
    subprocess.run([sys.executable, "-c", FILL_AND_DIE, str(root), str(nbytes)], env=_env(), check=False)
    assert (root / "abort").exists(), "the writer did not die with the store open"
    seg = sorted((root / "commitlog").iterdir())[0]
    os.sync()
    # peer: read the whole segment sequentially and CRC it (the floor for a CRC-checking walk)
    t0 = time.perf_counter()
    acc = 0
    with open(seg, "rb", buffering=0) as f:
        while chunk := f.read(16 << 20):
            acc ^= crc32(chunk)
    t_peer = time.perf_counter() - t0
    t0 = time.perf_counter()
    s = rmqlog.MessageStore.open(root)
    t_rec = time.perf_counter() - t0
    rep = s.recovery
    assert rep is not None and rep.abnormal
    out = {
        "recovery_s": t_rec,
        "recovery_bytes": rep.end - rep.walk_start,
        "redispatched": rep.redispatched,
        "peer_read_crc_s": t_peer,
    }
    s.close()
    shutil.rmtree(root, ignore_errors=True)
    return out


# ------------------------------------------------------------------ 2. SYNC_FLUSH

SYNC_WRITER = """
import os, sys, time
import numpy as np, pyarrow as pa
import rmqlog
root, batches, go, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
cfg = rmqlog.StoreConfig(flush_disk_type=mode)
rng = np.random.default_rng(os.getpid())
t = pa.table({"topic": ["SyncTopic"] * 100, "body": pa.array([rng.bytes(1024) for _ in range(100)], pa.binary())})
with rmqlog.MessageStore.open(root, cfg) as s:
    s.put_batch(t.slice(0, 1))
    open(go + ".ready.%d" % os.getpid(), "w").close()
    while not os.path.exists(go):
        time.sleep(0.001)
    s.flush_service.syncs = 0  # count the measured puts' syncs only
    t0 = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
    for _ in range(batches):
        s.put_batch(t)
    t1 = time.monotonic()
    print(t0, t1, s.flush_service.syncs)
"""


def bench_sync(workdir: Path, writers: int, batches: int, mode: str = "SYNC_FLUSH") -> dict[str, float]:
    root = workdir / "sync"
    shutil.rmtree(root, ignore_errors=True)
    with rmqlog.MessageStore.open(root, rmqlog.StoreConfig(flush_disk_type=rmqlog.SYNC_FLUSH)) as s:
        s.create_topic("SyncTopic", 4)
    go = str(workdir / "sync.go")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SYNC_WRITER, str(root), str(batches), go, mode],
            env=_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(writers)
    ]
    while len(list(workdir.glob("sync.go.ready.*"))) < writers:
        time.sleep(0.01)
    t0 = time.perf_counter()
    Path(go).touch()
    results = [p.communicate()[0].split() for p in procs]
    wall = time.perf_counter() - t0
    # the span of the puts: the first put's start to the last put's return, over all writers
    # (a SYNC_FLUSH put returns once its messages are on disk); the wall time adds the
    # writers' close() and interpreter exit, a fixed ~50-100 ms that is not throughput
    span = max(float(r[1]) for r in results) - min(float(r[0]) for r in results)
    syncs = sum(int(r[2]) for r in results)
    msgs = writers * batches * 100
    # peer: one process, plain pwrite + fdatasync per 100 KiB (one sync per batch, no sharing)
    peer = workdir / "peer.bin"
    fd = os.open(peer, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    chunk = np.random.default_rng(0).bytes(100 * 1024)
    n_peer = min(batches, 300)
    t1 = time.perf_counter()
    for i in range(n_peer):
        os.pwrite(fd, chunk, i * len(chunk))
        os.fdatasync(fd)
    t_peer = time.perf_counter() - t1
    os.close(fd)
    peer.unlink()
    for f in workdir.glob("sync.go*"):
        f.unlink()
    shutil.rmtree(root, ignore_errors=True)
    return {
        "sync_msgs_s": msgs / span,
        "sync_wall_msgs_s": msgs / wall,
        "sync_puts": writers * batches,
        "sync_syncs": syncs,
        "peer_fsync_write_msgs_s": n_peer * 100 / t_peer,
        "peer_fsync_ms": t_peer / n_peer * 1000,
    }


def _median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """The run with the median throughput (its syncs and peer figures go with it)."""
    return sorted(runs, key=lambda r: r["sync_msgs_s"])[len(runs) // 2]


def _ks(runs: list[dict[str, float]], key: str = "sync_msgs_s") -> str:
    return ", ".join(f"{r[key] / 1000:.0f}" for r in runs)


def _wall(runs: list[dict[str, float]]) -> str:
    """The median and the runs timed from the start signal to the writers' exit."""
    med = float(np.median([r["sync_wall_msgs_s"] for r in runs]))
    return f"{med:,.0f} msgs/s [{_ks(runs, 'sync_wall_msgs_s')} k]"


# ------------------------------------------------------------------ 3. ASYNC_FLUSH overhead


def bench_async_repeated(workdir: Path, messages: int, repeat: int) -> dict[str, list[float]]:
    """``bench_async`` ``repeat`` times, the two stores in turn first: this VM's disk varies a
    lot between runs, and whichever store runs second used to get the warm pages the first
    one's deleted files left (measured: the second up to 40% faster, whatever its config)."""
    runs: dict[str, list[float]] = {}
    for i in range(repeat):
        for k, v in bench_async(workdir, messages, flusher_first=i % 2 == 0).items():
            runs.setdefault(k, []).append(v)
    return runs


def bench_async(workdir: Path, messages: int, flusher_first: bool = True) -> dict[str, float]:
    rows = 65536
    rng = np.random.default_rng(7)
    table = pa.table(
        {
            "topic": pa.array(["BenchTopic"] * rows),
            "body": pa.array([rng.bytes(100) for _ in range(rows)], pa.binary()),
            "tags": pa.array(["TagA", "TagB"] * (rows // 2)),
        }
    )
    batches = max(1, messages // rows)
    out = {}
    configs = [
        ("async", rmqlog.StoreConfig()),
        (
            "no_flusher",
            rmqlog.StoreConfig(flush_interval_commit_log=3_600_000, flush_commit_log_thorough_interval=3_600_000_000),
        ),
    ]
    for name, cfg in configs if flusher_first else configs[::-1]:
        root = workdir / f"async-{name}"
        shutil.rmtree(root, ignore_errors=True)
        s = rmqlog.MessageStore.open(root, cfg)
        s.put_batch(table.slice(0, 16))
        # warm pages for both alike (see jobs/bench_store.py), no dirty data of an earlier step
        warm_up(workdir / "warm", 2 * batches * rows * 260)
        t0 = time.perf_counter()
        for _ in range(batches):
            s.put_batch(table)
        t_put = time.perf_counter() - t0
        out[f"{name}_msgs_s"] = batches * rows / t_put
        out[f"{name}_flushed_during_run"] = s.flushed_offset()
        s.close()  # the final flush: what was not flushed in the background is synced now
        out[f"{name}_to_disk_msgs_s"] = batches * rows / (time.perf_counter() - t0)
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> None:
    job = Bench(
        "bench_durability",
        __doc__,
        rounds=5,
        temp_in=REPO,  # on the store's disk, not a tmpfs
        rounds_help="runs of the SYNC_FLUSH writers (and of each reference) and of the ASYNC_FLUSH comparison",
    )
    job.add_argument("--recovery-gib", type=float, default=1.0)
    job.add_argument("--sync-batches", type=int, default=600, help="batches of 100 per SYNC writer")
    job.add_argument(
        "--async-messages",
        type=int,
        default=6_000_000,
        help="per ASYNC_FLUSH run: ~1 s, so that the flusher (every 500 ms) runs during it",
    )
    with job.run() as workdir:
        _run(job, job.args, workdir)


def _run(job: Bench, args: argparse.Namespace, workdir: Path) -> None:
    r = bench_recovery(workdir, args.recovery_gib)
    print(
        f"recovery after abnormal exit, {r['recovery_bytes'] / GiB:.2f} GiB walked with CRC, "
        f"{r['redispatched']:,} records re-dispatched: {r['recovery_s']:.2f} s "
        f"| peer: sequential read + CRC-32 of the segment: {r['peer_read_crc_s']:.2f} s"
    )
    job.figure(
        f"recovery after abnormal exit, {r['recovery_bytes'] / GiB:.2f} GiB of log",
        r["recovery_s"],
        "s",
        peer="sequential read + CRC-32 of the segment",
        peer_value=r["peer_read_crc_s"],
    )
    # one run is ~1 s, and on this VM two runs of the same code differ by up to +-20%:
    # SYNC and ASYNC runs alternate, and the medians are printed with every run's figure
    sync_runs: list[dict[str, float]] = []
    async_runs: list[dict[str, float]] = []
    for _ in range(args.rounds):
        sync_runs.append(bench_sync(workdir, 4, args.sync_batches))
        async_runs.append(bench_sync(workdir, 4, args.sync_batches, "ASYNC_FLUSH"))
    y = _median_run(sync_runs)
    y_async = _median_run(async_runs)
    print(
        f"SYNC_FLUSH, 4 writer processes, 1 KiB bodies, batches of 100, median of {args.rounds}: "
        f"{y['sync_msgs_s']:,.0f} msgs/s [{_ks(sync_runs)} k] over the span of the puts "
        f"(through the writers' close and exit: {_wall(sync_runs)}), "
        f"{y['sync_syncs']} syncs for {y['sync_puts']} puts in the median run "
        f"| peer: pwrite+fdatasync per 100 KiB: {y['peer_fsync_write_msgs_s']:,.0f} msgs/s "
        f"({y['peer_fsync_ms']:.2f} ms per sync); the same 4 writers under ASYNC_FLUSH, alternating: "
        f"{y_async['sync_msgs_s']:,.0f} msgs/s [{_ks(async_runs)} k]"
    )
    job.figure(
        "SYNC_FLUSH, 4 writer processes",
        y["sync_msgs_s"],
        "msgs/s",
        peer="pwrite+fdatasync per 100 KiB",
        peer_value=y["peer_fsync_write_msgs_s"],
    )
    job.figure(
        "SYNC_FLUSH, 4 writer processes, vs ASYNC_FLUSH",
        y["sync_msgs_s"],
        "msgs/s",
        peer="the same 4 writers under ASYNC_FLUSH",
        peer_value=y_async["sync_msgs_s"],
    )
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):  # where a sync costs nothing
        mem = Path(tempfile.mkdtemp(prefix="bench-durability-", dir=str(shm)))
        try:
            mem_runs = [bench_sync(mem, 4, args.sync_batches) for _ in range(args.rounds)]
        finally:
            shutil.rmtree(mem, ignore_errors=True)
        y_mem = _median_run(mem_runs)
        print(
            f"  reference: the same SYNC_FLUSH runs on tmpfs (every sync free, the locks and the "
            f"flushed position as on disk): {y_mem['sync_msgs_s']:,.0f} msgs/s [{_ks(mem_runs)} k], "
            f"{y_mem['sync_syncs']} syncs for {y_mem['sync_puts']} puts in the median run"
        )
    runs = bench_async_repeated(workdir, args.async_messages, args.rounds)
    med = {k: float(np.median(v)) for k, v in runs.items()}

    def fmt(k: str) -> str:
        return ", ".join(f"{v / 1e6:.2f}" for v in runs[k])

    print(
        f"ASYNC_FLUSH put_batch, 100-byte bodies, batches of 65,536, median of {args.rounds}: "
        f"{med['async_msgs_s']:,.0f} msgs/s [{fmt('async_msgs_s')} M] "
        f"| same store, flusher held off: {med['no_flusher_msgs_s']:,.0f} msgs/s [{fmt('no_flusher_msgs_s')} M] "
        f"({100 * (med['async_msgs_s'] / med['no_flusher_msgs_s'] - 1):+.1f}%); "
        f"including the final flush on close: {med['async_to_disk_msgs_s']:,.0f} vs "
        f"{med['no_flusher_to_disk_msgs_s']:,.0f} msgs/s "
        f"({100 * (med['async_to_disk_msgs_s'] / med['no_flusher_to_disk_msgs_s'] - 1):+.1f}%)"
    )
    job.figure(
        "ASYNC_FLUSH put_batch, 100-byte bodies, the flusher at work",
        med["async_msgs_s"],
        "msgs/s",
        peer="the same store, the flusher held off",
        peer_value=med["no_flusher_msgs_s"],
    )


if __name__ == "__main__":
    main()
