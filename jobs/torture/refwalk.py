"""The commitlog as the independent reference decoder (``refcodec``) reads it, record by record.

Every record's CRC and lengths are checked by the decoder; each record is reduced to a
:data:`RefRec` (where it is, where it belongs, and which torture message it holds, or why
its body is not intact). Segments are decoded up to the last non-hole byte of the file and
cached by a hash of their bytes, so a store that lives on for many trials is not decoded
from scratch each time.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path
from typing import Any

import refcodec as rc

from .messages import BadMessage, Ident, identify

#: One record as the reference decoder saw it: offset, size, topic, queue id, queue offset,
#: tags code, identity (or why the body is not intact).
RefRec = tuple[int, int, str, int, int, int, "Ident | str"]


def _data_end(path: str, size: int) -> int:
    """Where the last non-hole byte of a (sparse) segment file ends: past it, only zeros."""
    fd = os.open(path, os.O_RDONLY)
    try:
        end, pos = 0, 0
        while pos < size:
            try:
                lo = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            pos = end = os.lseek(fd, lo, os.SEEK_HOLE)
        return min(end, size)
    except OSError:
        return size
    finally:
        os.close(fd)


def decode_segment(start: int, data: bytes) -> tuple[list[RefRec], list[str], str, int]:
    """Decode one segment with the reference codec: records, problems, how it ended, where."""
    recs: list[RefRec] = []
    pos = 0
    while pos < len(data):
        try:
            kind, value = rc.decode_record(data, pos)
        except ValueError as exc:
            return recs, [f"commitlog offset {start + pos}: reference decoder: {exc}"], "bad", pos
        if kind == rc.KIND_END:
            return recs, [], "end", pos
        if kind == rc.KIND_BLANK:
            return recs, [], "blank", pos
        assert isinstance(value, rc.RefRecord)
        probs = []
        if value.physical_offset != start + pos:
            probs.append(f"commitlog offset {start + pos}: PHYSICALOFFSET {value.physical_offset}")
        try:
            ident: Ident | str = identify(value.body, value.properties.get("KEYS"))
        except BadMessage as exc:
            ident = str(exc)
        recs.append(
            (start + pos, value.total_size, value.topic, value.queue_id, value.queue_offset, value.tags_code, ident)
        )
        if probs:
            return recs, probs, "bad", pos
        pos += value.total_size
    return recs, [], "full", pos


def walk_log(cl_dir: Path, cache_path: Path) -> tuple[list[RefRec], list[str], int]:
    """Every record of the commitlog by the reference decoder: (records, problems, end of log).

    Decoded segments are cached by a hash of their bytes (same bytes, same records), so a
    store that lives on for many trials is not decoded from scratch each time.
    """
    segs = rc.list_segments(str(cl_dir)) if cl_dir.is_dir() else []
    try:
        cache = pickle.loads(cache_path.read_bytes())
    except (OSError, pickle.PickleError, EOFError):
        cache = {}
    new_cache: dict[int, Any] = {}
    records: list[RefRec] = []
    problems: list[str] = []
    seg_size = os.path.getsize(segs[0][1]) if segs else 0
    log_end: int | None = None
    for i, (start, path) in enumerate(segs):
        if i and start != segs[i - 1][0] + seg_size:
            problems.append(f"segment {path} starts at {start}, expected {segs[i - 1][0] + seg_size}")
        if os.path.getsize(path) != seg_size:
            problems.append(f"segment {path} has {os.path.getsize(path)} bytes, not {seg_size}")
        with open(path, "rb") as f:
            data = f.read(_data_end(path, seg_size))
        digest = hashlib.blake2b(data, digest_size=16).digest()
        hit = cache.get(start)
        got = hit[1] if hit is not None and hit[0] == digest else decode_segment(start, data)
        new_cache[start] = (digest, got)
        recs, probs, how, pos = got
        if log_end is not None and recs:
            problems.append(f"segment {path}: {len(recs)} records after the end of the log at {log_end}")
        records.extend(recs)
        problems.extend(probs)
        # zeros (or a hole) before the segment's end, or a bad record: the log ends here
        if log_end is None and (how in ("end", "bad") or (how == "full" and pos < seg_size)):
            log_end = start + pos
    tmp = cache_path.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(new_cache, protocol=pickle.HIGHEST_PROTOCOL))
    tmp.replace(cache_path)
    if log_end is None:
        log_end = segs[-1][0] + seg_size if segs else 0
    return records, problems, log_end
