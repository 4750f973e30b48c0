"""Where a command may write: never inside the store it reads, never through a link onto a
store file (``export ROOT T --out ROOT/commitlog/000...0 --read-only`` once truncated the
segment before reading it).

:func:`check_outside` refuses an output path that resolves (links included, at every level)
to the store root or anything under it, before the store is opened and before anything is
opened for writing. :func:`open_output` then opens the resolved path without following a
link in its last part (``O_NOFOLLOW``: a link swapped in since the check is refused), and
without truncating until it has checked that the file is a regular file and, when it has
other hard links, that none of them is inside the store (a hard link to a segment made
outside the root is the same file). ``-`` is standard output.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from .exits import USAGE, CliError

STDOUT = "-"


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_outside(out: str, root: str | os.PathLike[str], option: str = "--out") -> str:
    """The resolved path of ``out`` (``-`` as it is); raises :class:`CliError` (exit 2) when
    it is the store ``root`` or inside it, after resolving every link of both."""
    if out == STDOUT:
        return out
    real_root = os.path.realpath(root)
    real = os.path.realpath(out)
    if _inside(real, real_root):
        shown = out if real == os.path.abspath(out) else f"{out} (resolves to {real})"
        raise CliError(
            f"{option} {shown} is inside the store {real_root}: no command writes inside a store it "
            "reads; write the file elsewhere",
            USAGE,
        )
    return real


def _same_file_in(root: str, st: os.stat_result) -> str | None:
    """A path under ``root`` that is the file of ``st`` (links not followed), if any."""
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk does not follow links to folders
        for name in filenames + dirnames:
            p = os.path.join(dirpath, name)
            try:
                other = os.lstat(p)
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                return p
    return None


@contextmanager
def open_output(out: str, root: str | os.PathLike[str], option: str = "--out") -> Iterator[BinaryIO]:
    """A binary file to write the output to (see the module docstring); stdout for ``-``.
    Raises :class:`CliError` (exit 2) for a refused path or one that cannot be opened."""
    if out == STDOUT:
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    real = check_outside(out, root, option)
    try:
        fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:  # a missing folder, no permission, a link swapped in: the path asked for
        raise CliError(f"{option} {out}: {exc.strerror or exc}", USAGE) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CliError(f"{option} {out} is not a regular file", USAGE)
        if st.st_nlink > 1:
            twin = _same_file_in(os.path.realpath(root), st)
            if twin is not None:
                raise CliError(
                    f"{option} {out} is a hard link to the store's file {twin}: no command writes inside "
                    "a store it reads",
                    USAGE,
                )
        os.ftruncate(fd, 0)
        f = os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f
