"""The torture messages: every message identifies itself, and a replay is byte-identical.

A non-empty body starts with ``HEAD`` (writer uid, batch sequence, row, rows in the batch,
topic index, requested queue id, CRC-32 of the rest of the body); an empty body carries the
same fields in its KEYS (``tt:uid:seq:row:n:topic:queue``). Bodies are generated from (run
seed, writer uid, sequence), so a replay of a batch writes the same bytes.
"""

from __future__ import annotations

import random
import struct
import zlib
from typing import Any

import pyarrow as pa

import rmqlog

#: Body header: magic, writer uid, batch sequence, row, rows in the batch, topic index,
#: requested queue id (-1: round robin); then a big-endian CRC-32 of header + payload.
HEAD = struct.Struct(">4sIIIIBh")
CRC = struct.Struct(">I")
MAGIC = b"TRT1"
KEY_PREFIX = "tt"
TOPICS = ("TortA", "TortB", "TortQ8")
TOPIC_QUEUES = (4, 4, 8)  # TortQ8 is created with 8 queues; the others are auto-created (4)
TAGS = (None, "TagA", "TagB", "c")
#: Identity of a message: (uid, seq, row, rows in batch, topic index, requested queue).
Ident = tuple[int, int, int, int, int, int]
#: Writer uids: trial * UID_SLOTS + slot, one slot per writer process of a trial: the first
#: phase's writers take slots 0..3, writers started during a recovery the next ones, the
#: checker's own batch the last slot. (Two processes writing as one uid would write the same
#: bytes twice: duplicates the store did not make.)
UID_SLOTS = 16
CHECKER_SLOT = UID_SLOTS - 1
MAX_WRITERS = 4


class BadMessage(Exception):
    """A record whose body (or KEYS, for an empty body) does not identify a torture message."""


def writer_name(uid: int) -> str:
    return f"torture-{uid}"


def batch_size(rng: random.Random, small: bool) -> int:
    r = rng.random()
    n = rng.randint(1, 10) if r < 0.4 else rng.randint(10, 200) if r < 0.7 else rng.randint(200, 2000)
    return min(n, 120) if small else n


def make_batch(run_seed: int, uid: int, seq: int, small: bool) -> pa.Table:
    """The batch ``seq`` of writer ``uid``: always the same bytes for the same arguments."""
    rng = random.Random(f"{run_seed}/{uid}/{seq}")
    n = batch_size(rng, small)
    profile = rng.choice(("tiny", "mixed", "mixed", "big", "empty"))
    if profile == "big":
        n = min(n, 150)
    one_topic = rng.randrange(3) if rng.random() < 0.7 else None
    queue_mode = rng.choice(("explicit", "round-robin", "mixed"))
    tag_mode = rng.choice(("none", "one", "random"))
    with_props = rng.random() < 0.2
    topics, queues, bodies, tags, keys, props = [], [], [], [], [], []
    tag0 = rng.choice(TAGS)
    for row in range(n):
        t = one_topic if one_topic is not None else rng.randrange(3)
        explicit = queue_mode == "explicit" or (queue_mode == "mixed" and rng.random() < 0.5)
        q = rng.randrange(TOPIC_QUEUES[t]) if explicit else -1
        if profile == "empty" or (profile == "mixed" and rng.random() < 0.05):
            size = -1  # an empty body
        elif profile == "tiny":
            size = rng.randint(0, 48)
        elif profile == "big":
            size = rng.randint(1024, 1024 if small else 6000)
        else:
            size = rng.randint(0, 300) if rng.random() < 0.8 else rng.randint(300, 1000 if small else 4000)
        ident = (uid, seq, row, n, t, q)
        if size < 0:
            body = b""
            k = [f"{KEY_PREFIX}:" + ":".join(map(str, ident))]
        else:
            head = HEAD.pack(MAGIC, *ident)
            payload = rng.randbytes(size)
            body = head + CRC.pack(zlib.crc32(head + payload)) + payload
            k = [] if rng.random() < 0.7 else [f"k{row % 5}", "other"]
        topics.append(TOPICS[t])
        queues.append(q if q >= 0 else None)
        bodies.append(body)
        tags.append(tag0 if tag_mode == "one" else rng.choice(TAGS) if tag_mode == "random" else None)
        keys.append(k)
        props.append([("p", f"v{row % 7}")] if row % 3 else [])
    cols: dict[str, pa.Array] = {
        "topic": pa.array(topics, pa.string()),
        "body": pa.array(bodies, pa.binary()),
        "queueId": pa.array(queues, pa.int32()),
        "tags": pa.array(tags, pa.string()),
        "keys": pa.array(keys, pa.list_(pa.string())),
    }
    if with_props:
        cols["properties"] = pa.array(props, pa.map_(pa.string(), pa.string()))
    return pa.table(cols)


def identify(body: bytes, keys: str | None) -> Ident:
    """The identity a message carries; raises :class:`BadMessage` if its body is not intact."""
    if not body:
        for key in (keys or "").split(" "):
            parts = key.split(":")
            if parts[0] == KEY_PREFIX and len(parts) == 7:
                u, s, r, n, t, q = (int(x) for x in parts[1:])
                return (u, s, r, n, t, q)
        raise BadMessage(f"empty body without an identity key (KEYS {keys!r})")
    if len(body) < HEAD.size + CRC.size or body[:4] != MAGIC:
        raise BadMessage(f"body of {len(body)} bytes without the torture header")
    (crc,) = CRC.unpack_from(body, HEAD.size)
    if zlib.crc32(body[: HEAD.size] + body[HEAD.size + CRC.size :]) != crc:
        raise BadMessage("body does not match its checksum")
    _, u, s, r, n, t, q = HEAD.unpack_from(body)
    return (u, s, r, n, t, q)


def store_config(values: dict[str, Any]) -> rmqlog.StoreConfig:
    return rmqlog.StoreConfig(**values)
