"""Reaching a store's files without following links: every open, listing, creation, rename and
removal of a file or folder inside a store goes through these functions.

Why: a store's files are only ever the store's own. A link inside a store (a segment linked to
a file elsewhere, ``consumequeue/<topic>`` linked to another folder) would make appends, hole
punches, truncations and unlinks land outside it; a folder where a file belongs (or the
reverse) would fail with a bare ``IsADirectoryError``. Here both are damage, met as a typed
:class:`~rmqlog.errors.WrongFileTypeError` naming the path and what was found, before
anything is read, written or removed through it. (What the store then does about it, at
open and with ``repair=True``, is :mod:`rmqlog.durability.survey`'s.)

How:

- **Below the root no link is followed.** A store registers its root when it opens
  (:func:`register_root`); a path under a registered root is reached one folder at a time
  from the root, each opened ``O_PATH | O_DIRECTORY | O_NOFOLLOW`` relative to the one
  before (``openat``), and the last component is opened ``O_NOFOLLOW`` relative to its
  folder (or renamed, linked, removed, listed through ``*at`` calls on that folder's
  descriptor). No check-then-use gap: what is opened is what was checked. The root itself,
  and the folders above it, are the user's choice and may be links.
- **Paths under no registered root** (a component used on its own, in tests) get the last
  component's ``O_NOFOLLOW`` only.
- **Only regular files are opened as files**: a folder (which ``open(O_RDONLY)`` would
  accept), a fifo (which would block the open: files are opened ``O_NONBLOCK``, then the flag
  is cleared), a socket or a device is refused.
- **Missing files** raise ``FileNotFoundError`` (naming the full path), as ``os.open`` does:
  what a missing file means is the caller's decision.

Cost: one ``openat`` (and ``close``) per folder between the root and the file, ~1 us each;
files are opened once and their descriptors kept, so no hot path pays it per message.
``tests/test_safe_paths.py`` checks the source: no store module opens, lists, creates or
removes a file any other way.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import WrongFileTypeError

FILE = "a file"
FOLDER = "a folder"
LINK = "a symbolic link"
SPECIAL = "a special file"
#: the suffix of what is set aside (:func:`set_aside`): ``<name>.damaged-<ms>``
DAMAGED = ".damaged-"

_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_roots: dict[str, int] = {}  # absolute root -> how many open stores registered it
_roots_lock = threading.Lock()

PathLike = str | os.PathLike[str]


def register_root(root: PathLike) -> None:
    """Declare ``root`` a store root: paths under it are reached without following links
    (counted: pair every call with :func:`release_root`)."""
    key = os.path.abspath(root)
    with _roots_lock:
        _roots[key] = _roots.get(key, 0) + 1


def release_root(root: PathLike) -> None:
    key = os.path.abspath(root)
    with _roots_lock:
        n = _roots.get(key, 0) - 1
        if n > 0:
            _roots[key] = n
        else:
            _roots.pop(key, None)


def _split(path: PathLike) -> tuple[str, list[str]]:
    """(the folder to start from, the components below it): the nearest registered root above
    ``path`` and every component under it (none for a root itself), else ``path``'s folder
    and its last component."""
    full = os.path.abspath(path)
    if _roots:
        if full in _roots:
            return full, []
        probe = full
        while True:
            parent = os.path.dirname(probe)
            if parent == probe:
                break
            if parent in _roots:
                return parent, full[len(parent):].lstrip("/").split("/")
            probe = parent
    parent, name = os.path.split(full)
    return parent, [name]


def kind_of(st: os.stat_result) -> str:
    """What an ``lstat`` result is: :data:`FILE`, :data:`FOLDER`, :data:`LINK` or :data:`SPECIAL`."""
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return FILE
    if stat.S_ISDIR(mode):
        return FOLDER
    if stat.S_ISLNK(mode):
        return LINK
    return SPECIAL


def _found(dir_fd: int, name: str) -> str | None:
    try:
        return kind_of(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
    except FileNotFoundError:
        return None


def _missing(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


def _walk(base: str, comps: list[str]) -> int:
    """An ``O_PATH`` descriptor of ``base/comps...``, each component a real folder, no link."""
    fd = os.open(base, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, name in enumerate(comps):
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                where = os.path.join(base, *comps[: i + 1])
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    found = _found(fd, name)
                    if found is not None and found != FOLDER:
                        raise WrongFileTypeError(where, found, FOLDER) from None
                if exc.errno == errno.ENOENT:
                    raise _missing(where) from None
                raise
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def parent_of(path: PathLike) -> Iterator[tuple[int, str]]:
    """``(descriptor of path's folder, path's last component)``: the folder reached without
    following links below the root; for ``*at`` calls on the last component."""
    base, comps = _split(path)
    if not comps:  # a root: its own name, as a name in its folder
        base, name = os.path.split(base)
        comps = [name]
    fd = _walk(base, comps[:-1])
    try:
        yield fd, comps[-1]
    finally:
        os.close(fd)


def kind(path: PathLike) -> str | None:
    """What is at ``path`` (not following a link there): :data:`FILE`, :data:`FOLDER`,
    :data:`LINK`, :data:`SPECIAL`, or ``None`` when nothing is. A folder above it that is
    missing means ``None``; one that is not a folder raises :class:`WrongFileTypeError`."""
    try:
        with parent_of(path) as (dfd, name):
            return _found(dfd, name)
    except FileNotFoundError:
        return None


def lstat(path: PathLike) -> os.stat_result:
    """``path``'s own ``stat`` (a link's, not its target's); ``FileNotFoundError`` if absent."""
    with parent_of(path) as (dfd, name):
        try:
            return os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            raise _missing(os.fspath(path)) from None


def open_file(path: PathLike, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of the regular file ``path`` (``O_CREAT`` and the other flags as given),
    following no link; raises :class:`WrongFileTypeError` when something else is there."""
    with parent_of(path) as (dfd, name):
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode, dir_fd=dfd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR, errno.EEXIST):
                found = _found(dfd, name)
                if found is not None and found != FILE:
                    raise WrongFileTypeError(os.fspath(path), found, FILE) from None
            if exc.errno == errno.ENOENT:
                raise _missing(os.fspath(path)) from None
            raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WrongFileTypeError(os.fspath(path), kind_of(st), FILE)
        if not flags & os.O_NONBLOCK:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_folder(path: PathLike) -> int:
    """A read-only descriptor of the folder ``path`` (to list or to ``fsync``), following no link."""
    base, comps = _split(path)
    if not comps:  # a root is followed if it is a link (see the module docstring)
        return os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    with parent_of(path) as (dfd, name):
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                found = _found(dfd, name)
                if found is not None and found != FOLDER:
                    raise WrongFileTypeError(os.fspath(path), found, FOLDER) from None
            if exc.errno == errno.ENOENT:
                raise _missing(os.fspath(path)) from None
            raise


def listdir(path: PathLike) -> list[str]:
    """The names in the folder ``path`` (unsorted); ``FileNotFoundError`` when it is absent."""
    fd = open_folder(path)
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def listdir_or_empty(path: PathLike) -> list[str]:
    """:func:`listdir`, or ``[]`` when the folder is absent."""
    try:
        return listdir(path)
    except FileNotFoundError:
        return []


def entries(path: PathLike) -> list[tuple[str, str]]:
    """``(name, kind)`` of everything in the folder ``path``, sorted by name, links not
    followed (``[]`` when the folder is absent)."""
    try:
        fd = open_folder(path)
    except FileNotFoundError:
        return []
    try:
        with os.scandir(fd) as it:
            out = [(e.name, _kind_of_entry(e)) for e in it]
    finally:
        os.close(fd)
    return sorted(out)


def make_folder(path: PathLike, *, parents: bool = False) -> None:
    """Create the folder ``path`` unless it is there (``parents``: and the folders above it,
    up to the root); :class:`WrongFileTypeError` when something else is there."""
    base, comps = _split(path)
    if not comps:
        make_root(base)
        return
    if parents and len(comps) > 1:
        make_folder(os.path.join(base, *comps[:-1]), parents=True)
    elif parents:  # under no registered root: the folders above are not the store's
        os.makedirs(base, exist_ok=True)
    with parent_of(path) as (dfd, name):
        try:
            os.mkdir(name, 0o755, dir_fd=dfd)
        except FileExistsError:
            found = _found(dfd, name)
            if found not in (FOLDER, None):
                raise WrongFileTypeError(os.fspath(path), found or "nothing", FOLDER) from None


def make_root(root: PathLike) -> None:
    """Create a store root (and the folders above it): links are allowed there, the root
    being the user's choice; something there that is not a folder raises
    :class:`WrongFileTypeError`."""
    try:
        os.makedirs(root, exist_ok=True)
    except FileExistsError:
        raise WrongFileTypeError(os.fspath(root), FILE, FOLDER) from None
    except NotADirectoryError:
        raise WrongFileTypeError(os.fspath(root), "a path through a file", FOLDER) from None


def read_bytes(path: PathLike) -> bytes:
    """The content of the regular file ``path`` (see :func:`open_file`)."""
    fd = open_file(path, os.O_RDONLY)
    try:
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def unlink(path: PathLike, *, missing_ok: bool = True) -> None:
    """Remove the file ``path`` (a link there is removed itself: its target is never touched);
    a folder there raises :class:`WrongFileTypeError` (never removed)."""
    try:
        with parent_of(path) as (dfd, name):
            try:
                os.unlink(name, dir_fd=dfd)
            except (IsADirectoryError, PermissionError) as exc:
                found = _found(dfd, name)
                if found == FOLDER:
                    raise WrongFileTypeError(os.fspath(path), found, FILE) from None
                raise exc
    except FileNotFoundError:
        if not missing_ok:
            raise


def remove_folder(path: PathLike) -> None:
    """Remove the empty folder ``path`` (absent: nothing to do)."""
    try:
        with parent_of(path) as (dfd, name):
            os.rmdir(name, dir_fd=dfd)
    except FileNotFoundError:
        pass


def rename(src: PathLike, dst: PathLike) -> None:
    """Rename ``src`` to ``dst`` (replacing a file there, atomically), both reached without
    following links; the names themselves are moved, whatever they are (a link stays a link).
    A folder at ``dst`` is never replaced: :class:`WrongFileTypeError`."""
    with parent_of(src) as (sfd, sname), parent_of(dst) as (dfd, dname):
        try:
            os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
        except OSError as exc:
            if exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST):
                found = _found(dfd, dname)
                if found is not None and found != _found(sfd, sname):
                    raise WrongFileTypeError(os.fspath(dst), found, _found(sfd, sname) or FILE) from None
            if exc.errno == errno.ENOENT:
                raise _missing(os.fspath(src)) from None
            raise


def link(src: PathLike, dst: PathLike) -> None:
    """Hard-link the regular file ``src`` as ``dst`` (``FileExistsError`` when ``dst`` exists);
    a link at ``src`` is refused, never linked through."""
    with parent_of(src) as (sfd, sname), parent_of(dst) as (dfd, dname):
        found = _found(sfd, sname)
        if found is None:
            raise _missing(os.fspath(src))
        if found != FILE:
            raise WrongFileTypeError(os.fspath(src), found, FILE)
        os.link(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd, follow_symlinks=False)


def truncate(path: PathLike, size: int) -> None:
    """``truncate`` of the regular file ``path`` to ``size`` bytes (see :func:`open_file`)."""
    fd = open_file(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def fsync_folder(path: PathLike) -> None:
    """fsync the folder ``path``, so that a rename or a new file in it survives a power loss."""
    fd = open_folder(path)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def set_aside(path: PathLike, now_ms: int | None = None) -> Path:
    """Rename what is at ``path`` (a file, a folder, a link: the name itself, never its
    content or a link's target) to ``<name>.damaged-<ms>`` beside it, for a person to look
    at; it is never read or removed by the store again. Returns the new path."""
    stamp = int(time.time() * 1000) if now_ms is None else now_ms
    p = Path(path)
    for k in range(1000):
        moved = p.with_name(f"{p.name}{DAMAGED}{stamp}" + (f"-{k}" if k else ""))
        if kind(moved) is None:
            break
    with parent_of(p) as (sfd, sname), parent_of(moved) as (dfd, dname):
        os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
    return moved


def is_set_aside(name: str) -> bool:
    """Whether ``name`` is something :func:`set_aside` moved there (skipped by every listing)."""
    return DAMAGED in name


def is_folder(path: PathLike) -> bool:
    """Whether ``path`` is a folder (not a link to one)."""
    return kind(path) == FOLDER



def walk(path: PathLike, descend: Callable[[str], bool]) -> Iterator[tuple[str, str]]:
    """``(relative path, kind)`` of everything under the folder ``path``, each folder's
    entries sorted and listed before those of its subfolders, links not followed; a folder's
    content is listed when ``descend(its relative path)`` is true. One ``openat`` and one
    listing per folder entered. Nothing when ``path`` is absent."""
    try:
        top = open_folder(path)
    except FileNotFoundError:
        return
    pending: list[tuple[int, str]] = [(top, "")]
    try:
        while pending:
            fd, rel = pending.pop()
            below: list[tuple[int, str]] = []
            try:
                with os.scandir(fd) as it:
                    found = sorted((e.name, _kind_of_entry(e)) for e in it)
                for name, k in found:
                    sub = f"{rel}/{name}" if rel else name
                    yield sub, k
                    if k == FOLDER and descend(sub):
                        try:
                            below.append((os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                                  dir_fd=fd), sub))
                        except (FileNotFoundError, NotADirectoryError, OSError):
                            continue  # removed (or replaced) meanwhile
            finally:
                os.close(fd)
                pending.extend(reversed(below))
    finally:
        for fd, _ in pending:
            os.close(fd)


def _kind_of_entry(e: os.DirEntry[str]) -> str:
    if e.is_symlink():
        return LINK
    if e.is_dir(follow_symlinks=False):
        return FOLDER
    if e.is_file(follow_symlinks=False):
        return FILE
    return SPECIAL
