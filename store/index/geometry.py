"""The index files' geometry of a store, kept beside its config: ``config/indexFile.json``.

An index file's size is ``40 + 4*slots + 20*entries`` and neither count is in its header, so
a process opening a store must know the counts its files were made with. As with commitlog
segment sizes (taken from the files), the store's own values win over the configured ones:
the first process that opens a store with an index writes (RocketMQ's names)::

    {"maxHashSlotNum": 5000000, "maxIndexNum": 20000000, "crc": 1234567890}

and every later opener (the CLI, a notebook, a Spark executor with a default config) uses
them. ``crc`` is the zlib CRC-32 of ``"<maxHashSlotNum>,<maxIndexNum>"``; files written
before it existed have none and are read all the same. A store without the file (written by
RocketMQ, or before this file existed) uses the configured values, and gets the file.

Before anything is sized or allocated from it, the file is checked: both counts JSON integers
in ``[1, 2**31)``, ``maxIndexNum >= 2``, the file size within a Java int (RocketMQ computes
it as one), the CRC when there is one, and the size it gives against the index files already
in ``index/`` (each was made with the store's geometry). A file that fails is a
:class:`rmqlog.errors.CorruptStoreError` naming it and saying ``repair=True``: a repair sets
it aside (``indexFile.json.damaged-<ms>``), sets the index files aside too (``<name>.damaged``:
their geometry is no longer known) and writes the configured geometry; recovery then rebuilds
the index from the log.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from pathlib import Path
from typing import Any

from .. import safe_open
from ..errors import ConfigError, CorruptStoreError
from ..fileio import replace_file
from .index_config import DAMAGED_SUFFIX, INDEX_DIR, IndexConfig, index_file_names
from .layout import file_size

log = logging.getLogger(__name__)

GEOMETRY_FILE = "indexFile.json"


def _crc(slots: int, entries: int) -> int:
    return zlib.crc32(f"{slots},{entries}".encode())


def encode_geometry(config: IndexConfig) -> bytes:
    """The file's content for ``config``'s counts."""
    slots, entries = config.max_hash_slot_num, config.max_index_num
    return json.dumps({"maxHashSlotNum": slots, "maxIndexNum": entries, "crc": _crc(slots, entries)}).encode()


def _decode(raw: bytes, configured: IndexConfig) -> IndexConfig:
    """The geometry a file's bytes name; ``ValueError`` saying why when they name none."""
    try:
        doc: Any = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    counts = []
    for name in ("maxHashSlotNum", "maxIndexNum"):
        v = doc.get(name)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{name} is {v!r}, not an integer")
        counts.append(v)
    crc = doc.get("crc")
    if crc is not None and crc != _crc(*counts):
        raise ValueError(f"crc {crc!r} does not match maxHashSlotNum {counts[0]}, maxIndexNum {counts[1]}")
    try:  # ranges: [1, 2**31), at least 2 entries, the file size a Java int
        return IndexConfig(counts[0], counts[1], configured.max_msgs_num_batch)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def _check_files(index_dir: Path, config: IndexConfig) -> None:
    """Every index file already there has the size the geometry gives (``ValueError`` naming one that has not)."""
    want = file_size(config.max_hash_slot_num, config.max_index_num)
    for name in index_file_names(index_dir):
        try:
            st = os.lstat(index_dir / name)
        except FileNotFoundError:
            continue  # retention removed it meanwhile
        if st.st_size != want:
            raise ValueError(f"it gives index files of {want} bytes, but {index_dir / name} is {st.st_size}")
        return  # one file tells (a file of another size is the index's own damage: IndexService checks each)


def store_index_config(config_dir: Path, configured: IndexConfig, *, read_only: bool = False) -> IndexConfig:
    """The geometry recorded in ``config_dir`` (written from ``configured`` when missing,
    unless ``read_only``), with ``configured``'s ``max_msgs_num_batch`` (a query setting, not a
    file property). Raises :class:`CorruptStoreError` naming the file when it is unreadable,
    out of range or disagrees with the index files (see the module docstring)."""
    path = config_dir / GEOMETRY_FILE
    try:
        raw = safe_open.read_bytes(path)
    except FileNotFoundError:
        if read_only:
            return configured
        replace_file(path, encode_geometry(configured), durable=True)
        return configured
    except IsADirectoryError:
        raw = None
    try:
        if raw is None:
            raise ValueError("a directory")
        config = _decode(raw, configured)
        _check_files(config_dir.parent / INDEX_DIR, config)
    except ValueError as exc:
        # (the store's first opener sets it aside before it gets here: see set_aside_geometry)
        raise CorruptStoreError(
            f"unreadable index geometry ({exc}); open the store with repair=True to rebuild the "
            "index files from the log",
            path=str(path),
        ) from None
    return config


def set_aside_geometry(config_dir: Path, configured: IndexConfig | None = None) -> Path | None:
    """``repair``, or the first opener: when ``indexFile.json`` fails the checks of :func:`store_index_config`, rename
    it ``indexFile.json.damaged-<ms>`` and every index file ``<name>.damaged`` (made with a
    geometry no longer known: the index is rebuilt from the log). Returns the new name of the
    geometry file, or ``None`` when it is sound or absent."""
    path = config_dir / GEOMETRY_FILE
    try:
        store_index_config(config_dir, configured or IndexConfig(), read_only=True)
        return None
    except CorruptStoreError as exc:
        log.error("%s: set aside with the index files; the index is rebuilt from the log", exc.path)
    moved = safe_open.set_aside(path)
    index_dir = config_dir.parent / INDEX_DIR
    for name in index_file_names(index_dir):
        safe_open.rename(index_dir / name, index_dir / (name + DAMAGED_SUFFIX))
    return moved
