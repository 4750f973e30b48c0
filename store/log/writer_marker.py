"""The idempotence marker of a batch: property ``RMQLOG_WRITER`` = ``"<sequence> <writer>"``.

``put_batch(..., writer=, sequence=)`` appends a batch only if the store has not yet recorded
``sequence`` (or a later one) for ``writer``; the new sequence is published in
``append.state`` and also written as this property on the batch's last record, so that an
append state rebuilt from the commitlog (:mod:`rmqlog.log.state_rebuild`) still knows it.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..arguments import utf8_problem
from ..errors import InvalidMessageError
from .properties import PROPERTY_WRITER, ParsedProperties
from .record import NAME_VALUE_SEPARATOR


def writer_problem(writer: object) -> str | None:
    """Why ``writer`` is not a usable writer name, or ``None``: a non-empty string of at most
    1024 UTF-8 bytes (no lone surrogate) without \\x00-\\x02 (the properties' separators)."""
    if (
        not isinstance(writer, str)
        or not writer
        or utf8_problem(writer) is not None
        or len(writer.encode()) > 1024
        or any(c in writer for c in "\x00\x01\x02")
    ):
        return f"writer must be a non-empty string of at most 1024 UTF-8 bytes without \\x00-\\x02, got {writer!r}"
    return None


def validate_writer(writer: object, sequence: object) -> None:
    """Check an idempotence (writer, sequence) pair; raises :class:`InvalidMessageError`."""
    problem = writer_problem(writer)
    if problem is not None:
        raise InvalidMessageError(problem, row=None, field="writer")
    if not isinstance(sequence, int) or isinstance(sequence, bool) or not 0 <= sequence < 1 << 63:
        raise InvalidMessageError("sequence must be an int in [0, 2**63)", row=None, field="sequence")


def writer_marker(writer: object, sequence: object) -> tuple[str, str] | None:
    """The ``RMQLOG_WRITER`` property of an idempotent batch, ``None`` for a plain one."""
    if writer is None and sequence is None:
        return None
    validate_writer(writer, sequence)
    return (PROPERTY_WRITER, f"{sequence} {writer}")


def writer_markers(properties: pa.Array) -> list[tuple[str, int]]:
    """The ``RMQLOG_WRITER`` markers in a run of properties strings, in order (few rows carry one).

    Only a property *named* ``RMQLOG_WRITER`` counts (the properties are parsed with Java's
    rules: a value, a key or tags holding that text is not one; the store refuses user
    properties of that name, and values cannot hold the separators), and only a value of the
    form the store writes: ``"<sequence> <writer>"``, the sequence ASCII digits below 2**63,
    the writer as :func:`validate_writer` accepts it. Anything else (a foreign record) is ignored.
    """
    hits = pc.match_substring(properties, PROPERTY_WRITER + NAME_VALUE_SEPARATOR)
    rows = properties.filter(hits)
    if not len(rows):
        return []
    out = []
    for value in ParsedProperties(rows).column(PROPERTY_WRITER).to_pylist():  # one per batch, not per message
        if value:
            seq, _, name = value.partition(" ")
            if seq.isascii() and seq.isdigit() and len(seq) <= 19 and int(seq) < 1 << 63 and _valid_writer(name):
                out.append((name, int(seq)))
    return out


def _valid_writer(name: str) -> bool:
    try:
        validate_writer(name, 0)
    except InvalidMessageError:
        return False
    return True
