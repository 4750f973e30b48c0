"""An independent scalar reference codec for RocketMQ's on-disk format.

It shares no code with the store (``store/``, imported as ``rmqlog``): it re-implements the
byte layout from RocketMQ's own source with nothing but the standard library (and ``crcmod``
for the CRC), one record at a time, so that the tests and the jobs (``jobs/torture``) can
check that the store reads and writes byte-compatible files. It is checked itself against
real RocketMQ files (``tests/test_refcodec_fixture.py``).

It lives at the top of the repository, beside ``store/``, ``tests/`` and ``jobs/``, so that
the tests and the jobs both import it (``import refcodec as rc``; the repository root on
``sys.path``), and outside the installed ``rmqlog`` package: a checker shipped inside what it
checks would not be independent of it.

- :mod:`refcodec.record`: the commitlog record (its byte table), its properties, hosts and
  message ids, the CRC and Java's ``String.hashCode``;
- :mod:`refcodec.files`: segment folders, the commitlog walked record by record, consume
  queues, RocketMQ's fastjson config files.
"""

from .files import (
    CQ_UNIT_SIZE,
    consume_queue_start,
    list_segments,
    parse_fastjson,
    read_consume_queue,
    walk_commitlog,
)
from .record import (
    BLANK_MAGIC,
    KIND_BLANK,
    KIND_END,
    KIND_RECORD,
    MAGIC_V1,
    MAGIC_V2,
    PROPERTY_NAME_VALUE_SEP,
    PROPERTY_SEP,
    SYSFLAG_BORN_HOST_V6,
    SYSFLAG_STORE_HOST_V6,
    DecodeKind,
    RefRecord,
    body_crc,
    decode_properties,
    decode_record,
    encode_blank,
    encode_properties,
    encode_record,
    encode_ref_record,
    host_bytes,
    java_string_hash,
    offset_msg_id,
    record_length,
)

__all__ = [
    "BLANK_MAGIC",
    "CQ_UNIT_SIZE",
    "KIND_BLANK",
    "KIND_END",
    "KIND_RECORD",
    "MAGIC_V1",
    "MAGIC_V2",
    "PROPERTY_NAME_VALUE_SEP",
    "PROPERTY_SEP",
    "SYSFLAG_BORN_HOST_V6",
    "SYSFLAG_STORE_HOST_V6",
    "DecodeKind",
    "RefRecord",
    "body_crc",
    "consume_queue_start",
    "decode_properties",
    "decode_record",
    "encode_blank",
    "encode_properties",
    "encode_record",
    "encode_ref_record",
    "host_bytes",
    "java_string_hash",
    "list_segments",
    "offset_msg_id",
    "parse_fastjson",
    "read_consume_queue",
    "record_length",
    "walk_commitlog",
]
