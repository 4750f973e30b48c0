"""Pull and query bodies (stored commitlog records, concatenated) into messages.

Two decoders of the store, the same values (``tests/test_decode_rows.py``):
:func:`rmqlog.decode_records` builds the message table (``rmqlog.MESSAGE_SCHEMA``) with Arrow,
a fixed ~1 ms whatever the number of records; :func:`rmqlog.decode_record_rows` decodes one
record at a time into a dict (~10 us a record). :class:`Reply` takes the rows for a body of at
most :data:`SMALL_REPLY` records (a pull of a few messages then costs in proportion to them)
and the table for a bigger one, and makes the other form only when asked. Both raise
``rmqlog.CorruptRecordError`` (naming the byte position) when the bytes are not whole records.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from rmqlog import MESSAGE_SCHEMA, decode_record_rows, decode_records

#: the most records a body may hold to be decoded record by record (above, the table's fixed
#: cost is less than the rows': measured crossover ~110 records of 1 KiB)
SMALL_REPLY = 64


class Reply:
    """The messages of one body: :attr:`rows` (a list of dicts, ``MESSAGE_SCHEMA``'s names)
    and :attr:`messages` (the Arrow table), each made once, one of them at construction
    (which checks the body: ``rmqlog.CorruptRecordError``)."""

    __slots__ = ("_rows", "_table")

    def __init__(self, body: bytes | memoryview) -> None:
        self._table: pa.Table | None = None
        self._rows = decode_record_rows(body, max_rows=SMALL_REPLY) if len(body) else []
        if self._rows is None:
            self._table = decode_records(body)

    @property
    def rows(self) -> list[dict[str, Any]]:
        if self._rows is None:
            assert self._table is not None
            self._rows = self._table.to_pylist()
        return self._rows

    @property
    def messages(self) -> pa.Table:
        if self._table is None:
            self._table = (
                pa.Table.from_pylist(self.rows, schema=MESSAGE_SCHEMA) if self._rows else MESSAGE_SCHEMA.empty_table()
            )
        return self._table

    def __len__(self) -> int:
        return len(self._rows) if self._rows is not None else self.messages.num_rows


__all__ = ["Reply", "SMALL_REPLY", "decode_record_rows", "decode_records"]
