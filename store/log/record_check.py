"""What a checked decode requires of each record (:class:`RecordCheck`: the header fits, a
record starts there, its fixed fields match what points at it), and the error naming the first
row that fails (:class:`BadRecordError`). Each check is one numpy comparison over the whole read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import CorruptRecordError
from .record import BLANK_MAGIC, HEADER_V4, MAGIC_V1, MAGIC_V2, TRAILER_LENGTH_FIELDS, field_problems

#: The smallest TOTALSIZE of any record: an IPv4 V1 header, empty body, topic and properties.
MIN_RECORD_SIZE = HEADER_V4.itemsize + TRAILER_LENGTH_FIELDS


class BadRecordError(CorruptRecordError):
    """A checked :func:`read_columns` found row ``row`` of its read bad (see :class:`RecordCheck`).

    ``against_unit``: the record does not match what points at it (its consume-queue unit:
    the reader names the unit, :class:`rmqlog.errors.CorruptQueueError`) rather than being
    damaged in itself. ``path`` is set by the caller that knows the segment; readers raise
    the public error, never this one.
    """

    def __init__(self, reason: str, *, row: int, offset: int, against_unit: bool, path: str | None = None) -> None:
        super().__init__(reason, path=path, offset=offset)
        self.reason = reason
        self.row = row
        self.against_unit = against_unit


@dataclass(frozen=True)
class RecordCheck:
    """What a checked :func:`read_columns` requires of each record it decodes.

    Always: a record starts there (magic V1/V2, not a blank or zero bytes) and its lengths
    (header, BODYLENGTH, TOPICLENGTH, PROPERTIESLENGTH) add up to its TOTALSIZE. ``size``,
    ``queue_offset`` (per row) and ``queue_id``: the consume-queue units that point at the
    records, whose TOTALSIZE, QUEUEID and QUEUEOFFSET must be those (the caller has checked
    that each unit's span lies inside ``limit``); the expected topic is read_columns'
    ``topic``. ``limit``: bytes of the source that may be read (the published tail, relative).
    ``crc``: each body's CRC must equal its BODYCRC.
    """

    size: np.ndarray | None = None
    queue_id: int | None = None
    queue_offset: np.ndarray | None = None
    crc: bool = True
    limit: int | None = None

    def rows(self, part: slice, limit: int | None) -> RecordCheck:
        """The check of rows ``part`` of the read, within ``limit``."""
        return RecordCheck(
            size=None if self.size is None else self.size[part],
            queue_id=self.queue_id,
            queue_offset=None if self.queue_offset is None else self.queue_offset[part],
            crc=self.crc,
            limit=limit,
        )

    def header_fits(self, base: int, positions: np.ndarray) -> None:
        """Before the headers are gathered: each lies inside ``limit``."""
        if self.limit is None:
            return
        raise_first_bad_row(
            base,
            positions,
            [
                (
                    (positions < 0) | (positions > self.limit - HEADER_V4.itemsize),
                    lambda r: "no whole record header before the published tail",
                    self.size is not None,
                )
            ],
        )

    def headers(self, base: int, positions: np.ndarray, header: dict[str, np.ndarray]) -> None:
        """The fixed fields, before anything they locate is gathered."""
        magic = header["magic"]
        total = header["totalSize"].astype(np.int64)
        unit = self.size is not None
        tests: list[tuple[np.ndarray, Callable[[int], str], bool]] = [
            (
                ~((magic == MAGIC_V1) | (magic == MAGIC_V2)),
                lambda r: f"no record there: {not_a_record(magic[r], total[r])}",
                unit,
            ),
        ]
        if self.size is not None:
            size = self.size
            tests.append(
                (total != size, lambda r: f"the record there has TOTALSIZE {total[r]}, the unit says {size[r]}", True)
            )
        elif self.limit is not None:
            limit = self.limit
            tests.append(
                (
                    (total < MIN_RECORD_SIZE) | (total > limit - positions),
                    lambda r: f"TOTALSIZE {total[r]} out of range",
                    False,
                )
            )
        if self.queue_id is not None:
            qid, want = header["queueId"], self.queue_id
            tests.append((qid != want, lambda r: f"the record there is of queue {qid[r]}, not {want}", True))
        if self.queue_offset is not None:
            qoff, want_off = header["queueOffset"], self.queue_offset
            tests.append((qoff != want_off, lambda r: f"the record there has queue offset {qoff[r]}", True))
        raise_first_bad_row(base, positions, tests)

    def fields(self, base: int, positions: np.ndarray, header: dict[str, np.ndarray]) -> None:
        """Header values no store writes (nothing checksums them; the scan's own rule,
        :func:`rmqlog.log.record.field_problems`), once every row's header layout is known."""
        bad, why = field_problems(
            header["queueId"],
            header["queueOffset"],
            header["physicalOffset"],
            header["bornTimestamp"],
            header["storeTimestamp"],
            base + positions,
        )
        if bad < len(positions):
            first = np.zeros(len(positions), bool)
            first[bad] = True
            raise_first_bad_row(base, positions, [(first, lambda r: why, False)])


def not_a_record(magic: int, total: int) -> str:
    """What is at a position whose magic is not a record's."""
    if magic == BLANK_MAGIC:
        return "a blank (end-of-segment) record"
    if magic == 0 and total == 0:
        return "zero bytes"
    return f"magic 0x{int(magic) & 0xFFFFFFFF:08X}"


def raise_first_bad_row(
    base: int, positions: np.ndarray, tests: list[tuple[np.ndarray, Callable[[int], str], bool]]
) -> None:
    """Raise :class:`BadRecordError` for the first row that fails any test.

    Each test: (mask of failing rows, the reason for a row, whether the unit is at fault);
    for a row failing several, the first test in the list names the reason.
    """
    best: tuple[int, Callable[[int], str], bool] | None = None
    for mask, reason, unit in tests:
        if mask.any():
            r = int(np.argmax(mask))
            if best is None or r < best[0]:
                best = (r, reason, unit)
    if best is not None:
        r, reason, unit = best
        raise BadRecordError(reason(r), row=r, offset=base + int(positions[r]), against_unit=unit)
