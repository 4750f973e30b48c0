"""``<root>/retention.state`` (ours; RocketMQ tooling ignores it): where the commitlog starts
since retention last deleted segments, and how far the consume queues were cleaned after it.

JSON, replaced atomically (``<path>.tmp`` + rename), durably (file and folder fsynced),
padded with spaces to :data:`FILE_SIZE` bytes::

    {"version": 2, "logStart": 2147483648, "queuesCleaned": 1073741824, "from": 0,
     "head": 3735928559, "crc": 123456789}

- ``logStart``: every commitlog segment wholly below it was deleted by retention, or is being
  deleted: the file is written *before* a pass removes any segment. A segment found below it
  later is the leftover of a pass cut short (a kill, or a power loss that undid an unlink),
  and is removed when the store is next opened by its first opener, or by the next pass; so
  a pass cut at any instant leaves a log that starts at a segment boundary, without a gap.
- ``queuesCleaned``: the commitlog start the consume queues (and index files) were last
  cleaned against. While it is below ``logStart`` a pass cleans them; otherwise a pass that
  deletes nothing walks no queue folder (what keeps it under a millisecond).
- ``from``: where the log started when the pass wrote the file (the pass deletes
  ``[from, logStart)``).
- ``head``: CRC-32 of the first :data:`HEAD_BYTES` bytes of the segment at ``logStart`` (the
  header of the record that starts the log after the pass; ``null`` when the segment had no
  record yet): names *this* log's segment, not another store's at the same offset.
- ``crc``: CRC-32 of ``"version,logStart,queuesCleaned,from,head"``: a flipped bit makes the
  file unreadable.

The file alone never deletes anything. Completing a pass cut short deletes acknowledged
segments, so :func:`completion_doubt` first checks the file against the log: version 2 with
its CRC, ``logStart`` a segment boundary at or below the published tail and the flushed
position, the segment there present with the recorded ``head``, and no segment below
``from``. When any check fails nothing is deleted, the log is kept and the doubt is reported
(a warning, the recovery report); the next pass then records where the log really starts,
and the segments left go by the usual rules of retention.

Absent: retention never deleted anything here (a store whose oldest segments were removed by
hand, or by RocketMQ, simply starts at its first segment). Unreadable or malformed: treated
as absent, with a warning (it only completes deletions; it is never needed to read the log).
Version 1 files (no ``from``, ``head`` nor ``crc``) are read, but never complete a deletion.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

from .. import safe_open
from ..errors import DiskFullError
from ..fileio import replace_file, rewrite_in_place
from ..paths import segment_name

log = logging.getLogger(__name__)

VERSION = 2
#: The file's size: the JSON padded with spaces (a rewrite in place never needs a new block).
FILE_SIZE = 256
#: Bytes of the segment at ``logStart`` its ``head`` covers (a record's header: offsets, CRC, times).
HEAD_BYTES = 64
_MAX = 1 << 63


@dataclass(frozen=True)
class RetentionState:
    log_start: int = 0
    queues_cleaned: int = 0
    #: where the log started when the state was written (``None``: ``log_start``)
    from_: int | None = None
    #: the CRC of the head of the segment at ``log_start`` (``None``: unknown)
    head: int | None = None
    #: read from a version-2 file whose CRC matched (what may complete a deletion)
    checked: bool = False


def segment_head(commitlog_dir: Path, start: int) -> int | None:
    """CRC-32 of the first :data:`HEAD_BYTES` bytes of the segment at ``start``; ``None`` when
    it is absent, not a regular file, or holds no record there yet (zeros)."""
    try:
        fd = safe_open.open_file(commitlog_dir / segment_name(start), os.O_RDONLY)
    except OSError:  # (a WrongFileTypeError too: not a segment to read a head from)
        return None
    try:
        raw = os.pread(fd, HEAD_BYTES, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) < HEAD_BYTES or not any(raw):
        return None
    return zlib.crc32(raw)


def _crc(log_start: int, cleaned: int, from_: int, head: int | None) -> int:
    return zlib.crc32(f"{VERSION},{log_start},{cleaned},{from_},{head if head is not None else 'null'}".encode())


class RetentionStateFile:
    """Read and durably replace ``retention.state``; ``commitlog_dir`` is where the segments
    whose head the file records are."""

    def __init__(self, path: Path, commitlog_dir: Path | None = None) -> None:
        self.path = path
        self.commitlog_dir = commitlog_dir if commitlog_dir is not None else path.parent / "commitlog"

    def read(self) -> RetentionState | None:
        """The state, or ``None`` when absent or unreadable (logged)."""
        try:
            raw = safe_open.read_bytes(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:  # a directory in its place, ...
            log.warning("ignoring unreadable %s (%s)", self.path, exc)
            return None
        try:
            d = json.loads(raw)
            start, cleaned = d["logStart"], d.get("queuesCleaned", 0)
            version = d.get("version")
            if version not in (1, VERSION) or not all(type(v) is int and 0 <= v < _MAX for v in (start, cleaned)):
                raise ValueError("unexpected fields")
            if version == 1:
                return RetentionState(start, min(cleaned, start))
            from_, head, crc = d["from"], d["head"], d["crc"]
            if type(from_) is not int or not 0 <= from_ <= start or not (head is None or type(head) is int):
                raise ValueError("unexpected fields")
            if crc != _crc(start, cleaned, from_, head):
                raise ValueError("its crc does not match its content")
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            log.warning("ignoring unreadable %s (%s)", self.path, exc)
            return None
        return RetentionState(start, min(cleaned, start), from_, head, checked=True)

    def write(self, state: RetentionState) -> None:
        """Replace the file durably (``head`` taken from the segment at ``log_start`` now). On
        a full disk (when retention is needed most) an existing file is rewritten in place
        instead: always :data:`FILE_SIZE` bytes (JSON padded with spaces), so its block is
        reused; a write torn by a crash then reads as unreadable, which only means a pass cut
        short is not completed at open. Raises :class:`rmqlog.errors.DiskFullError` if there
        is no file yet and no room for one."""
        from_ = state.from_ if state.from_ is not None else state.log_start
        head = segment_head(self.commitlog_dir, state.log_start)
        body = json.dumps(
            {
                "version": VERSION,
                "logStart": state.log_start,
                "queuesCleaned": state.queues_cleaned,
                "from": from_,
                "head": head,
                "crc": _crc(state.log_start, state.queues_cleaned, from_, head),
            }
        )
        data = body.encode().ljust(FILE_SIZE)
        try:
            replace_file(self.path, data, durable=True)
        except DiskFullError:
            if safe_open.kind(self.path) is None:
                raise
            rewrite_in_place(self.path, data)
            fd = safe_open.open_file(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def completion_doubt(
    state: RetentionState,
    first: int,
    segment_size: int,
    tail: int,
    flushed: int | None,
    commitlog_dir: Path,
) -> str | None:
    """Why ``state`` may not complete a pass cut short (delete the segments from ``first`` up
    to its ``log_start``), or ``None`` when it agrees with the log (see the module docstring).
    ``tail``: the published tail; ``flushed``: the durable flushed position (``None``: unknown)."""
    start = state.log_start
    if not state.checked:
        return "it has no checksum (a version 1 file)"
    if start % segment_size:
        return f"its start {start} is not a segment boundary (segments of {segment_size} bytes)"
    if start > tail:
        return f"its start {start} is past the published end of the log {tail}"
    if flushed is None or start > flushed:
        return f"its start {start} is past the flushed position {flushed}"
    if state.from_ is not None and first < state.from_:
        return f"the log starts at {first}, below where the pass began ({state.from_})"
    head = segment_head(commitlog_dir, start)
    if state.head is None or head != state.head:
        return f"the segment at {start} is not the one the pass recorded (head {head}, recorded {state.head})"
    return None
