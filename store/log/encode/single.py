"""One message given as Python values (``MessageStore.put``) as the one-row table the batch
path takes; the checks the batch path cannot make on a typed column (a value's Python type)
are made here, with the same typed errors (row 0, the field named)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa

from ...arguments import utf8_problem
from ...errors import InvalidMessageError, QueueIdError
from ...paths import validate_topic


def single_message_table(
    topic: str,
    body: bytes | str,
    *,
    queue_id: int | None,
    tags: str | None,
    keys: Iterable[str] | str,
    properties: Mapping[str, str] | None,
    flag: int,
    delay_level: int | None = None,
    deliver_time_ms: int | None = None,
) -> pa.Table:
    """The row of one message; ``keys`` as a list or a space-separated string (RocketMQ's form)."""
    validate_topic(topic, row=0)
    if isinstance(keys, str):
        keys = [k for k in keys.split(" ") if k]
    else:
        try:
            keys = list(keys)
        except TypeError:
            raise InvalidMessageError("keys must be a string or an iterable of strings", row=0, field="keys") from None
    if not isinstance(body, bytes | bytearray | memoryview | str):
        raise InvalidMessageError(f"body must be bytes or str, got {type(body).__name__}", row=0, field="body")
    if properties is not None and not isinstance(properties, Mapping):
        raise InvalidMessageError(
            f"properties must be a mapping of strings, got {type(properties).__name__}", row=0, field="properties"
        )
    checks = (
        ("tags", tags is None or isinstance(tags, str)),
        ("keys", all(isinstance(k, str) for k in keys)),
        (
            "properties",
            properties is None or all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items()),
        ),
        ("flag", isinstance(flag, int) and not isinstance(flag, bool)),
        ("queueId", queue_id is None or (isinstance(queue_id, int) and not isinstance(queue_id, bool))),
        ("delayLevel", delay_level is None or (isinstance(delay_level, int) and not isinstance(delay_level, bool))),
        (
            "deliverTime",
            deliver_time_ms is None or (isinstance(deliver_time_ms, int) and not isinstance(deliver_time_ms, bool)),
        ),
    )
    for name, ok in checks:
        if not ok:
            raise InvalidMessageError("has a value of the wrong type", row=0, field=name)
    # text that cannot be UTF-8 (a lone surrogate): the batch path would meet it as bytes
    # that are not UTF-8; here Arrow would raise an untyped UnicodeEncodeError first
    texts = [
        ("body", body if isinstance(body, str) else ""),
        ("tags", tags or ""),
        *(("keys", k) for k in keys),
        *(("properties", t) for kv in (properties or {}).items() for t in kv),
    ]
    for name, text in texts:
        problem = utf8_problem(text)
        if problem is not None:
            raise InvalidMessageError(f"{text!r} {problem}", row=0, field=name)
    if queue_id is not None and not 0 <= queue_id < 1 << 31:  # the batch path names the topic's limit
        raise QueueIdError(f"queue id {queue_id} is out of range [0, 2**31)", row=0, field="queueId")
    if not -(1 << 31) <= flag < 1 << 31:
        raise InvalidMessageError("flag does not fit in 32 bits", row=0, field="flag")
    cols: dict[str, pa.Array] = {
        "topic": pa.array([topic], pa.string()),
        "body": pa.array([body.encode() if isinstance(body, str) else bytes(body)], pa.binary()),
        "queueId": pa.array([queue_id], pa.int32()),
        "tags": pa.array([tags], pa.string()),
        "keys": pa.array([keys], pa.list_(pa.string())),
        "flag": pa.array([flag], pa.int64()),
    }
    if properties:
        cols["properties"] = pa.array([list(properties.items())], pa.map_(pa.string(), pa.string()))
    if delay_level is not None:
        if not -(1 << 31) <= delay_level < 1 << 31:
            raise InvalidMessageError("delay level does not fit in 32 bits", row=0, field="delayLevel")
        cols["delayLevel"] = pa.array([delay_level], pa.int32())
    if deliver_time_ms is not None:
        if not 0 <= deliver_time_ms < 1 << 62:
            raise InvalidMessageError("delivery time out of range (ms since the epoch)", row=0, field="deliverTime")
        cols["deliverTime"] = pa.array([deliver_time_ms], pa.int64())
    return pa.table(cols)
