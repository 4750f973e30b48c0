"""The index files' geometry of a store, kept beside its config: ``config/indexFile.json``.

An index file's size is ``40 + 4*slots + 20*entries`` and neither count is in its header, so
a process opening a store must know the counts its files were made with. As with commitlog
segment sizes (taken from the files), the store's own values win over the configured ones:
the first process that opens a store with an index writes
``{"maxHashSlotNum": 5000000, "maxIndexNum": 20000000}`` (RocketMQ's names) and every later
opener (the CLI, a notebook, a Spark executor with a default config) uses them. A store
without the file (written by RocketMQ, or before this file existed) uses the configured
values, and gets the file. An unreadable file is a :class:`rmqlog.errors.CorruptStoreError`
naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import safe_open
from ..errors import CorruptStoreError
from ..fileio import replace_file
from .index_service import IndexConfig

GEOMETRY_FILE = "indexFile.json"


def store_index_config(config_dir: Path, configured: IndexConfig, *, read_only: bool = False) -> IndexConfig:
    """The geometry recorded in ``config_dir`` (written from ``configured`` when missing,
    unless ``read_only``), with ``configured``'s ``max_msgs_num_batch`` (a query setting, not a
    file property)."""
    path = config_dir / GEOMETRY_FILE
    try:
        raw = safe_open.read_bytes(path)
    except FileNotFoundError:
        if read_only:
            return configured
        doc = {"maxHashSlotNum": configured.max_hash_slot_num, "maxIndexNum": configured.max_index_num}
        replace_file(path, json.dumps(doc).encode(), durable=True)
        return configured
    try:
        doc = json.loads(raw)
        return IndexConfig(int(doc["maxHashSlotNum"]), int(doc["maxIndexNum"]), configured.max_msgs_num_batch)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptStoreError(f"unreadable index geometry ({exc}); it must name maxHashSlotNum and maxIndexNum",
                                path=str(path)) from None
