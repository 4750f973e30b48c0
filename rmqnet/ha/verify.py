"""An old master come back as a slave: its log compared with its new master's stream before
it is trusted (ours; RocketMQ 4.9.8 has no such step), sans-I/O.

A store that was a master keeps how far a slave acknowledged its log (``A``, the store's
replication checkpoint: ``MessageStore.replication_checkpoint``). ``[0, A)`` is on that slave,
which may have been promoted in its place; past ``A`` the old master may hold records nobody
else has (acknowledged to producers under ASYNC_MASTER, or answered SLAVE_NOT_AVAILABLE /
FLUSH_SLAVE_TIMEOUT under SYNC_MASTER, never SEND_OK), while the new master wrote its own
there. So its first session as a slave does not report its end ``E`` (its published tail): it
reports ``A`` (rounded down to a record boundary: a slave may have acknowledged part of a
record, and the new master holds only its whole ones), and :class:`RejoinVerifier` compares
the master's stream from ``A`` with its own bytes over ``[A, E)``:

(what the stream does: verdict)
- a byte at ``D < E`` differs from this log's: cut at ``D`` (the store keeps the whole records ending at or before
  ``D``)
- a heartbeat at ``M < E`` after every byte up to ``M`` matched (the master's log ends there): cut at ``M``
- every byte up to ``E`` matched: keep everything; the stream's bytes past ``E`` are replicated as usual

A stream that differs at ``A`` itself is the usual case after a failover: the promoted slave
held exactly ``[0, A)`` and its first own record starts at ``A``; the cut is then at ``A``,
the end of a record. While it compares, the verifier's position (every byte below it matches
the master's) is what the slave reports: never more than the master holds, so the master
never counts bytes the slave does not share as acknowledged.

The stream is RocketMQ 4.x's (:mod:`rmqnet.ha.wire`): a master streams from the slave's first
report and sends a heartbeat (its next transfer position, size 0) after
``haSendHeartbeatInterval`` with nothing to send. One exception to "transfers start at the
report": a report of 0 is a new slave to a master, which starts elsewhere (RocketMQ at its last
segment, ours at its first offset); with ``A = 0`` a first transfer at ``T > 0`` is compared
from ``T`` (``[0, T)`` taken as shared, as ``[0, A)`` is), if ``T <= E``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .wire import HAProtocolError, Transfer

#: ``local(offset, n)``: this store's published bytes ``[offset, offset + n)``, exactly ``n``
Local = Callable[[int, int], bytes]


@dataclass(frozen=True)
class Verdict:
    """How the comparison ended: ``matched`` (every byte up to ``offset``, this log's end,
    is the master's; ``rest``: the transfers' bytes from ``offset`` on, to replicate) or not
    (the logs part at ``offset``: cut there; ``why`` says how)."""

    matched: bool
    offset: int
    why: str
    rest: list[Transfer] = field(default_factory=list)


def first_difference(a: bytes | memoryview, b: bytes | memoryview) -> int:
    """The index of the first byte where ``a`` and ``b`` (same length) differ, ``len(a)`` if none."""
    if a == b:
        return len(a)
    diff = np.flatnonzero(np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8))
    return int(diff[0]) if len(diff) else len(a)


class RejoinVerifier:
    """Compares a master's stream with this log over ``[start, end)`` (see the module docstring)."""

    def __init__(self, start: int, end: int) -> None:
        if not 0 <= start <= end:
            raise ValueError(f"cannot verify [{start}, {end})")
        self.start = start
        self.end = end
        #: every byte below it matched the master's (what the slave reports)
        self.position = start
        self.verdict: Verdict | None = None
        self._first = True

    def feed(self, transfers: list[Transfer], local: Local) -> Verdict | None:
        """Compare ``transfers`` (in stream order) with ``local``; returns the verdict once there
        is one (then the verifier is done), else ``None``. :class:`HAProtocolError` for a
        transfer that is not at the position (the connection drops: nothing is decided)."""
        if self.verdict is not None:
            raise HAProtocolError("the comparison is over")
        for i, t in enumerate(transfers):
            if t.offset != self.position:
                if not (self._first and self.start == 0 and 0 < t.offset <= self.end):
                    raise HAProtocolError(
                        f"master slave offset not match: transfer at {t.offset}, "
                        f"this log is compared up to {self.position}"
                    )
                self.start = self.position = t.offset  # a new slave's stream (see the module docstring)
            self._first = False
            if t.heartbeat:
                if self.position < self.end:
                    return self._done(False, self.position, "the master's log ends there")
                return self._done(True, self.end, "every byte matched", transfers[i + 1 :])
            n = min(len(t.data), self.end - self.position)
            if n:
                mine = local(self.position, n)
                k = first_difference(memoryview(t.data)[:n], mine)
                if k < n:
                    return self._done(False, self.position + k, "the master's log differs there")
                self.position += n
            if self.position == self.end:
                rest = ([Transfer(self.end, t.data[n:])] if n < len(t.data) else []) + transfers[i + 1 :]
                return self._done(True, self.end, "every byte matched", rest)
        return None

    def _done(self, matched: bool, offset: int, why: str, rest: list[Transfer] | None = None) -> Verdict:
        self.verdict = Verdict(matched, offset, why, rest or [])
        return self.verdict
