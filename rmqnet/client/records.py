"""Pull and query bodies (stored commitlog records, concatenated) into the message table:
the store's vectorized decoder, :func:`rmqlog.decode_records` (``rmqlog.MESSAGE_SCHEMA``;
``rmqlog.CorruptRecordError`` naming the byte position when the bytes are not whole records)."""

from __future__ import annotations

from rmqlog import decode_records

__all__ = ["decode_records"]
