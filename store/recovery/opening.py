"""Opening a store: who recovers it, and what every other opener checks.

The first process to open a store (see :mod:`rmqlog.durability.lock_file`) surveys it first
(:mod:`rmqlog.recovery.survey`: every file of the type it must be, no links), then, once the
parts are wired, recovers it (:func:`rmqlog.recovery.recovery.recover`) under the append
lock, before anything else reads or writes. With ``repair``, config files nothing can read were set aside beforehand:
recovery
reports them, and a lost ``topics.json`` is rebuilt with as many queues as the log has.
Later openers only check the segment sizes and rebuild a missing ``append.state`` from the
log. Only a first opener may repair: ``repair`` takes the store (:func:`take_ownership`)
before anything is set aside, and an open with ``repair`` that is not the first opener raises
:class:`rmqlog.errors.StoreBusyError` naming the holders, having changed nothing (it used to
open without repairing, silently).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import safe_open
from ..catalog import finish_delete
from ..config_files import set_aside_if_unreadable
from ..durability.lock_file import StoreLockFile
from ..errors import StoreBusyError
from ..index.geometry import set_aside_geometry
from .recovery import RecoveryReport, recover
from .survey import set_aside_lock, survey

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


@dataclass
class Ownership:
    """This process's ownership of a store being opened (:func:`take_ownership`)."""

    owner: StoreLockFile
    first: bool  # the first opener: it recovers the store
    surveyed: list[str]  # what the survey did (the first opener's)


def take_ownership(parts: StoreParts, *, repair: bool) -> Ownership:
    """Become an owner of the store, before its files are opened: the first opener surveys
    it (with the lock held exclusively); then ``config/`` is made if missing. The caller
    calls :func:`open_as_owner` once the parts are wired, or ``owner.abandon()`` on failure.

    ``repair`` needs the store to itself: when other processes (or other stores of this
    process) have it open, :class:`StoreBusyError` names the holders and nothing was changed."""
    surveyed: list[str] = []
    if repair:
        moved = set_aside_lock(parts.paths)
        if moved:
            surveyed.append(moved)
    owner = StoreLockFile.for_root(parts.paths.lock, parts.paths.abort)
    first = owner.open(first_checks=lambda: surveyed.extend(survey(parts.paths, repair=repair)))
    if repair and not first:
        # repair changes files (sets them aside, cuts the log): only with the store to itself,
        # before anything is touched (it used to open without repairing, silently)
        holders = owner.holders()
        owner.abandon()
        raise StoreBusyError("repair needs the store to itself", path=str(parts.paths.root), holders=holders)
    try:
        safe_open.make_folder(parts.paths.config_dir)
    except BaseException:
        owner.abandon()
        raise
    return Ownership(owner, first, surveyed)


def open_as_owner(
    parts: StoreParts,
    owned: Ownership,
    *,
    repair: bool,
    set_aside: list[Path],
    topics: Callable[[], dict[str, TopicConfig]],
) -> RecoveryReport | None:
    """Finish opening as an owner of the store; the first owner recovers it (its report is
    returned). On failure the parts' files are closed before the error propagates (the
    caller abandons the ownership). ``topics``: every topic, found from the log too (to
    rebuild a lost ``topics.json``)."""
    owner, first = owned.owner, owned.first
    report: RecoveryReport | None = None
    try:
        with parts.append_lock.held():
            if first:
                report = recover(parts, abnormal=owner.abort_exists(), repair=repair)
                report.problems[:0] = owned.surveyed
                for path in set_aside:
                    rel = path.parent.relative_to(parts.paths.root) / path.name.split(".damaged")[0]
                    report.problems.append(f"unreadable {rel} set aside as {path.name}")
                if any(p.name.startswith("topics.json") for p in set_aside):
                    for tc in topics().values():  # as many queues as the log has
                        parts.topic_config.put(tc)
            else:
                parts.commitlog.segments.check_sizes()  # only a first opener may repair
                if parts.state_file.load() is None:
                    parts.state_file.publish(parts.rebuild_state())
                for topic in parts.deleted_topics.pending():  # a delete killed while others kept the store open
                    finish_delete(parts, topic)
    except BaseException:
        parts.close_files()
        raise
    owner.opened()
    return report
