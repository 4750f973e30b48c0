"""The optional C helper (``rmqlog._native``, built from ``store/_native.c`` by ``setup.py``),
loaded in this one place.

The helper is optional: where the install cannot compile it, or it does not load (it refuses
big-endian hosts), every path it speeds up has a pure numpy/Arrow twin, tested. So each of
its functions is handed out here, as the helper's function or ``None`` without it (and
``CLMUL`` false); :data:`AVAILABLE` says whether it loaded and :data:`LOAD_ERROR` why not.
A module that uses one takes it once, under a module-level name of its own
(``from ..native import gather as _native_gather``), and tests switch a path to its twin
there (``monkeypatch.setattr(rmqlog.log.gather, "_native_gather", None)``); the encoding
kernels are switched together in :mod:`rmqlog.log.encode.native`.

(name: what; used by)
- ``crc32_batch``: the BODYCRC of every value of a batch, GIL released; :mod:`rmqlog.log.encode`,
  :mod:`rmqlog.log.decode`
- ``CLMUL``: whether ``crc32_batch`` runs on carry-less multiply; :mod:`rmqlog.log.encode.crc`
- ``all_same``, ``longest_value``: a string column's values all equal; its longest value; :mod:`rmqlog.log.encode`
- ``pack_records``, ``patch_records``, ``pack_plain``: records packed into one buffer; the lock-given fields written
  into them; a plain batch in one call; :mod:`rmqlog.log.encode`
- ``ChunkWriter``: the write pipeline's own thread (never takes the GIL); :mod:`rmqlog.log.commitlog`
- ``hexlify``, ``offset_msg_ids``: uppercase hex of fixed-width rows; offset msgIds; :mod:`rmqlog.log.msgid`
- ``parse_properties``, ``copy_properties``: RocketMQ properties parsed in one pass; copied with names dropped;
  :mod:`rmqlog.log.properties`, :mod:`rmqlog.schedule.timeup`
- ``walk_records``: a commitlog segment walked (where records are, why the walk stops); :mod:`rmqlog.log.scan`
- ``gather``: slices of a buffer copied back to back, GIL released; :mod:`rmqlog.log.gather`
- ``check_stored``: records copied for a pull checked against their consume-queue units, GIL released;
  :mod:`rmqlog.log.raw_check`
- ``window_units``, ``check_copy``: a small window's units walked under RocketMQ's batch limits and bounds-checked; its
  records checked as ``check_stored`` checks them, then copied; :mod:`rmqlog.access.small_window`
- ``walk_chains``: the timer log's bucket chains walked; :mod:`rmqlog.schedule.timer_wheel`
- ``walk_batch``: a batch send's body walked message by message (where each starts, its lengths);
  :mod:`rmqlog.log.batch_body`

A leaf: it imports no other module of the store, so any floor may use it
(``tests/test_layout.py`` checks that no other module imports ``rmqlog._native``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


def _load() -> tuple[ModuleType | None, ImportError | None]:
    try:
        from . import _native  # type: ignore[attr-defined]  # (an extension: no source for mypy to read)
    except ImportError as exc:  # pragma: no cover - depends on the build
        return None, exc
    return _native, None


_helper, LOAD_ERROR = _load()
#: whether the C helper loaded (every name below is ``None`` when it did not)
AVAILABLE = _helper is not None


def _function(name: str) -> Any:
    # a helper built from an older _native.c may lack a newer function: that path then runs
    # its twin, as it did when each module imported its function itself
    return getattr(_helper, name, None)


crc32_batch: Any = _function("crc32_batch")
CLMUL: bool = bool(_function("CLMUL"))
all_same: Any = _function("all_same")
longest_value: Any = _function("longest_value")
pack_records: Any = _function("pack_records")
patch_records: Any = _function("patch_records")
pack_plain: Any = _function("pack_plain")
ChunkWriter: Any = _function("ChunkWriter")
hexlify: Any = _function("hexlify")
offset_msg_ids: Any = _function("offset_msg_ids")
parse_properties: Any = _function("parse_properties")
copy_properties: Any = _function("copy_properties")
walk_records: Any = _function("walk_records")
gather: Any = _function("gather")
check_stored: Any = _function("check_stored")
window_units: Any = _function("window_units")
check_copy: Any = _function("check_copy")
walk_chains: Any = _function("walk_chains")
walk_batch: Any = _function("walk_batch")
