"""The master's side of replication: :class:`HAServer` (RocketMQ's ``HAService`` with its
``AcceptSocketService``, ``HAConnection`` and ``GroupTransferService``).

Per slave connection, a :class:`SlaveLink` (sans-I/O: reports in, frames out, decisions by
the clock it is given):

- it waits for the slave's first report (its max commitlog offset); transfers start there.
  A first report of 0 from a slave while this log starts above 0 starts at the log's first
  offset (RocketMQ starts at its last segment; here a new slave gets all the master holds);
- it streams ``store.replica.replica_read`` in transfers of at most ``haTransferBatchSize`` bytes
  (12-byte header + bytes, never across a segment: :mod:`rmqnet.ha.wire`);
- with nothing written for ``haSendHeartbeatInterval`` it sends a heartbeat (size 0);
- each report is the slave's acknowledged offset; a report past this log's published tail
  (a slave ahead of its master: diverged), a negative one, or a start the log cannot serve
  (below its first offset) closes that connection alone.

:class:`HAServer` listens (``127.0.0.1`` by default), runs one reader and one writer task
per connection, keeps ``push_offset`` (the largest offset any slave acknowledged:
RocketMQ's ``push2SlaveMaxOffset``) and answers ``wait_for_replica(offset, timeout_s)`` for
``SYNC_MASTER`` sends and ``slave_ok(put_where)`` (RocketMQ's ``isSlaveOK``: a slave
connected and ``put_where - push_offset < haSlaveFallbehindMax``). Writers are woken by
:meth:`HAServer.notify_appended` (the broker after a put; thread-safe) and by the store's
arrival signal (appends of other processes on the host). ``run_once(now_ms)`` closes
connections silent for ``haHousekeepingInterval`` and records ``push_offset`` as the store's
replication checkpoint (``store.replica.set_replication_checkpoint``) when it moved, at most every
:data:`CHECKPOINT_INTERVAL_MS` (and at :meth:`HAServer.stop`): should this store come back as
a slave after a failover, it compares what lies past that offset with its new master's log
before it trusts it (:mod:`rmqnet.ha.verify`). The checkpoint may lag the acknowledgements by
that interval (a kill in between): it then says less than the slave holds, which only makes the
comparison start earlier. A slave comparing its log reports how far it matched (never past
what this master holds), so it passes the checks below like any other.

Before a connection is a slave, :class:`~rmqnet.ha.auth.SlaveAdmission` decides (the allow
list, the proof of the cluster's credentials: :mod:`rmqnet.ha.auth`): a peer refused gets no
byte of the log, is never in :attr:`HAServer.links` (so it counts for ``slave_ok``) and none
of its reports moves ``push_offset``; it is closed and counted in :attr:`HAServer.refused`.
A handshake not done within ``haHousekeepingInterval`` is refused too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from rmqlog import Clock, MessageStore, StoreError, SystemClock

from .auth import HELLO, HAAuthError, SlaveAdmission, encode_verdict, new_challenge, proof_length
from .wire import (
    HEARTBEAT_INTERVAL_MS,
    HOUSEKEEPING_INTERVAL_MS,
    SLAVE_FALLBEHIND_MAX,
    TRANSFER_BATCH_SIZE,
    HAProtocolError,
    ReportReader,
    encode_header,
)

log = logging.getLogger(__name__)

#: bytes read from the store per round of a writer (cut into transfers of the batch size)
READ_AHEAD = 256 * 1024
#: the least time (ms) between two records of ``push_offset`` as the replication checkpoint
CHECKPOINT_INTERVAL_MS = 1000


class SlaveLink:
    """One slave as the master sees it (see the module docstring); no socket."""

    def __init__(
        self,
        store: MessageStore,
        now_ms: int,
        *,
        batch_size: int = TRANSFER_BATCH_SIZE,
        heartbeat_ms: int = HEARTBEAT_INTERVAL_MS,
        address: str = "?",
    ) -> None:
        self.store = store
        self.batch_size = batch_size
        self.heartbeat_ms = heartbeat_ms
        self.address = address
        self.request_offset = -1  # the first report: where transfers start
        self.ack_offset = -1  # the last report
        self.next_offset = -1  # the next byte to transfer
        self.last_write_ms = now_ms
        self.last_read_ms = now_ms
        self._reports = ReportReader()

    def on_bytes(self, data: bytes, now_ms: int) -> int | None:
        """Bytes from the slave; returns the report they completed (its ack), if any. Raises
        :class:`HAProtocolError` for a malformed report or a slave ahead of this log."""
        self.last_read_ms = now_ms
        offset = self._reports.feed(data)
        if offset is None:
            return None
        tail = self.store.published_tail()
        if offset > tail:
            raise HAProtocolError(f"slave {self.address} reports offset {offset}, past this log's tail {tail}")
        if self.request_offset < 0:
            self.request_offset = offset
        self.ack_offset = offset
        return offset

    def frames(self, now_ms: int, budget: int = READ_AHEAD) -> list[bytes | memoryview]:
        """What to send now: transfers of what the log holds from :attr:`next_offset` (at
        most ``budget`` bytes), else a heartbeat when one is due, else nothing."""
        if self.request_offset < 0:
            return []  # the slave has not reported yet
        if self.next_offset < 0:
            self.next_offset = self._start()
        out: list[bytes | memoryview] = []
        try:
            data = self.store.replica.replica_read(self.next_offset, budget)
        except StoreError as exc:  # below the log's start (deleted), past its tail
            raise HAProtocolError(f"cannot stream to slave {self.address} from {self.next_offset}: {exc}") from exc
        if data:
            view = memoryview(data)
            for i in range(0, len(view), self.batch_size):  # (a few per round: READ_AHEAD / 32 KiB)
                piece = view[i : i + self.batch_size]
                out += [encode_header(self.next_offset, len(piece)), piece]
                self.next_offset += len(piece)
            self.last_write_ms = now_ms
        elif now_ms - self.last_write_ms > self.heartbeat_ms:
            out.append(encode_header(self.next_offset, 0))
            self.last_write_ms = now_ms
        return out

    def _start(self) -> int:
        if self.request_offset == 0:
            return self.store.replica.commit_log_min_offset()  # a new slave: everything this log holds
        return self.request_offset


class HAServer:
    """The master's HA service (see the module docstring)."""

    def __init__(
        self,
        store: MessageStore,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Clock | None = None,
        batch_size: int = TRANSFER_BATCH_SIZE,
        heartbeat_ms: int = HEARTBEAT_INTERVAL_MS,
        fallbehind_max: int = SLAVE_FALLBEHIND_MAX,
        housekeeping_ms: int = HOUSEKEEPING_INTERVAL_MS,
        admission: SlaveAdmission | None = None,
    ) -> None:
        self.store = store
        #: who may be a slave (None: anyone, as RocketMQ 4.9.8)
        self.admission = admission or SlaveAdmission()
        #: connections refused as slaves, and the last reason
        self.refused = 0
        self.last_refusal: str | None = None
        self._pending: set[asyncio.StreamWriter] = set()
        self.host = host
        self.port = port
        self.clock: Clock = clock or SystemClock()
        self.batch_size = batch_size
        self.heartbeat_ms = heartbeat_ms
        self.fallbehind_max = fallbehind_max
        self.housekeeping_ms = housekeeping_ms
        #: the largest offset any slave acknowledged (RocketMQ's push2SlaveMaxOffset)
        self.push_offset = 0
        self.links: dict[SlaveLink, asyncio.StreamWriter] = {}
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: dict[SlaveLink, asyncio.Event] = {}
        self._waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._unsubscribe: Any = None
        #: set once a slave's first report arrived (tests and tools await it)
        self.slave_reported = asyncio.Event()
        #: the ``push_offset`` last recorded as the store's replication checkpoint, and when
        self.recorded_offset = 0
        self._recorded_ms: int | None = None

    # --------------------------------------------------------------- lifecycle
    async def start(self) -> int:
        """Listen; returns the bound port."""
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._unsubscribe = self.store.wire.on_arrival(lambda *_: self.notify_appended())
        return self.port

    async def stop(self) -> None:
        """Stop listening and close every slave connection (``push_offset`` recorded as the
        store's replication checkpoint); waiters get ``False``."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._server is not None:
            self._server.close()
        for writer in [*self.links.values(), *self._pending]:
            writer.close()  # its reader sees the end, and its connection's task ends
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(task), 5)
        for task in list(self._tasks):  # (a connection that did not end: cut short)
            task.cancel()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self._waiters.clear()
        self.record_checkpoint(self.clock.wall_ms(), force=True)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # ------------------------------------------------------------ for sends
    def connection_count(self) -> int:
        return len(self.links)

    def slave_ok(self, put_where: int) -> bool:
        """RocketMQ's ``isSlaveOK(masterPutWhere)``: a slave connected, not too far behind."""
        return bool(self.links) and put_where - self.push_offset < self.fallbehind_max

    async def wait_for_replica(self, offset: int, timeout_s: float) -> bool:
        """Whether a slave acknowledged ``offset`` within ``timeout_s`` (RocketMQ's
        GroupTransferService: ``push2SlaveMaxOffset >= nextOffset``)."""
        if self.push_offset >= offset:
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (offset, fut)
        self._waiters.append(entry)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            return self.push_offset >= offset
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)

    def notify_appended(self) -> None:
        """Wake the writers: the log grew (callable from any thread). Nothing to do while no
        slave is connected (every put calls it: the check is one dict's length)."""
        if not self._wake:
            return
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake_all()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        for event in self._wake.values():
            event.set()

    def _acked(self, offset: int) -> None:
        if offset <= self.push_offset:
            return
        self.push_offset = offset
        for want, fut in self._waiters:
            if want <= offset and not fut.done():
                fut.set_result(True)

    # ------------------------------------------------------------ housekeeping
    def run_once(self, now_ms: int) -> int:
        """Close connections that sent nothing for ``housekeeping_ms`` (returns how many);
        record ``push_offset`` as the replication checkpoint (:meth:`record_checkpoint`)."""
        stale = [link for link in self.links if now_ms - link.last_read_ms > self.housekeeping_ms]
        for link in stale:
            log.warning("HA: slave %s silent for %d ms: closing", link.address, now_ms - link.last_read_ms)
            self.links[link].close()
        self.record_checkpoint(now_ms)
        return len(stale)

    def record_checkpoint(self, now_ms: int, *, force: bool = False) -> bool:
        """Record ``push_offset`` as the store's replication checkpoint when it moved since the
        last record, at most every :data:`CHECKPOINT_INTERVAL_MS` unless ``force``; returns
        whether it wrote. A failed write (a full disk, a closed store) is logged and tried
        again at the next round."""
        offset = self.push_offset
        if offset <= 0 or offset == self.recorded_offset:
            return False
        if not force and self._recorded_ms is not None and now_ms - self._recorded_ms < CHECKPOINT_INTERVAL_MS:
            return False
        try:
            self.store.replica.set_replication_checkpoint(offset)
        except StoreError as exc:
            log.warning("HA: cannot record the slaves' acknowledged offset %d: %s", offset, exc)
            return False
        self.recorded_offset, self._recorded_ms = offset, now_ms
        return True

    # ------------------------------------------------------------ connections
    async def _admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ip: str) -> bytes:
        """The admission of one connection (:mod:`rmqnet.ha.auth`): returns the bytes already
        read that are the slave's (a 4.x slave's first report), or raises
        :class:`HAAuthError` (refused) or a connection error."""
        adm = self.admission
        if not adm.address_ok(ip):
            raise HAAuthError(f"{ip} is not on haSlaveAllowList")
        first = await reader.readexactly(len(HELLO))
        if first != HELLO:
            if not adm.plain_ok(ip):
                raise HAAuthError("no proof of the cluster's credentials, and not on haSlaveAllowList")
            return first
        nonce, challenge = new_challenge()
        writer.write(challenge)
        await writer.drain()
        head = await reader.readexactly(2)
        proof = head + await reader.readexactly(proof_length(head) - 2)
        try:
            key = adm.check_proof(nonce, proof)
        except HAAuthError as exc:
            writer.write(encode_verdict(str(exc)))
            with contextlib.suppress(ConnectionError, OSError):
                await writer.drain()
            raise
        writer.write(encode_verdict(None))
        await writer.drain()
        log.info("HA: slave %s proved the access key %s", ip, key)
        return b""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        ip = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        self._pending.add(writer)
        try:
            first = await asyncio.wait_for(self._admit(reader, writer, ip), self.housekeeping_ms / 1000)
        except (HAAuthError, asyncio.IncompleteReadError, ConnectionError, OSError, TimeoutError) as exc:
            why = str(exc) if isinstance(exc, HAAuthError) else f"no handshake ({type(exc).__name__})"
            self.refused += 1
            self.last_refusal = f"{address}: {why}"
            log.warning("HA: %s is not a slave of this master: %s", address, why)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        finally:
            self._pending.discard(writer)
        link = SlaveLink(
            self.store,
            self.clock.wall_ms(),
            batch_size=self.batch_size,
            heartbeat_ms=self.heartbeat_ms,
            address=address,
        )
        self.links[link] = writer
        wake = self._wake[link] = asyncio.Event()
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        sender = asyncio.create_task(self._send(link, writer, wake))
        self._tasks.add(sender)
        try:
            while True:
                data = first or await reader.read(64 * 1024)
                first = b""
                if not data:
                    break
                ack = link.on_bytes(data, self.clock.wall_ms())
                if ack is not None:
                    self._acked(ack)
                    self.slave_reported.set()
                    wake.set()  # the first report starts the writer
                if sender.done():
                    break
        except HAProtocolError as exc:
            log.warning("HA: closing slave %s: %s", address, exc)
        except (ConnectionError, OSError):
            pass
        finally:
            sender.cancel()
            with contextlib.suppress(BaseException):
                await sender
            self.links.pop(link, None)
            self._wake.pop(link, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._tasks.discard(task)
            self._tasks.discard(sender)

    async def _send(self, link: SlaveLink, writer: asyncio.StreamWriter, wake: asyncio.Event) -> None:
        try:
            while True:
                wake.clear()
                frames = link.frames(self.clock.wall_ms())
                if frames:
                    writer.writelines(frames)
                    await writer.drain()
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), max(0.01, self.heartbeat_ms / 1000 / 2))
        except HAProtocolError as exc:
            log.warning("HA: closing slave %s: %s", link.address, exc)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
