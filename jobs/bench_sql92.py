"""Benchmark of SQL92 property filters on the broker's filter path, beside a tag filter of the
same selectivity.

    python jobs/bench_sql92.py [--root PATH] [--messages 1000000] [--rounds 3] [--json]

One queue of ``--messages`` messages (100-byte bodies), each with 5 user properties
(``region`` one of 5 codes, ``amount`` 0..9999, ``tier`` one of 3, ``score`` a decimal,
``vip`` true/false) and the tag ``sel`` exactly where the expression
``region = 'eu' AND amount >= 5000`` holds (10 % of them), else ``other``: the SQL92 filter and
the tag filter ``sel`` select the same messages. Nothing of the setup is timed.

Printed, each beside its peer measured in the same run (medians of ``--rounds``):

1. the evaluation alone, as the broker's pull runs it: the stored records' properties
   column (read once, not timed) cut into the pull's scan windows (800 units, RocketMQ's
   ``max(16000 bytes, maxMsgNums units)`` of consume queue), per window the five names'
   values extracted from the properties strings and the expression evaluated (msgs/s);
   peer: the tag filter's own step on the same windows (the exact-tag check on the ``TAGS``
   value, what the store does after the tag-hash match);
2. the same over windows of 65,536 (the Spark source's ``readBatchRows``);
3. the whole filter path: the queue scanned by ``read_window(raw=True, max_count=32)`` from
   offset 0 to the end (each window's records read and checked, the records of the matches
   gathered byte-exact, as a pull sends them), with the SQL92 filter; peer: the same scan with
   the tag filter (whose non-matching units are skipped on their consume-queue tag hash,
   without reading their records: Java's order too). msgs scanned/s.

Figures are wall-clock on this machine; nothing here is a test threshold.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from harness import Bench  # jobs/ is this script's directory

REPO = Path(__file__).resolve().parents[1]
EXPRESSION = "region = 'eu' AND amount >= 5000"
REGIONS = ("eu", "us", "ap", "sa", "af")
TIERS = ("gold", "silver", "bronze")


def fill(ms: object, n: int, batch: int = 100_000) -> int:
    """Put ``n`` messages (module docstring) into topic B queue 0; returns how many match."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(29)
    ms.create_topic("B", 1)  # type: ignore[attr-defined]
    matched = 0
    for lo in range(0, n, batch):
        k = min(batch, n - lo)
        region = rng.integers(0, 5, k)
        amount = rng.integers(0, 10_000, k)
        sel = (region == 0) & (amount >= 5000)
        matched += int(sel.sum())
        keys = pa.array(["region", "amount", "tier", "score", "vip"] * k)
        values = pa.concat_arrays(
            [
                pc.cast(pa.array(x), pa.string())
                for x in (
                    np.asarray(REGIONS)[region],
                    amount,
                    np.asarray(TIERS)[rng.integers(0, 3, k)],
                    np.round(rng.random(k) * 100, 2),
                    np.where(rng.random(k) < 0.1, "true", "false"),
                )
            ]
        )
        # interleave: row i's five pairs together
        order = np.arange(5 * k).reshape(5, k).T.ravel()
        props = pa.MapArray.from_arrays(
            pa.array(np.arange(0, 5 * k + 1, 5, dtype=np.int32)), keys, values.take(pa.array(order))
        )
        ms.put_batch(
            pa.table(
                {
                    "topic": ["B"] * k,
                    "body": [b"x" * 100] * k,
                    "queueId": [0] * k,  # type: ignore[attr-defined]
                    "tags": np.where(sel, "sel", "other"),
                    "properties": props,
                }
            ),
            dispatch=True,
        )
    return matched


def main() -> None:
    ap = Bench("bench_sql92", __doc__, rounds=3, rounds_help="repetitions of each measurement (medians printed)")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout whose store package is measured")
    with ap.run() as work:
        sys.path.insert(0, str(ap.args.repo))
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        import rmqlog
        from rmqlog.log.properties import ParsedProperties

        n, rounds = ap.args.messages, ap.args.rounds
        root = work / "store"
        with rmqlog.MessageStore.open(root) as ms:
            t0 = time.perf_counter()
            matched = fill(ms, n)
            print(
                f"setup: {n:,} messages, 5 properties each, {matched:,} match ({matched / n:.1%}); "
                f"{time.perf_counter() - t0:.1f} s (not timed)"
            )
            flt = rmqlog.compile_filter(EXPRESSION)
            # the stored properties strings, as the pull's record read has them
            props = pa.concat_arrays([c.properties for c, _ in _records(ms, n)])
            wanted = pa.array(["sel"], pa.string())

            def by_windows(size: int, sql: bool) -> tuple[float, int]:
                best: list[float] = []
                hits = 0
                for _ in range(rounds):
                    hits = 0
                    t = time.perf_counter()
                    for lo in range(0, n, size):
                        window = props.slice(lo, size)
                        if sql:
                            hits += int(np.count_nonzero(flt.mask_properties(window)))
                        else:
                            tags = ParsedProperties(window).column("TAGS")
                            hits += int(np.count_nonzero(np.asarray(pc.fill_null(pc.is_in(tags, wanted), False))))
                    best.append(time.perf_counter() - t)
                return n / statistics.median(best), hits

            for size, label in ((800, "the pull's 800-unit scan windows"), (65_536, "Spark's 65,536-row windows")):
                sql_rate, sql_hits = by_windows(size, True)
                tag_rate, tag_hits = by_windows(size, False)
                assert sql_hits == tag_hits == matched, (sql_hits, tag_hits, matched)
                print(
                    f"SQL92 evaluation, {label}: {sql_rate:,.0f} msgs/s | peer, exact-tag check: {tag_rate:,.0f} "
                    "msgs/s "
                    f"(ratio {sql_rate / tag_rate:.2f})"
                )
                ap.figure(
                    f"SQL92 evaluation over stored properties, windows of {size}",
                    sql_rate,
                    "msgs/s",
                    peer="exact-tag check, same windows",
                    peer_value=tag_rate,
                )

            def scan(**kw: object) -> tuple[float, int]:
                times: list[float] = []
                got = 0
                for _ in range(rounds):
                    got, pos = 0, 0
                    t = time.perf_counter()
                    while pos < n:
                        r = ms.read_window("B", 0, pos, max_count=32, raw=True, **kw)  # type: ignore[arg-type]
                        got += len(r.records) if r.records is not None else 0
                        pos = r.next_begin_offset
                    times.append(time.perf_counter() - t)
                return n / statistics.median(times), got

            sql_rate, sql_got = scan(sql92=flt)
            tag_rate, tag_got = scan(tags="sel")
            assert sql_got == tag_got == matched, (sql_got, tag_got, matched)
            print(
                f"pull path, read_window(raw, max_count=32) over the queue, SQL92: {sql_rate:,.0f} msgs scanned/s | "
                f"peer, tag filter: {tag_rate:,.0f} msgs scanned/s (ratio {sql_rate / tag_rate:.2f})"
            )
            ap.figure(
                "pull path scan with SQL92, max_count 32",
                sql_rate,
                "msgs/s",
                peer="pull path scan with the tag filter",
                peer_value=tag_rate,
            )


def _records(ms: object, n: int) -> list:
    """Every record's raw columns of queue B/0 (the pull's record read), not timed."""
    import numpy as np

    from rmqlog.queue.checked_read import read_unit_columns

    reader = ms.reader  # type: ignore[attr-defined]
    cq = reader.parts.consume_queue("B", 0)
    lo, hi, floor = reader.read_bounds(cq)
    units = cq.read(0, n)
    logical = np.arange(0, len(units), dtype=np.int64)
    cols = read_unit_columns(
        reader.parts.commitlog,
        cq,
        units,
        logical,
        topic="B",
        queue_id=0,
        floor=floor,
        tail=reader.parts.published_tail(),
        check_crc=False,
    )
    return [(c, None) for c in cols]


if __name__ == "__main__":
    main()
