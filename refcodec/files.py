"""The files of a store read with the reference codec: segment folders, the commitlog walked
record by record, consume queues, and RocketMQ's fastjson config files.

ConsumeQueue unit (20 bytes): ``long commitLogOffset | int size | long tagsCode``.
"""

from __future__ import annotations

import json
import os
import re
import struct
from typing import Final

from .record import KIND_BLANK, KIND_END, RefRecord, decode_record

CQ_UNIT_SIZE: Final = 20
"""Bytes per consume-queue unit."""

_SEGMENT_NAME = re.compile(r"^\d{20}$")


# --------------------------------------------------------------------------- directories


def list_segments(dir_path: str) -> list[tuple[int, str]]:
    """Return ``(start offset, path)`` of the 20-digit-named files in ``dir_path``, sorted.

    Other files (``.tmp``, ``.bak``, ...) are ignored.
    """
    out = [
        (int(name), os.path.join(dir_path, name))
        for name in os.listdir(dir_path)
        if _SEGMENT_NAME.match(name) and os.path.isfile(os.path.join(dir_path, name))
    ]
    out.sort()
    return out


def _check_contiguous(segments: list[tuple[int, str]], segment_size: int) -> None:
    """Raise ValueError unless each segment starts ``segment_size`` after the previous one."""
    for (a, _), (b, path) in zip(segments, segments[1:], strict=False):
        if b != a + segment_size:
            raise ValueError(f"segment {path} starts at {b}, expected {a + segment_size}")


def walk_commitlog(dir_path: str, segment_size: int | None = None) -> list[RefRecord]:
    """Decode every message record of a commitlog directory, in offset order.

    Each segment (20-digit name = its start offset) is walked from its first byte; a blank
    record moves to the next segment (so does reaching the segment's end); zero bytes end the
    walk. ``segment_size`` is inferred from the first segment's file size when not given.
    Raises ValueError on a malformed record, a record crossing its segment's end, a record
    whose PHYSICALOFFSET differs from its position, or non-contiguous segment names.
    """
    segments = list_segments(dir_path)
    if not segments:
        return []
    if segment_size is None:
        segment_size = os.path.getsize(segments[0][1])
    if segment_size <= 0:
        raise ValueError(f"bad segment size {segment_size}")
    _check_contiguous(segments, segment_size)

    records: list[RefRecord] = []
    for start, path in segments:
        with open(path, "rb") as f:
            data = f.read(segment_size)
        pos = 0
        while pos < len(data):
            kind, value = decode_record(data, pos)
            if kind == KIND_END:
                return records
            if kind == KIND_BLANK:
                break
            assert isinstance(value, RefRecord)
            if value.physical_offset != start + pos:
                raise ValueError(f"{path}@{pos}: PHYSICALOFFSET {value.physical_offset} != {start + pos}")
            records.append(value)
            pos += value.total_size
    return records


def read_consume_queue(dir_path: str) -> list[tuple[int, int, int]]:
    """Read the units ``(commitLogOffset, size, tagsCode)`` of one consume-queue directory.

    ``dir_path`` is ``<root>/consumequeue/<topic>/<queueId>``. Segments (named by 20-digit
    byte offset, size inferred from the first file) are read in order, stopping at the first
    all-zero unit. The first returned unit has index ``consume_queue_start(dir_path)``.
    Raises ValueError on non-contiguous segments or a segment size not a multiple of 20.
    """
    segments = list_segments(dir_path)
    if not segments:
        return []
    segment_size = os.path.getsize(segments[0][1])
    if segment_size % CQ_UNIT_SIZE or segments[0][0] % CQ_UNIT_SIZE:
        raise ValueError(f"consume queue segment size/start not a multiple of 20 in {dir_path}")
    _check_contiguous(segments, segment_size)

    zero = bytes(CQ_UNIT_SIZE)
    units: list[tuple[int, int, int]] = []
    for _, path in segments:
        with open(path, "rb") as f:
            data = f.read(segment_size)
        for pos in range(0, len(data) - CQ_UNIT_SIZE + 1, CQ_UNIT_SIZE):
            chunk = data[pos : pos + CQ_UNIT_SIZE]
            if chunk == zero:
                return units
            offset, size, tags_code = struct.unpack(">qiq", chunk)
            units.append((offset, size, tags_code))
    return units


def consume_queue_start(dir_path: str) -> int:
    """Return the logical index of the first unit on disk (first segment start / 20)."""
    segments = list_segments(dir_path)
    return segments[0][0] // CQ_UNIT_SIZE if segments else 0


# --------------------------------------------------------------------------- config files

# A JSON string (skipped unchanged), or an unquoted integer object key right after '{' or ','.
_FASTJSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|(?<=[{,])(\s*)(-?\d+)(\s*:)')


def parse_fastjson(text: str) -> object:
    """Parse a RocketMQ config file written by fastjson, e.g. ``consumerOffset.json``.

    fastjson writes integer map keys unquoted (``{0:250,1:250}``), which is not JSON: such
    keys are quoted (outside string literals only), then the text goes to ``json.loads``.
    Integer keys therefore come back as strings (``"0"``). Strict JSON parses unchanged.
    """

    def quote(m: re.Match[str]) -> str:
        if m.group(2) is None:  # a string literal
            return m.group(0)
        return f'{m.group(1)}"{m.group(2)}"{m.group(3)}'

    return json.loads(_FASTJSON_TOKEN.sub(quote, text))
