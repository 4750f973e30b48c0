"""Reading and writing RocketMQ's JSON config files (``<root>/config/*.json``).

RocketMQ writes them with fastjson, whose integer map keys are *unquoted* (``{0:250}``, not
strict JSON); we read both forms and write quoted keys, which fastjson also reads. A file is
written as ``<f>.tmp`` then renamed, the previous one kept as ``<f>.bak``
(:func:`rmqlog.fileio.replace_file`); a reader falls back to ``.bak`` when the main file is
missing, empty or unreadable (not UTF-8, not JSON, or not the caller's structure), as
RocketMQ's ``ConfigManager.load`` does; when neither can be read,
:class:`rmqlog.errors.CorruptStoreError` names the file.

Costs: a file is parsed by orjson (a strict JSON parser, in C), and only a file it refuses is
parsed again by :mod:`json` after its bare integer keys are quoted (a character loop in
Python: ~2 s for a 10 MB file, paid for files RocketMQ wrote, not for ours). The table files
(:mod:`rmqlog.config_tables`) are written by orjson (:func:`dump_table`), the others tab-indented
as RocketMQ writes them (:func:`dump_fastjson`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from . import safe_open
from .clock import SYSTEM_CLOCK
from .errors import CorruptStoreError, WrongFileTypeError

log = logging.getLogger(__name__)
_warned: set[tuple[str, str]] = set()


def warn_once(path: Path, message: str) -> None:
    """Log a problem of a config file once per process (the files may be re-read often)."""
    key = (str(path), message)
    if key not in _warned:
        _warned.add(key)
        log.warning("%s: %s", path, message)


def quote_int_keys(text: str) -> str:
    """Quote fastjson's bare integer object keys (``{0:1}`` -> ``{"0":1}``), leaving strings alone."""
    out: list[str] = []
    i, n = 0, len(text)
    in_str = False
    expect_key = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1 : i + 2])
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
            continue
        if c == '"':
            in_str = True
            expect_key = False
        elif c in "{,":
            expect_key = True
        elif expect_key and (c.isdigit() or c == "-"):
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            k = j
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":":
                out.append(f'"{text[i:j]}"')
                i = j
                expect_key = False
                continue
            expect_key = False
        elif not c.isspace():
            expect_key = False
        out.append(c)
        i += 1
    return "".join(out)


def parse_fastjson(text: str) -> Any:
    """A config file's text as JSON values: strict JSON by orjson; else (fastjson's bare
    integer keys, a number orjson does not take) by :mod:`json` after quoting bare keys.
    Raises ``ValueError`` (or ``RecursionError``) when it is not JSON either way."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(quote_int_keys(text))


_FAILED, _EMPTY = object(), object()


def _read_fd(fd: int) -> bytes:
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def load_held(path: Path, decode: Callable[[Any], Any] | None = None) -> tuple[Any | None, int | None]:
    """:func:`load_fastjson`'s answer, and the open descriptor of ``path`` when the answer is
    ``path``'s own content (read through that descriptor, so it is exactly that file's; the
    caller owns it and closes it), else ``None`` (the answer came from ``.bak``, or there is
    none). Raises as :func:`load_fastjson`."""
    errors: list[str] = []
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            fd = safe_open.open_file(candidate, os.O_RDONLY)
        except FileNotFoundError:
            continue
        except WrongFileTypeError as exc:  # a folder, a link: never read through
            errors.append(f"{candidate.name}: {exc.found} ({exc.path})")
            continue
        try:
            value = _parse(candidate, _read_fd(fd), decode, errors)
        except BaseException:
            os.close(fd)
            raise
        if value is _EMPTY or value is _FAILED:
            os.close(fd)
            continue
        if errors:
            warn_once(path, f"unreadable, read {candidate.name} instead ({errors[0]})")
        if candidate != path:
            os.close(fd)
            return value, None
        return value, fd
    if errors:
        raise CorruptStoreError(f"unreadable config file ({'; '.join(errors)})", path=str(path))
    return None, None


def _parse(candidate: Path, data: bytes, decode: Callable[[Any], Any] | None, errors: list[str]) -> Any:
    """The decoded content (``None`` is one), ``_EMPTY`` for an empty file, ``_FAILED`` (noted in ``errors``)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        errors.append(f"{candidate.name}: not UTF-8 ({exc})")
        return _FAILED
    if not text.strip():
        return _EMPTY
    try:
        raw = parse_fastjson(text)
        return decode(raw) if decode is not None else raw
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        errors.append(f"{candidate.name}: {type(exc).__name__}: {exc}")
        return _FAILED


def load_fastjson(path: Path, decode: Callable[[Any], Any] | None = None) -> Any | None:
    """Parse a RocketMQ config file, else its ``.bak``; ``None`` if neither exists (or both are empty).

    ``decode`` turns the parsed JSON into the caller's structure, raising ``ValueError``,
    ``TypeError``, ``KeyError`` or ``AttributeError`` when it is not that structure; its result
    is returned. A file that is not UTF-8, not JSON or not the structure is skipped for its
    ``.bak`` (logged); when no candidate is readable, :class:`CorruptStoreError` names the file.
    """
    value, fd = load_held(path, decode)
    if fd is not None:
        os.close(fd)
    return value


def dump_fastjson(obj: Any) -> bytes:
    """Tab-indented JSON, as RocketMQ's ``JSON.toJSONString(obj, true)`` lays it out."""
    return json.dumps(obj, indent="\t", sort_keys=False).encode("utf-8")


def dump_table(obj: Any) -> bytes:
    """A table file's bytes (:mod:`rmqlog.config_tables`: big files, written on a schedule):
    JSON, two-space indented, integer map keys quoted (orjson: ~0.07 s for 100 k offsets where
    :func:`dump_fastjson` takes ~0.5 s); :func:`dump_fastjson`'s layout when orjson refuses a
    value (an integer past 64 bits kept from a file as it was read)."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return dump_fastjson(obj)


def set_aside_if_unreadable(path: Path, decode: Callable[[Any], Any] | None = None) -> Path | None:
    """``repair``: move a config file that neither it nor its ``.bak`` can be read from aside
    (``decode``: as for :func:`load_fastjson`, what the content must decode to).

    Renamed to ``<name>.damaged-<ms>`` (kept for a person to look at, never read again) so the
    store can start from what the log holds. Returns the new name, or ``None`` when the file
    was readable (or absent).
    """
    try:
        load_fastjson(path, decode)
        return None
    except CorruptStoreError:
        pass
    stamp = SYSTEM_CLOCK.wall_ms()  # (only a name: a store's clock, say a test's, need not give unique ones)
    moved = [
        safe_open.set_aside(candidate, stamp)  # (a link is moved itself, its target untouched)
        for candidate in (path, path.with_name(path.name + ".bak"))
        if safe_open.kind(candidate) is not None
    ]
    return moved[0] if moved else None


__all__ = [
    "warn_once",
    "quote_int_keys",
    "parse_fastjson",
    "load_held",
    "load_fastjson",
    "dump_fastjson",
    "dump_table",
    "set_aside_if_unreadable",
]
