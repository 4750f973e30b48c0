"""The C helper's encoding kernels (loaded by :mod:`rmqlog.native`; optional).

Every encoding module calls them through this module (``native.pack_records(...)``), so a
test switches one off in one place (``monkeypatch.setattr(native, "pack_records", None)``)
and each path also runs without the helper. ``None`` (and ``CLMUL`` false) when not built.

- ``crc32_batch(data, offsets, out)``: the BODYCRC of every value, GIL released;
- ``CLMUL``: whether that CRC runs on carry-less multiply (~14 GB/s; else a table, ~2.2 GB/s);
- ``all_same(offsets, offset, n, data)``: whether every value of a string column is equal;
- ``longest_value(offsets, offset, n, data_len)``: the longest value's length;
- ``pack_records`` / ``patch_records``: records packed from header rows, bodies and trailer
  pieces into one buffer; the three lock-given fields written into packed records;
- ``pack_plain``: a whole plain batch packed in one call (see :mod:`.plain`).
"""

from __future__ import annotations

from ...native import (
    CLMUL,
    all_same,
    crc32_batch,
    longest_value,
    pack_plain,
    pack_records,
    patch_records,
)

__all__ = ["CLMUL", "all_same", "crc32_batch", "longest_value", "pack_plain", "pack_records", "patch_records"]
