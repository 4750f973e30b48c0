"""Benchmark of the scrub: what the next put pays for a killed writer's leftovers, and for none.

    python jobs/bench_scrub.py [--root PATH] [--segment-mib 1024] [--leftover-kib 1024] [--puts 2000]
                               [--repo PATH] [--rounds 1] [--json]

1. A writer process appends a batch of ``--leftover-kib`` KiB (1 KiB bodies) to a store whose
   commitlog segment is ``--segment-mib`` MiB, and is killed (SIGKILL) right before it publishes:
   its whole batch lies past the published tail. The store stays open in this process meanwhile
   (so no recovery runs), and its next put clears the leftovers. Printed: that put's time, the
   bytes the scrub cleared (``CommitLog.scrubbed_bytes``), and the segment's allocated bytes
   (``st_blocks``) before and after, against the leftover size and the segment size.
2. The same store, nothing left behind: ``--puts`` puts of one 100-byte message, the median
   time of one, and how many ``pread``s at the tail (the scrub's check) each made.

Both parts run ``--rounds`` times, each round on a store of its own. ``--repo`` imports ``store`` from another checkout
(e.g. the main branch) for a before/after
comparison; figures are wall-clock on this machine, nothing here is a test threshold.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import Bench  # jobs/ is this script's directory

REPO = Path(__file__).resolve().parents[1]

KILLED_WRITER = """
import os, signal, sys
import pyarrow as pa
import rmqlog
from rmqlog.log.append_state import AppendStateFile
AppendStateFile.publish = lambda self, state, durable=False: os.kill(os.getpid(), signal.SIGKILL)
cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=int(sys.argv[2]))
n = int(sys.argv[3])
with rmqlog.MessageStore.open(sys.argv[1], cfg) as s:
    s.put_batch(pa.table({"topic": ["B"] * n, "body": [b"k" * 1024] * n}))
"""


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def main() -> None:
    ap = Bench("bench_scrub", __doc__, rounds=1, rounds_help="rounds of both parts, each on a store of its own")
    ap.add_argument("--segment-mib", type=int, default=1024)
    ap.add_argument("--leftover-kib", type=int, default=1024)
    ap.add_argument("--puts", type=int, default=2000)
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout whose store package is measured")
    with ap.run() as work:
        for r in range(ap.args.rounds):
            _round(ap, work / f"store-{r}")


def _round(job: Bench, root: Path) -> None:
    args = job.args
    sys.path.insert(0, str(args.repo))
    import pyarrow as pa

    import rmqlog
    from rmqlog.log.mapped_file import MappedFile

    seg_size = args.segment_mib << 20
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=seg_size)
    env = dict(os.environ, PYTHONPATH=str(args.repo))
    rows = max(1, args.leftover_kib * 1024 // (1024 + 140))  # ~140 bytes of header, topic and properties a record
    one = pa.table({"topic": ["B"], "body": [b"p" * 100]})
    print(f"store {rmqlog.__file__}, segment {args.segment_mib} MiB, in {root}")
    with rmqlog.MessageStore.open(root, cfg) as s:
        s.put_batch(pa.table({"topic": ["B"] * 100, "body": [b"a" * 1024] * 100}))
        tail = s.published_tail()
        seg = root / "commitlog" / f"{0:020d}"
        before_kill = allocated(seg)
        child = subprocess.run(
            [sys.executable, "-c", KILLED_WRITER, str(root), str(seg_size), str(rows)], env=env, check=False
        )
        assert child.returncode == -9, child
        left = allocated(seg) - before_kill
        scrubbed0 = getattr(s.commitlog, "scrubbed_bytes", None)
        t0 = time.perf_counter()
        res = s.put_batch(one)
        took = time.perf_counter() - t0
        assert res["commitLogOffset"][0].as_py() == tail
        scrubbed = None if scrubbed0 is None else s.commitlog.scrubbed_bytes - scrubbed0
        print(
            f"put after a killed writer's {left / 2**20:.2f} MiB partial batch: {took * 1e3:.2f} ms; scrub cleared "
            + (f"{scrubbed / 2**20:.2f} MiB" if scrubbed is not None else "(no counter in this version)")
            + f"; segment allocated {before_kill / 2**20:.2f} MiB before the kill, {(before_kill + left) / 2**20:.2f} "
            "MiB "
            f"with the leftovers, {allocated(seg) / 2**20:.2f} MiB after the put (segment {args.segment_mib} MiB)"
        )
        reads = {"n": 0}
        real = MappedFile.read

        def counted(self: MappedFile, rel: int, length: int) -> bytes:
            reads["n"] += 1
            return real(self, rel, length)

        MappedFile.read = counted  # type: ignore[method-assign]
        times = []
        for _ in range(args.puts):
            t0 = time.perf_counter()
            s.put_batch(one)
            times.append(time.perf_counter() - t0)
        MappedFile.read = real  # type: ignore[method-assign]
        print(
            f"put of one message, nothing to scrub: median {statistics.median(times) * 1e6:.1f} us over {args.puts} "
            "puts; "
            f"{reads['n'] / args.puts:.2f} preads of the commitlog per put"
        )
    job.figure(
        f"put after a killed writer's {left / 2**20:.2f} MiB partial batch",
        took * 1e3,
        "ms",
        peer="put of one message, nothing to scrub (median)",
        peer_value=statistics.median(times) * 1e3,
    )


if __name__ == "__main__":
    main()
