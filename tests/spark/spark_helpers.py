"""Helpers of the Spark tests: fill a store, compare bodies."""

from __future__ import annotations

import pyarrow as pa

import rmqlog


def fill(
    root: str,
    topic: str,
    n: int,
    *,
    queues: int = 4,
    tags: list[str] | None = None,
    config: rmqlog.StoreConfig | None = None,
    start: int = 0,
) -> pa.Table:
    """Append ``n`` messages (body ``m<i>``, round robin over ``queues``) and dispatch them."""
    with rmqlog.MessageStore.open(root, config) as ms:
        if topic not in ms.topics():
            ms.create_topic(topic, queues)
        cols = {
            "topic": [topic] * n,
            "body": [f"m{start + i}".encode() for i in range(n)],
            "queueId": [i % queues for i in range(n)],
            "keys": [[f"k{start + i}"] for i in range(n)],
        }
        if tags is not None:
            cols["tags"] = [tags[i % len(tags)] for i in range(n)]
        res = ms.put_batch(pa.table(cols))
        ms.dispatch()
        return res


def bodies(rows: list) -> list[str]:
    return sorted(bytes(r["body"]).decode() for r in rows)
