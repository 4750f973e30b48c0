"""The slave's side of replication: :class:`HAClient` (RocketMQ's ``HAService.HAClient``).

It connects to the master's HA address (``haMasterAddress``, or the one the name server
hands back at registration: :meth:`HAClient.set_master`), reports its end
(``store.replica.replica_end()``, an 8-byte offset), then reads transfers (:mod:`rmqnet.ha.wire`).
Each transfer's offset must be exactly the slave's end, heartbeats included (Java's
``dispatchReadRequest``: "master slave offset not match" drops the connection); the bytes go
to ``store.replica.replica_append`` (transfers that arrived together and lie in one segment as one
append, on a worker thread so the event loop keeps serving), and the new end is reported at
once. A stream the store refuses (a damaged or foreign record: ``ReplicaStreamError``), a
malformed header, or an offset that does not match closes the connection; the store has
published only the records before the bad one, and the next connection reports that end.

A store that was a master (it has a replication checkpoint ``A``: how far a slave acknowledged
its log) does not trust what it holds past ``A``: its first session compares the master's
stream with its own log (:mod:`rmqnet.ha.verify`), reporting ``A`` rounded down to a record
boundary and then how far the bytes matched. Where they part (a byte differs, or the master's
log ends before this one) it cuts its log there (``store.replica.replica_truncate``: the whole records
ending at or before that offset stay), clears the checkpoint, logs a warning with the bytes
dropped and the offset, drops the connection and reconnects at once reporting its new end;
when every byte matched it clears the checkpoint and goes on as a slave in the same session,
appending what comes after its end. A store without a checkpoint reports its end. A cut the
store refuses (another process has it open: ``StoreBusyError``) is logged and tried again
with the next session (back-off).

With ``credentials`` (``(accessKey, secretKey)``: the broker's
``innerClientAuthenticationCredentials``) each connection first proves them to the master
(:mod:`rmqnet.ha.auth`); a master that refuses them, or that does not answer the handshake (a
RocketMQ master), ends the session like a protocol error (logged, :attr:`HAClient.last_error`,
back-off). Without, the slave speaks RocketMQ 4.x's stream as it is.

Its timing is a service on the clock: :meth:`HAClient.run_once` (``now_ms``) starts a
connection when none is open and its back-off has passed (``backoff_min_ms``, doubling up to
``backoff_max_ms`` after each failure, back to the minimum once a session has applied a
transfer), reports the end every ``haSendHeartbeatInterval``, and closes a connection silent
for ``haHousekeepingInterval``. The broker's service loop calls it; tests call it with a
manual clock. It must run on the event loop the sessions run on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rmqlog import Clock, MessageStore, StoreError, SystemClock

from ..remoting.address import parse_host_port
from .auth import ADMITTED, HELLO, NONCE_SIZE, HAAuthError, encode_proof, read_verdict_reason
from .verify import RejoinVerifier, Verdict
from .wire import (
    HEARTBEAT_INTERVAL_MS,
    HOUSEKEEPING_INTERVAL_MS,
    MAX_TRANSFER_SIZE,
    HAProtocolError,
    Transfer,
    TransferReader,
    encode_report,
    join_transfers,
)

log = logging.getLogger(__name__)

#: bytes the connection buffers while an append runs (asyncio pauses reading at twice its
#: limit), and the most one read takes: under load, what arrived during an append is the next
#: append (fewer, larger appends and dispatch rounds); idle, a read takes what came
READ_BUFFER = 8 << 20


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too); ``ValueError`` naming what is wrong."""
    return parse_host_port("HA address", address.strip())  # (AddressError: a ValueError)


def check_offsets(transfers: list[Transfer], end: int) -> int:
    """The slave's end after ``transfers`` (each must start at the end so far, heartbeats
    included); :class:`HAProtocolError` at the first that does not."""
    for t in transfers:
        if t.offset != end:
            raise HAProtocolError(f"master slave offset not match: transfer at {t.offset}, slave ends at {end}")
        end += len(t.data)
    return end


class HAClient:
    """A slave's link to its master (see the module docstring)."""

    def __init__(
        self,
        store: MessageStore,
        master: str | None = None,
        *,
        clock: Clock | None = None,
        heartbeat_ms: int = HEARTBEAT_INTERVAL_MS,
        housekeeping_ms: int = HOUSEKEEPING_INTERVAL_MS,
        backoff_min_ms: int = 100,
        backoff_max_ms: int = 5000,
        max_transfer: int = MAX_TRANSFER_SIZE,
        connect_timeout_s: float = 3.0,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        self.store = store
        self.credentials = credentials
        self.clock: Clock = clock or SystemClock()
        self.heartbeat_ms = heartbeat_ms
        self.housekeeping_ms = housekeeping_ms
        self.backoff_min_ms = backoff_min_ms
        self.backoff_max_ms = backoff_max_ms
        self.max_transfer = max_transfer
        self.connect_timeout_s = connect_timeout_s
        self.master: tuple[str, int] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.backoff_ms = backoff_min_ms
        self.next_attempt_ms = 0
        self.set_master(master)
        self.connects = 0  # sessions started
        self.last_error: str | None = None
        self.last_read_ms = 0
        self.last_report_ms = 0
        self._session: asyncio.Task[None] | None = None
        self._reported = -1
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="rmq-ha-append")
        self._closed = False
        #: set whenever the end moved (tests and the broker await it instead of polling)
        self.progress = asyncio.Event()
        #: the comparison of this session, while it runs (see the module docstring)
        self.verifier: RejoinVerifier | None = None
        #: (offset cut at, bytes dropped) of each cut this client made, oldest first
        self.cuts: list[tuple[int, int]] = []

    def set_master(self, address: str | None) -> None:
        """The master's HA address (``None``/empty: none known); a change drops the current
        connection (the next round connects to the new one)."""
        new = parse_address(address) if address else None
        if new != self.master:
            self.master = new
            self.next_attempt_ms = 0
            self.backoff_ms = self.backoff_min_ms
            if self._writer is not None:
                self._writer.close()

    @property
    def connected(self) -> bool:
        return self._writer is not None

    # ----------------------------------------------------------------- service
    def run_once(self, now_ms: int) -> None:
        """One round (see the module docstring); returns at once (sessions are tasks)."""
        if self._closed:
            return
        session = self._session
        if session is None or session.done():
            if session is not None:
                self._session = None
            if self.master is not None and now_ms >= self.next_attempt_ms:
                self.connects += 1
                self.last_read_ms = self.last_report_ms = now_ms
                self._session = asyncio.get_running_loop().create_task(self._run(self.master))
            return
        writer = self._writer
        if writer is None:
            return
        if now_ms - self.last_read_ms > self.housekeeping_ms:
            log.warning("HA: master silent for %d ms: closing", now_ms - self.last_read_ms)
            writer.close()
        elif now_ms - self.last_report_ms >= self.heartbeat_ms:
            verifier = self.verifier
            self._report(verifier.position if verifier is not None else self.store.replica.replica_end(), force=True)

    async def close(self) -> None:
        """Stop: the connection closed, no new one; appends in progress finish."""
        self._closed = True
        if self._writer is not None:
            self._writer.close()
        if self._session is not None:
            self._session.cancel()
            with contextlib.suppress(BaseException):
                await self._session
        self._executor.shutdown(wait=True)

    # ----------------------------------------------------------------- session
    def _report(self, end: int, *, force: bool = False) -> None:
        if self._writer is not None and (force or end != self._reported):
            self._writer.write(encode_report(end))
            self._reported = end
            self.last_report_ms = self.clock.wall_ms()

    def _failed(self, why: str) -> None:
        self.last_error = why
        self.next_attempt_ms = self.clock.wall_ms() + self.backoff_ms
        self.backoff_ms = min(self.backoff_max_ms, self.backoff_ms * 2)

    async def _run(self, master: tuple[str, int]) -> None:
        loop = asyncio.get_running_loop()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(*master, limit=READ_BUFFER), self.connect_timeout_s
            )
        except (OSError, TimeoutError) as exc:
            self._failed(f"connect to {master[0]}:{master[1]}: {exc}")
            return
        self._writer = writer
        self._reported = -1
        decoder = TransferReader(self.max_transfer)
        segment = self.store.config.mapped_file_size_commit_log
        try:
            if self.credentials is not None:
                await asyncio.wait_for(self._prove(reader, writer, *self.credentials), self.housekeeping_ms / 1000)
            end = self.store.replica.replica_end()
            verifier = self.verifier = await loop.run_in_executor(self._executor, self._start_verifier)
            self._report(verifier.position if verifier is not None else end, force=True)
            while True:
                data = await reader.read(READ_BUFFER)
                if not data:
                    raise ConnectionError("the master closed the connection")
                self.last_read_ms = self.clock.wall_ms()
                transfers = decoder.feed(data)
                if not transfers:
                    continue
                if verifier is not None:
                    verdict = await loop.run_in_executor(self._executor, verifier.feed, transfers, self._local)
                    if verdict is None:
                        self._report(verifier.position)
                        continue
                    await loop.run_in_executor(self._executor, self._settle, verdict, master)
                    self.verifier = verifier = None
                    if not verdict.matched:
                        self.next_attempt_ms = self.clock.wall_ms()  # reconnect at once, reporting the new end
                        self.backoff_ms = self.backoff_min_ms
                        self.progress.set()
                        return
                    end, transfers = verdict.offset, verdict.rest
                    if not transfers:
                        self._report(end)
                        continue
                check_offsets(transfers, end)
                for t in join_transfers(transfers, segment):
                    if t.data:
                        end = await loop.run_in_executor(
                            self._executor, self.store.replica.replica_append, t.offset, t.data
                        )
                        self.backoff_ms = self.backoff_min_ms  # a working session
                        self.progress.set()
                self._report(end)
        except (HAProtocolError, HAAuthError, StoreError) as exc:
            log.warning("HA: dropping the connection to %s:%d: %s", master[0], master[1], exc)
            self._failed(f"{type(exc).__name__}: {exc}")
        except (ConnectionError, OSError) as exc:
            self._failed(f"{type(exc).__name__}: {exc}")
        finally:
            self.verifier = None
            self._writer = None
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _prove(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, access_key: str, secret_key: str
    ) -> None:
        """The handshake (:mod:`rmqnet.ha.auth`); :class:`HAAuthError` when the master refuses
        or does not speak it."""
        writer.write(HELLO)
        await writer.drain()
        try:
            challenge = await reader.readexactly(len(HELLO) + NONCE_SIZE)
            writer.write(encode_proof(access_key, secret_key, challenge))
            await writer.drain()
            verdict = await reader.readexactly(1)
            if verdict[0] != ADMITTED:
                reason = await reader.readexactly(read_verdict_reason(await reader.readexactly(2)))
                raise HAAuthError(f"the master refused this slave: {reason.decode('utf-8', 'replace')}")
        except asyncio.IncompleteReadError:
            raise HAAuthError(
                "the master closed the connection during the handshake (is this slave's address "
                "on its haSlaveAllowList?)"
            ) from None

    # ----------------------------------------------------------- rejoining
    def _start_verifier(self) -> RejoinVerifier | None:
        """The comparison this session starts with (worker thread): ``None`` without a
        replication checkpoint, or when the whole log lies below it (the checkpoint cleared)."""
        store = self.store
        ack = store.replica.replication_checkpoint()
        if ack is None:
            return None
        end = store.published_tail()
        start = max(store.replica.record_boundary(min(ack, end)), store.replica.commit_log_min_offset())
        if start >= end:
            log.info("HA: this log ends at %d, below what a slave acknowledged (%d): nothing to compare", end, ack)
            store.replica.set_replication_checkpoint(None)
            return None
        log.warning(
            "HA: this store was a master whose slave acknowledged its log up to %d; comparing [%d, %d) with "
            "the master's before replicating",
            ack,
            start,
            end,
        )
        return RejoinVerifier(start, end)

    def _local(self, offset: int, n: int) -> bytes:
        """This store's published bytes ``[offset, offset + n)`` (worker thread)."""
        parts = []
        while n > 0:
            data = self.store.replica.replica_read(offset, n)
            if not data:
                raise StoreError(f"this log ends at {offset}, short of the bytes compared")
            parts.append(data)
            offset += len(data)
            n -= len(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _settle(self, verdict: Verdict, master: tuple[str, int]) -> None:
        """Act on the comparison (worker thread): cut the log where it parts from the master's,
        then clear the checkpoint (a crash between the two compares again: no harm)."""
        store = self.store
        if verdict.matched:
            log.info(
                "HA: this log matches the master %s:%d's up to its end %d: replicating from there",
                *master,
                verdict.offset,
            )
        else:
            tail = store.published_tail()
            new_end = store.replica.replica_truncate(verdict.offset)
            self.cuts.append((new_end, tail - new_end))
            log.warning(
                "HA: %d bytes of this log from offset %d are not in the master %s:%d's log (%s at %d): "
                "dropped; replicating from %d",
                tail - new_end,
                new_end,
                *master,
                verdict.why,
                verdict.offset,
                new_end,
            )
        store.replica.set_replication_checkpoint(None)

    def status(self) -> dict[str, Any]:
        """What the slave knows: master, connected, its end, the last error, how far a comparison
        under way has matched, the cuts made."""
        verifier = self.verifier
        return {
            "master": None if self.master is None else f"{self.master[0]}:{self.master[1]}",
            "connected": self.connected,
            "end": self.store.replica.replica_end(),
            "lastError": self.last_error,
            "connects": self.connects,
            "verifiedUpTo": None if verifier is None else verifier.position,
            "cuts": list(self.cuts),
        }
