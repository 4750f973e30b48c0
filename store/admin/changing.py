"""The ``rmqlog`` commands that change a store: recover, dispatch, schedule, clean, reset-offset.

Each takes the open store and the parsed arguments and returns the exit status
(:mod:`rmqlog.admin.exits`). ``recover --repair`` needs the store to itself: the store's open
raises :class:`rmqlog.StoreBusyError` (exit 3) naming the processes that hold it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from ..message_store import MessageStore
from .exits import OK, USAGE, CliError
from .reading import groups, listing, require_queue
from .render import camel, emit


def recover(s: MessageStore, args: argparse.Namespace) -> int:
    r = s.recovery
    if r is None:  # cannot happen: an open with repair is the first opener or raises StoreBusyError
        raise CliError("the store was not recovered by this open", USAGE)
    obj = {
        "abnormal": r.abnormal,
        "walkStart": r.walk_start,
        "logEnd": r.log_end,
        "end": r.end,
        "droppedBytes": r.dropped_bytes,
        "redispatched": r.redispatched,
        "stateRebuilt": r.state_rebuilt,
        "problems": list(r.problems),
    }
    lines = [
        f"recovered ({'abnormal' if r.abnormal else 'normal'} exit): log ends at {r.end:,}, "
        f"{r.dropped_bytes:,} B dropped, {r.redispatched:,} records re-dispatched"
    ]
    lines += [f"problem: {p}" for p in r.problems]
    emit(obj, args.json, lines)
    return OK


def dispatch(s: MessageStore, args: argparse.Namespace) -> int:
    n = s.dispatch()
    emit({"dispatched": n}, args.json, [f"dispatched {n} records"])
    return OK


def _pass_lines(delayed: dict[int, int], timed: int, lost: int) -> list[str]:
    levels = ", ".join(f"level {k}: {v}" for k, v in sorted(delayed.items()))
    parts = []
    if delayed:
        parts.append(f"{sum(delayed.values())} delayed message(s) ({levels})")
    if timed:
        parts.append(f"{timed} timed message(s)")
    lines = [f"delivered {' and '.join(parts)}" if parts else "delivered nothing: no delayed or timed message due"]
    if lost:
        lines.append(f"  {lost} unit(s) skipped: their records were deleted before delivery")
    return lines


def schedule(
    s: MessageStore,
    args: argparse.Namespace,
    *,
    sleep: Callable[[float], Any] = time.sleep,
    clock: Callable[[], float] | None = None,
    quiet_every: float = 60.0,
    now_ms: Callable[[], int | None] = lambda: None,
) -> int:
    """Scheduler passes: one (``--once``: its result is printed, whatever it is), or one a
    second until interrupted (Ctrl-C: exit 0), printing each pass that delivered something
    and, while nothing is due, one quiet summary every ``quiet_every`` seconds. Delay-level
    messages are "delayed", RocketMQ 5 timer messages "timed" (the pass report keeps them
    apart). ``sleep``, ``clock`` (default: the store's monotonic clock) and the passes' ``now_ms``
    (default: the store's wall clock) are injectable (tests)."""
    clock = s.clock.monotonic if clock is None else clock
    quiet_since, quiet_passes = clock(), 0
    try:
        while True:
            report = s.scheduler.deliver_due(now_ms())
            delayed = {k: v for k, v in report.delivered.items() if v}
            if args.once or report.total or report.lost:
                emit(
                    {
                        "delivered": report.total,
                        "delayed": sum(delayed.values()),
                        "levels": {str(k): v for k, v in sorted(delayed.items())},
                        "timed": report.timed,
                        "lost": report.lost,
                    },
                    args.json,
                    _pass_lines(delayed, report.timed, report.lost),
                )
                quiet_since, quiet_passes = clock(), 0
            else:
                quiet_passes += 1
                if clock() - quiet_since >= quiet_every:
                    seconds = clock() - quiet_since
                    emit(
                        {"delivered": 0, "quietPasses": quiet_passes, "quietSeconds": round(seconds)},
                        args.json,
                        [f"nothing due in the last {seconds:.0f} s ({quiet_passes} pass(es))"],
                    )
                    quiet_since, quiet_passes = clock(), 0
            if args.once:
                return OK
            sys.stdout.flush()
            sleep(1.0)
    except KeyboardInterrupt:
        return OK


def clean(s: MessageStore, args: argparse.Namespace) -> int:
    report = s.clean_expired(force=args.force)
    lines = [
        f"deleted {len(report.segments)} commitlog segment(s), {len(report.consume_queue_files)} consume-queue "
        f"file(s), {len(report.index_files)} index file(s): {report.bytes:,} B "
        f"(reason: {report.reason or 'none due'}, disk {report.disk_used_percent:.1f}% used)",
        f"commitlog starts at {report.log_start:,}"
        + (f" (was {report.log_start_before:,})" if report.segments else ""),
    ]
    lines += [f"busy (held by a reader): {path}" for path in report.busy]
    emit(camel(report.to_dict()), args.json, lines)
    return OK


def reset_offset(s: MessageStore, args: argparse.Namespace) -> int:
    """mqadmin resetOffsetByTime: per queue, the group's committed offset set to the earliest,
    the latest, or the first message stored at or after a time. A group with no committed
    offset at all (a misspelt name, most likely) is refused unless ``--create``."""
    count = require_queue(s, args.topic, args.queue)
    known = groups(s)
    if args.group not in known and not args.create:
        raise CliError(
            f"no consumer group {args.group!r} in {s.paths.root} (none with committed offsets); "
            f"groups: {listing(known)}; --create to start a new group",
            USAGE,
        )
    rows = []
    for q in [args.queue] if args.queue is not None else range(count):
        before = s.committed_offset(args.group, args.topic, q)
        if args.earliest:
            offset = s.min_offset(args.topic, q)
        elif args.latest:
            offset = s.max_offset(args.topic, q)
        else:
            offset = s.offset_for_timestamp(args.topic, q, args.timestamp)
        s.commit_offset(args.group, args.topic, q, offset)
        rows.append({"queueId": q, "before": before, "offset": offset})
    emit(
        {"group": args.group, "topic": args.topic, "queues": rows},
        args.json,
        [f"{args.group} {args.topic}/{r['queueId']}: {r['before']} -> {r['offset']}" for r in rows],
    )
    return OK
