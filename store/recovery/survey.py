"""The survey at open: every file and folder of a store is of the type the store keeps there.

A folder where a file belongs, a file where a folder belongs, a link (never followed inside a
store: :mod:`rmqlog.safe_open`) or a special file is damage. The first process to open a
store (it holds ``lock`` exclusively: no other process has the store open, so nothing it
moves is in use) walks the store once, before anything reads it, and compares each entry
with :data:`LAYOUT`. What it does with an entry of the wrong type depends on what the entry
holds:

(what: entries; at a normal open; with ``repair=True``)
- the log: ``commitlog/``, its segments; refused: :class:`~rmqlog.errors.WrongFileTypeError` names it, nothing changed;
  set aside; a segment set aside is a missing one (recovery cuts the log at the gap; the first one: the log starts at
  the next)
- the config folder: ``config/``; refused, nothing changed; set aside, a new ``config/`` made: topics rebuilt from the
  log, offsets start over
- config files: ``config/*.json``, their ``.bak``; set aside when the store can do without it: a ``.bak`` (the next
  write makes a new one), a file whose ``.bak`` is a file (read instead); otherwise left to its reader, which names it,
  typed, when it is needed (``indexFile.json``: at every open); set aside
- ``lock``: refused when the store opens it (before any survey can run); set aside before the open
- derived files (everything else): ``consumequeue/``..., ``index/``..., ``timer/``..., ``checkpoint``, ``abort``,
  ``*.state``, ``append.base.*``, ``*.lock``, ``owners/``..., ``recovering``, ``commitlog.deleted/``...,
  ``commitlog.prealloc/``...; set aside and rebuilt from the log: nothing is lost; the same

Rebuilt whole where a part would mislead: a consume-queue file of the wrong type has its
whole queue folder set aside (a queue missing its first file reads as one whose head
retention removed); that is done by recovery's pass over each queue, which lists their files
anyway (:func:`rmqlog.recovery.queue_repair.drop_bad_queue_files`), so the survey does not
list them a second time. Anything under ``timer/`` makes the timer index rebuild from the
timer queue (``timer/state`` removed, as after a crash).

"Set aside" is a rename to ``<name>.damaged-<ms>`` beside it (:func:`rmqlog.safe_open.set_aside`):
never a removal, and a link's target is never touched. An ``abort``, ``recovering`` or owner
file of the wrong type still says a process did not close the store: a regular ``abort``
takes its place, so recovery takes the abnormal path. Names the store does not use are left
alone (they are not the store's). A normal open by a later process does not survey: a wrong
entry that appears while the store is open is met where it is used, as a typed error.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .. import safe_open
from ..errors import WrongFileTypeError
from ..paths import StorePaths

log = logging.getLogger(__name__)

#: What an entry of the wrong type costs (see the module docstring).
LOG, CONFIG_FOLDER, CONFIG, LOCK, DERIVED = "log", "config folder", "config file", "lock", "derived"

_TOPIC = r"[%|a-zA-Z0-9_-]{1,127}"
_QUEUE = r"(?:0|[1-9][0-9]{0,9})"
_SEGMENT = r"[0-9]{20}"
#: (the entry's path below the root, what belongs there, what it holds), first match wins.
LAYOUT: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(p), k, w)
    for p, k, w in [
        ("commitlog", safe_open.FOLDER, LOG),
        (f"commitlog/{_SEGMENT}", safe_open.FILE, LOG),
        (r"commitlog/\.[^/]*\.tmp", safe_open.FILE, DERIVED),  # a segment being created
        (r"commitlog\.(?:deleted|prealloc)", safe_open.FOLDER, DERIVED),
        (rf"commitlog\.(?:deleted|prealloc)/{_SEGMENT}", safe_open.FILE, DERIVED),
        ("config", safe_open.FOLDER, CONFIG_FOLDER),
        (r"config/[^/]+\.json(?:\.bak)?", safe_open.FILE, CONFIG),
        (r"config/[^/]+\.json\.tmp", safe_open.FILE, DERIVED),  # a replacement cut short
        ("consumequeue", safe_open.FOLDER, DERIVED),
        (f"consumequeue/{_TOPIC}", safe_open.FOLDER, DERIVED),
        (f"consumequeue/{_TOPIC}/{_QUEUE}", safe_open.FOLDER, DERIVED),
        (f"consumequeue/{_TOPIC}/{_QUEUE}/{_SEGMENT}", safe_open.FILE, DERIVED),
        ("index", safe_open.FOLDER, DERIVED),
        (r"index/[0-9]{17}(?:\.creating)?", safe_open.FILE, DERIVED),
        ("timer", safe_open.FOLDER, DERIVED),
        ("timer/(?:state|wheel|log)", safe_open.FILE, DERIVED),
        ("owners", safe_open.FOLDER, DERIVED),
        ("owners/[^/]+", safe_open.FILE, DERIVED),
        ("lock", safe_open.FILE, LOCK),
        (r"checkpoint|abort|recovering|[^/]+\.state|[^/]+\.lock|[^/]+\.state\.tmp", safe_open.FILE, DERIVED),
        (r"append\.base\.[0-9a-f]{16}(?:\.tmp)?", safe_open.FILE, DERIVED),  # append.state's tables (rebuilt)
    ]
]
#: entries whose presence means a process did not close the store (see the module docstring)
_CRASH_SIGNS = re.compile(r"abort|recovering|owners(?:/.*)?")
_QUEUE_DIR = re.compile(f"consumequeue/{_TOPIC}/{_QUEUE}")


def expected(rel: str) -> tuple[str, str] | None:
    """(what belongs at ``rel``, what it holds) by :data:`LAYOUT`; ``None`` for a name the store
    does not use (or one it set aside)."""
    if safe_open.is_set_aside(rel):
        return None
    for pattern, kind, what in LAYOUT:
        if pattern.fullmatch(rel):
            return kind, what
    return None


@dataclass(frozen=True)
class Wrong:
    """An entry of the wrong type: its path below the root, what it is, what belongs there, what it holds."""

    rel: str
    found: str
    expected: str
    holds: str


def find_wrong(paths: StorePaths) -> list[Wrong]:
    """Every entry of the store at ``paths`` that is not of the type :data:`LAYOUT` gives it,
    outermost first (what is under a wrong folder is not looked at)."""
    out: list[Wrong] = []

    def descend(rel: str) -> bool:
        exp = expected(rel)
        # a queue's files are checked by recovery's pass over each queue, which lists them anyway
        # (rmqlog.recovery.queue_repair): a store of 100,000 queues is not listed twice
        return exp is not None and exp[0] == safe_open.FOLDER and not _QUEUE_DIR.fullmatch(rel)

    for rel, found in safe_open.walk(paths.root, descend):
        exp = expected(rel)
        if exp is not None and found != exp[0]:
            out.append(Wrong(rel, found, exp[0], exp[1]))
    return out


def set_aside_lock(paths: StorePaths) -> str | None:
    """``repair``: ``lock`` of the wrong type set aside before the store opens it (what was done, or ``None``)."""
    found = safe_open.kind(paths.lock)
    if found in (None, safe_open.FILE):
        return None
    moved = safe_open.set_aside(paths.lock)
    return _done(Wrong("lock", found, safe_open.FILE, LOCK), moved.name)


def survey(paths: StorePaths, *, repair: bool) -> list[str]:
    """The first opener's survey (see the module docstring); returns what it did, for the
    recovery report. Raises :class:`WrongFileTypeError` naming the first entry of the log or
    the config folder that is of the wrong type (unless ``repair``): then nothing was changed."""
    wrong = find_wrong(paths)
    if not wrong:
        return []
    if not repair:
        refused = [w for w in wrong if w.holds in (LOG, CONFIG_FOLDER, LOCK)]
        if refused:
            w = refused[0]
            raise WrongFileTypeError(str(paths.root / w.rel), w.found, w.expected)
    done: list[str] = []
    for w in wrong:
        path = paths.root / w.rel
        if w.holds == CONFIG and not repair and not _replaceable(path):
            continue  # its reader names it when it is needed
        moved = safe_open.set_aside(path)
        done.append(_done(w, str(moved.relative_to(paths.root))))
    if any(w.holds == CONFIG_FOLDER for w in wrong):
        safe_open.make_folder(paths.config_dir)
    if any(_CRASH_SIGNS.fullmatch(w.rel) for w in wrong) and safe_open.kind(paths.abort) is None:
        os.close(safe_open.open_file(paths.abort, os.O_WRONLY | os.O_CREAT))
    if any(w.rel.startswith("timer/") for w in wrong):
        safe_open.unlink(paths.root / "timer" / "state")  # the timer index rebuilt from the timer queue
    return done


def _replaceable(path: Path) -> bool:
    """Whether a config file of the wrong type can be set aside at a normal open: it is a
    ``.bak`` (the next write makes a new one), or its ``.bak`` is a file (read instead)."""
    return path.name.endswith(".bak") or safe_open.kind(path.with_name(path.name + ".bak")) == safe_open.FILE


def _done(w: Wrong, moved: str) -> str:
    msg = f"{w.rel} was {w.found}, not {w.expected}: set aside as {moved}" + (
        "" if w.holds in (LOG, CONFIG_FOLDER, CONFIG) else "; rebuilt"
    )
    log.warning("store survey: %s", msg)
    return msg
