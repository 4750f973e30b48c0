"""Opening a store: who recovers it, and what every other opener checks.

The first process to open a store (see :mod:`rmqlog.durability.lock_file`) recovers it
(:func:`rmqlog.durability.recovery.recover`) under the append lock, before anything else reads
or writes. With ``repair``, config files nothing can read were set aside beforehand: recovery
reports them, and a lost ``topics.json`` is rebuilt with as many queues as the log has.
Later openers only check the segment sizes and rebuild a missing ``append.state`` from the
log. Only a first opener may repair: ``repair`` claims the store (:func:`claim_for_repair`)
before anything is set aside, and an open with ``repair`` that is not the first opener raises
:class:`rmqlog.errors.StoreBusyError` naming the holders, having changed nothing (it used to
open without repairing, silently).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..config_files import set_aside_if_unreadable
from ..errors import StoreBusyError
from ..index.geometry import set_aside_geometry
from .lock_file import StoreLockFile
from .recovery import RecoveryReport, recover

if TYPE_CHECKING:
    from ..config_files import TopicConfig
    from ..parts import StoreParts


def set_aside_unreadable_config(parts: StoreParts, also: Callable[[], Path | None] | None = None) -> list[Path]:
    """``repair``: move unreadable ``topics.json`` / ``consumerOffset.json`` aside (rebuilt
    later), and ``indexFile.json`` (a geometry that is unreadable or out of range: the
    configured one is written and the index files are rebuilt from the log). ``also``: the
    caller's own file to set aside the same way (the facade's: ``delayOffset.json``)."""
    with parts.config_lock.held():
        files = (parts.paths.topics_json, parts.paths.consumer_offset_json)
        moved = [p for p in map(set_aside_if_unreadable, files) if p]
        more = [set_aside_geometry(parts.paths.config_dir), also() if also is not None else None]
        return moved + [p for p in more if p]


def claim_for_repair(parts: StoreParts) -> StoreLockFile:
    """Become the store's first opener, to repair it, before anything is changed; pass the
    result to :func:`open_as_owner` (or call its ``abandon()`` if opening fails before).

    Raises :class:`StoreBusyError` naming the holders when other processes (or other stores
    of this process) have the store open: nothing was changed then."""
    owner = StoreLockFile.for_root(parts.paths.lock, parts.paths.abort)
    if owner.open():
        return owner
    holders = owner.holders()
    owner.abandon()
    raise StoreBusyError("repair needs the store to itself", path=str(parts.paths.root), holders=holders)


def open_as_owner(
    parts: StoreParts, *, repair: bool, set_aside: list[Path], topics: Callable[[], dict[str, TopicConfig]],
    claimed: StoreLockFile | None = None,
) -> tuple[StoreLockFile, RecoveryReport | None]:
    """Become an owner of the store; the first owner recovers it (its report is returned).
    ``claimed``: the result of :func:`claim_for_repair` (``repair`` needs it).

    On failure the ownership is abandoned and the parts' files closed before the error
    propagates. ``topics``: every topic, found from the log too (to rebuild a lost
    ``topics.json``)."""
    if repair and claimed is None:
        claimed = claim_for_repair(parts)
    owner = claimed or StoreLockFile.for_root(parts.paths.lock, parts.paths.abort)
    first = True if claimed is not None else owner.open()
    report: RecoveryReport | None = None
    try:
        with parts.append_lock.held():
            if first:
                report = recover(parts, abnormal=owner.abort_exists(), repair=repair)
                for path in set_aside:
                    report.problems.append(f"unreadable {path.name.split('.damaged')[0]} set aside as {path.name}")
                if any(p.name.startswith("topics.json") for p in set_aside):
                    for tc in topics().values():  # as many queues as the log has
                        parts.topic_config.put(tc)
            else:
                parts.commitlog.segments.check_sizes()  # only a first opener may repair
                if parts.state_file.load() is None:
                    parts.state_file.publish(parts.rebuild_state())
    except BaseException:
        owner.abandon()
        parts.close_files()
        raise
    owner.opened()
    return owner, report
