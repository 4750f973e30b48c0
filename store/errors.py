"""The store's typed errors: one base class, one subclass per kind of failure.

Expected outcomes (end of a segment, no message at an offset, an empty queue) are
return values or status enums, never exceptions. Exceptions mean the caller asked for
something invalid, or the files on disk are not what they must be.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar


class StoreError(Exception):
    """Base class of every error raised by :mod:`rmqlog`."""


class InvalidMessageError(StoreError, ValueError):
    """A message (one row of a batch) is invalid; nothing of its batch was written.

    ``row`` is the 0-based index of the offending row in the input batch (``None`` when
    the problem is with a whole column), ``field`` the column name.
    """

    def __init__(self, message: str, *, row: int | None, field: str) -> None:
        where = f"row {row}, field {field!r}" if row is not None else f"field {field!r}"
        super().__init__(f"{where}: {message}")
        self.row = row
        self.field = field
        self.reason = message


class InvalidTopicError(InvalidMessageError):
    """A topic name is empty, longer than 127 bytes or uses characters outside ``[%|a-zA-Z0-9_-]``."""


class InvalidGroupError(StoreError, ValueError):
    """A consumer group name is not a valid RocketMQ name."""


class MessageTooLargeError(InvalidMessageError):
    """A body is over ``max_message_size`` or a properties string is over 32767 bytes."""


class QueueIdError(InvalidMessageError):
    """A queue id is negative or not below the topic's number of write queues."""


class InvalidArgumentError(StoreError, ValueError):
    """A call's argument is out of its range (e.g. ``max_count <= 0``)."""


class IndexDisabledError(StoreError):
    """A query by key needs the index files, and the store has none (``message_index_enable`` off)."""


class ConfigError(StoreError, ValueError):
    """A :class:`rmqlog.StoreConfig` value, or a config file, is invalid."""


class CorruptStoreError(StoreError):
    """Files on disk are not a valid store (bad segment size, unreadable state, a bad record)."""

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None) -> None:
        parts = [message]
        if path is not None:
            parts.append(f"file {path}")
        if offset is not None:
            parts.append(f"offset {offset}")
        super().__init__("; ".join(parts))
        self.path = path
        self.offset = offset


class WrongFileTypeError(CorruptStoreError):
    """A store file or folder is not what the store keeps there: a folder where a file
    belongs, a file where a folder belongs, a symbolic link (links are never followed inside
    a store: every file is opened ``O_NOFOLLOW``, see :mod:`rmqlog.safe_open`), or a special
    file (a fifo, a socket, a device). ``path`` names it, ``found`` says what it is
    (``"a folder"``, ``"a file"``, ``"a symbolic link"``, ``"a special file"``), ``expected``
    what belongs there. Nothing was read, written or removed through it: ``repair=True``
    sets it aside as ``<name>.damaged-<ms>`` (a link's target is never touched)."""

    def __init__(self, path: str, found: str, expected: str) -> None:
        super().__init__(
            f"{found} where the store keeps {expected} (links are not followed inside a store); "
            "open with repair=True to set it aside",
            path=path,
        )
        self.found = found
        self.expected = expected

    def __reduce__(self) -> tuple[object, ...]:  # picklable (Spark passes errors between processes)
        return (type(self), (self.path, self.found, self.expected))


class CorruptRecordError(CorruptStoreError):
    """A commitlog record read back is damaged: its body does not match its BODYCRC, or its
    lengths do not add up to its TOTALSIZE. ``path`` is the segment file, ``offset`` the
    record's commitlog offset. Reads check body CRCs unless ``check_crc_on_read`` (or the
    call's ``check_crc``) is off."""


class CorruptQueueError(CorruptStoreError):
    """A consume-queue unit does not match the commitlog record it points at (it points past
    the published tail, below the commitlog's first offset, out of its segment, at no record,
    or at a record of another size, topic, queue or queue offset). ``path`` is the
    consume-queue file, ``queue_offset`` the unit's logical offset, ``commit_log_offset``
    (also ``offset``) where it points. Nothing of another record is ever returned instead."""

    def __init__(self, message: str, *, path: str, queue_offset: int, commit_log_offset: int) -> None:
        super().__init__(f"{message}; queue offset {queue_offset}, commitlog offset {commit_log_offset}", path=path)
        self.offset = commit_log_offset
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset


class DataLossError(CorruptStoreError):
    """Data a caller relies on is gone. Raised as such by recovery: damage in data that was
    already flushed (acknowledged), or a bad record with valid data after it; nothing was
    changed then: open with ``repair=True`` to cut the log at the damage, or run
    :func:`rmqlog.recovery.verify.verify` to see every problem. See also
    :class:`MessagesDeletedError` (retention)."""


class MessagesDeletedError(DataLossError):
    """Messages a read asked for were deleted by retention (``clean_expired``) before or while
    it read them. ``topic``, ``queue_id`` and the lost queue offsets ``[start, end)`` are named
    (``end`` is the queue's first offset still stored). Nothing of another record is returned
    instead; reading again from ``end`` gets what is left."""

    def __init__(self, topic: str, queue_id: int, start: int, end: int, *, detail: str = "") -> None:
        message = f"messages of {topic}/{queue_id} at queue offsets [{start}, {end}) were deleted by retention"
        super().__init__(message + (f" ({detail})" if detail else ""))
        self.topic = topic
        self.queue_id = queue_id
        self.start = start
        self.end = end
        self.detail = detail

    def __reduce__(self) -> tuple[object, ...]:  # picklable (processes pass it on)
        return (_deleted_error, (type(self), self.topic, self.queue_id, self.start, self.end, self.detail))


def _deleted_error(
    cls: type[MessagesDeletedError], topic: str, queue_id: int, start: int, end: int, detail: str
) -> MessagesDeletedError:
    return cls(topic, queue_id, start, end, detail=detail)


class StoreNotFoundError(StoreError):
    """``MessageStore.open(root, create=False)`` found no store at ``root`` (a missing folder,
    or one without ``commitlog/``, ``consumequeue/`` or ``config/``). Nothing was created."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(f"{message}: {path}")
        self.path = path


class DiskFullError(StoreError, OSError):
    """The disk (or the user's quota) is full: a write got ``ENOSPC``/``EDQUOT``, or disk use is
    above ``disk_space_warning_level_ratio`` (appends only). ``filename`` names the file whose
    write failed, when there is one.

    Nothing already stored is harmed and the store stays readable; the operation can be
    retried once space is freed. An append publishes nothing of its batch (but see
    ``appended``). A dispatch leaves every consume queue consistent
    (units written by the failed run are kept or removed whole, and its position is a hint
    that the next run corrects).

    ``appended`` is True when the batch *was* appended (published, readable by offset) and
    only a step after the append failed: the ``SYNC_FLUSH`` flush or the consume-queue units
    of ``dispatch=True`` (the next flush or dispatch completes them); retrying such a put
    would append the batch again (idempotent puts, with ``writer``/``sequence``, would not).
    """

    def __init__(self, *args: object, appended: bool = False) -> None:
        super().__init__(*args)
        self.appended = appended


#: The errnos of a full disk: no space left, or the user's quota exhausted.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def raise_if_disk_full(exc: BaseException, path: object, doing: str) -> None:
    """Raise ``exc`` as a :class:`DiskFullError` naming ``path`` when it is a full disk's error.

    Returns (and the caller re-raises ``exc`` itself) for any other error, and for a
    :class:`DiskFullError` already. ``doing`` completes "disk full while ...".
    """
    if isinstance(exc, OSError) and not isinstance(exc, DiskFullError) and exc.errno in DISK_FULL_ERRNOS:
        raise DiskFullError(exc.errno, f"disk full while {doing}", str(path)) from exc


def disk_full_from_errno(err: int, path: object, doing: str) -> NoReturn:
    """Raise the error of a failed system call that set ``errno`` to ``err`` (a ctypes call):
    :class:`DiskFullError` for a full disk, else ``OSError``; both name ``path``."""
    exc = OSError(err, os.strerror(err), str(path))
    raise_if_disk_full(exc, path, doing)
    raise exc


class StoreBusyError(StoreError):
    """An operation that needs the store to itself (``MessageStore.open(root, repair=True)``,
    ``rmqlog recover --repair``, ``MessageStore.replica.replica_truncate``) found it open in other
    processes (or in another open store of this process): repairing or cutting files others are
    reading and appending to would pull them from under them. Nothing was changed; close the
    holders (or wait for them) and try again. ``holders``: the pids that have the store open,
    as far as they can be told (``owners/`` files of live processes, the lock's holders)."""

    def __init__(self, message: str, *, path: str, holders: list[int]) -> None:
        who = ", ".join(map(str, holders)) if holders else "unknown"
        super().__init__(f"{message}: {path} is open in other processes (pid {who})")
        self.path = path
        self.holders = holders


class LmqLimitError(StoreError):
    """A put whose messages name light message queues (``INNER_MULTI_DISPATCH``) was refused:
    the store holds more LMQs than ``max_lmq_consume_queue_num`` (RocketMQ's
    ``LMQ_CONSUME_QUEUE_NUM_EXCEEDED``). Nothing of the put was written. ``count``: the LMQs
    the store holds, ``limit``: the setting."""

    def __init__(self, count: int, limit: int) -> None:
        super().__init__(f"the store holds {count} light message queues, more than max_lmq_consume_queue_num {limit}")
        self.count = count
        self.limit = limit


class TooManyOpenFilesError(StoreError, OSError):
    """The process ran out of file descriptors (``EMFILE``: its ``ulimit -n``; ``ENFILE``: the
    system's table) or of memory mappings (``vm.max_map_count``) while the store opened
    ``filename`` (``None`` when the system did not say which file).

    The store keeps at most ``max_open_mapped_files`` segment and consume-queue files open
    (see :mod:`rmqlog.log.open_files`), so this means the rest of the process (other
    stores, sockets, the caller's own files) uses the others. Nothing stored is harmed:
    the call that failed wrote nothing it did not undo, or left what recovery or the next
    dispatch completes. Raise the limit (``ulimit -n``, ``LimitNOFILE=`` of a systemd unit),
    lower ``max_open_mapped_files``, or close files, then retry.
    """


#: The errnos of a process or system out of file descriptors.
OUT_OF_FILES_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})


def too_many_open_files(exc: OSError, path: object, doing: str) -> TooManyOpenFilesError:
    """The :class:`TooManyOpenFilesError` for ``exc`` (an ``EMFILE``/``ENFILE``/``ENOMEM``
    error of an open or a mapping), naming ``path`` (``None``: the error's own filename)."""
    name = exc.filename if path is None else path
    err = exc.errno if exc.errno is not None else errno.EMFILE
    advice = (
        "too many open files or mappings in this process while "
        + doing
        + ": raise the limit (ulimit -n; vm.max_map_count), lower max_open_mapped_files, or close other files"
    )
    return TooManyOpenFilesError(err, advice, None if name is None else str(name))


def raise_if_out_of_files(exc: BaseException, path: object, doing: str) -> None:
    """Raise ``exc`` as a :class:`TooManyOpenFilesError` naming ``path`` (``None``: the file
    the error names) when the process or system is out of descriptors; return otherwise
    (the caller re-raises ``exc``)."""
    if isinstance(exc, OSError) and not isinstance(exc, StoreError) and exc.errno in OUT_OF_FILES_ERRNOS:
        raise too_many_open_files(exc, path, doing) from exc


_C = TypeVar("_C", bound=type)


def out_of_files_typed(cls: _C) -> _C:
    """Class decorator: an ``EMFILE``/``ENFILE`` ``OSError`` escaping any public method of
    ``cls`` (or its constructor) is raised as :class:`TooManyOpenFilesError` naming the file
    the error names. The store's segment and index files raise it themselves; this covers
    every other file a call may open (state and config files, locks, folders listed)."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except OSError as exc:
                raise_if_out_of_files(exc, None, f"running {fn.__name__}")
                raise

        return call

    for name, attr in list(vars(cls).items()):
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(attr, (classmethod, staticmethod)):
            setattr(cls, name, type(attr)(wrap(attr.__func__)))
        elif callable(attr):
            setattr(cls, name, wrap(attr))
    return cls


class StoreClosedError(StoreError):
    """The store was used after :meth:`rmqlog.MessageStore.close`."""


class ReadOnlyStoreError(StoreError):
    """A store opened ``read_only`` was asked to change something (a put, a dispatch, an
    offset commit...): nothing was written. The message names the operation."""


class ReplicaOffsetError(StoreError, ValueError):
    """A replication call named an offset the store cannot serve or take: a read below the
    commitlog's first offset, past its published tail or in a deleted segment
    (``replica_read``), or an append that does not start exactly at this store's end
    (``replica_append``: ``end`` is where it does end). Nothing was read or written.
    ``offset`` is the offset asked for."""

    def __init__(self, message: str, *, offset: int, end: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset
        self.end = end

    def __reduce__(self) -> tuple[object, ...]:
        return (_replica_offset_error, (str(self), self.offset, self.end))


def _replica_offset_error(message: str, offset: int, end: int | None) -> ReplicaOffsetError:
    return ReplicaOffsetError(message, offset=offset, end=end)


class ReplicaStreamError(CorruptStoreError):
    """Bytes given to ``replica_append`` are not this store's log continued: a damaged record
    (magic, lengths, body CRC, a header field no store writes), a record whose PHYSICALOFFSET
    is not where it lands or whose QUEUEOFFSET breaks its queue's density, a topic name the
    store refuses, a blank that does not end its segment, or a transfer crossing a segment.
    ``offset`` is the commitlog offset of the first bad record. The records before it were
    published; nothing at or past it was (the bytes written there are cleared): the stored
    log is unharmed."""
