"""One remoting connection over asyncio: requests served concurrently and answered by opaque,
requests of our own matched to their answers by opaque, bounds and back-pressure.

Both ends of the wire use :class:`Connection` (the server's accepted sockets and
:class:`~rmqnet.transport.client.ClientConnection`): either side may send requests, and
RocketMQ's broker does (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE).

Serving a request (``flag & 1`` clear): ``request_handler(conn, request)`` returns a
:class:`~rmqnet.remoting.RemotingCommand`, ``None`` or an awaitable of either.

- A plain return is encoded at once; the answers produced while handling one
  ``data_received`` call are written with one ``writelines`` (one send for many requests).
- An awaitable is wrapped in a future (a coroutine becomes a task; a future is used as is)
  and answered when done, so a slow request never holds back a fast one behind it: answers
  leave in completion order, each carrying its request's opaque (clients match by opaque;
  ali-ons parks a long poll and sends on one socket).
- A oneway request (``flag & 2``) is never answered, whatever the handler returns or raises.
- An exception from the handler is answered ``SYSTEM_ERROR`` with its text as the remark and
  logged; the connection stays open.
- The answer always carries the request's opaque and the response flag (set here, so a
  handler's ``req.reply(...)`` and a canned command both come out right).

Bad bytes: a frame the decoder refuses (length outside the caps, unknown serialize type) or a
header that does not decode (bad JSON, truncated binary header: no opaque to answer) closes
this connection alone, logged in one line naming the peer and the problem. A request whose
JSON header decodes but holds a string that is not Unicode text (a lone surrogate:
:class:`~rmqnet.remoting.TextError`) is answered SYSTEM_ERROR naming the field, no handler
run, nothing logged, the connection kept (a oneway one is dropped).

Bounds: ``Limits.max_in_flight`` awaitables at once, then reading pauses (frames already read
wait in a backlog of at most one read). Back-pressure on answers (a peer that does not read
them): the bytes this end has queued and the peer has not taken (:attr:`Connection.buffered`:
answers of this turn not handed to the transport yet plus the transport's write buffer) are
checked before each request is served; past ``Limits.write_high`` the answers so far go to the
transport, and while its buffer stays above the mark (``pause_writing`` until it drains below
``write_low``) no further request is served, the rest of the read waits in the backlog, and the
socket is not read. Answers of requests already in flight still come: each one queued while
the connection is over ``write_high`` counts, and one that would take it past
``Limits.write_limit`` closes the connection at once (what is buffered is dropped, logged in
one line); a connection that has bytes to send and sends none for ``Limits.write_timeout_ms``
is closed by the :class:`~rmqnet.transport.idle.IdleSweeper`. So a connection holds at most
``max(write_limit, write_high + one answer)`` bytes of answers, whatever the request codes.
Nothing is queued without bound.

Our own requests (:meth:`Connection.invoke`): opaques come from a per-connection counter; the
waiting future and a timer are kept by opaque; the answer, the timer
(:class:`~rmqnet.transport.errors.RemotingTimeoutError`) or the connection's loss
(:class:`~rmqnet.transport.errors.ConnectionLostError`, to every request waiting) completes it.

Handlers still running when the connection is lost are not cancelled (a send may be past the
point where cancelling would be safe); their answers are dropped. A held pull should watch
``closed`` or register in ``on_close``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from ..remoting import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    Frame,
    FrameDecoder,
    FrameError,
    HeaderError,
    RemotingCommand,
    ResponseCode,
    TextError,
    decode,
    encode,
)
from .completions import flush_later
from .errors import ConnectionLostError, RemotingTimeoutError
from .limits import Limits

log = logging.getLogger(__name__)

#: ``request_handler(conn, request)``: the answer, ``None`` (no answer) or an awaitable of either
RequestHandler = Callable[["Connection", RemotingCommand], "RemotingCommand | None | Awaitable[RemotingCommand | None]"]
#: told of every answer written: ``observer(request code, response code, seconds from the
#: request's read to its answer, whether the answer was awaited)`` (a server's metrics:
#: ``rocketmq_rpc_latency``); it runs on the loop and must only count
AnswerObserver = Callable[[int, int, float, bool], None]
#: opaques of our own requests wrap below Java's int range
_OPAQUE_WRAP = 1 << 31


def _not_supported(conn: Connection, req: RemotingCommand) -> RemotingCommand:
    """The handler of a connection that serves nothing (RocketMQ's answer to an unknown code)."""
    return req.reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {req.code} not supported")


def _peer_name(transport: asyncio.BaseTransport) -> str:
    addr = transport.get_extra_info("peername")
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


class _Waiting:
    """One request of ours waiting for its answer."""

    __slots__ = ("future", "timer", "code")

    def __init__(self, future: asyncio.Future[RemotingCommand], timer: asyncio.TimerHandle | None, code: int) -> None:
        self.future = future
        self.timer = timer
        self.code = code


class Connection(asyncio.Protocol):
    """One connection (see the module docstring). Satisfies :class:`rmqnet.broker.peer.Peer`.

    Attributes: ``remote`` (the peer's ``"ip:port"``), ``attrs`` (state processors keep per
    connection), ``on_close`` (callables ``cb(conn)`` run once when the connection is gone;
    an exception from one is logged), ``request_handler``, ``limits``.
    """

    #: a full write buffer stops reading (the server side: a peer that does not read its
    #: answers gets no new requests served). The dialling side keeps reading, or two peers
    #: with full buffers would each wait for the other; its :meth:`invoke` waits instead.
    PAUSE_READING_ON_WRITE_PRESSURE = True

    def __init__(self, request_handler: RequestHandler | None = None, limits: Limits | None = None) -> None:
        self.request_handler: RequestHandler = request_handler or _not_supported
        self.limits = limits or Limits()
        self.remote = "?"
        self.attrs: dict[str, Any] = {}
        #: told of every answer (:data:`AnswerObserver`; None: nothing measured)
        self.observer: AnswerObserver | None = None
        self.on_close: list[Callable[[Connection], None]] = []
        #: bumped by every read and write: the idle sweeper compares it between its rounds
        self.activity = 0
        self._decoder = FrameDecoder(self.limits.max_frame, self.limits.max_header)
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._lost = False
        self._in_flight: set[asyncio.Future[Any]] = set()
        self._backlog: deque[Frame] = deque()
        self._waiting: dict[int, _Waiting] = {}
        self._next_opaque = 0
        self._wbuf: list[bytes | memoryview] = []
        self._wbuf_bytes = 0  # bytes in _wbuf
        self._written = 0  # bytes handed to the transport, ever
        #: the most :attr:`buffered` has been (after each queued answer or request), for tests
        self.buffered_peak = 0
        self._stall_seen = -1  # the sweeper's bookkeeping of sends (bytes sent seen, since when)
        self._stall_since_ms = 0
        self._flush_scheduled = False
        self._write_paused = False
        self._reading = True
        self._draining = False
        self._idle_seen = -1  # the idle sweeper's bookkeeping (activity seen, since when)
        self._idle_since_ms = 0
        #: completed once the connection is gone (``await conn.wait_closed()``)
        self._lost_event = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()

    # ---- state -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether the connection is closed or closing (nothing more is sent or served)."""
        return self._closed

    @property
    def in_flight(self) -> int:
        """Requests being served by an awaitable handler now."""
        return len(self._in_flight)

    @property
    def buffered(self) -> int:
        """Bytes this end has queued and the peer has not taken yet: the answers (and our own
        requests) not handed to the transport yet plus the transport's write buffer."""
        t = self._transport
        return self._wbuf_bytes + (t.get_write_buffer_size() if t is not None and not self._lost else 0)

    @property
    def sent(self) -> int:
        """Bytes the transport has handed to the socket so far (what was written to it minus
        what its buffer still holds)."""
        t = self._transport
        return self._written - (t.get_write_buffer_size() if t is not None and not self._lost else 0)

    @property
    def reading(self) -> bool:
        """Whether the connection reads from its socket now (not paused by a bound)."""
        return self._reading

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.remote}{' closed' if self._closed else ''}>"

    # ---- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        self.remote = _peer_name(transport)
        transport.set_write_buffer_limits(self.limits.write_high, self.limits.write_low)

    def data_received(self, data: bytes) -> None:
        self.activity += 1
        try:
            frames = self._decoder.feed(data)
        except FrameError as exc:
            self._refuse(f"frame error: {exc}")
            return
        if frames:
            self._serve(frames)
            self._flush()

    def eof_received(self) -> bool | None:
        # The peer closed: what is kept per connection (a broker's clients, its held pulls) is
        # forgotten now, in the order the loop read it. asyncio runs connection_lost one round
        # later, after requests of other connections read in the same round as this EOF: a
        # member gone would still be listed to a request sent after it left.
        self._closed = True  # nothing more is served or answered on it
        self._run_on_close()
        return None  # close our side too: RocketMQ's peers never half-close on purpose

    def pause_writing(self) -> None:
        self._write_paused = True
        self._writable.clear()
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._writable.set()
        if self._backlog:  # requests held back by the full buffer: their turn now
            self._pump()
            self._schedule_flush()
        self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._lost = True
        self._backlog.clear()
        self._wbuf, self._wbuf_bytes = [], 0
        waiting, self._waiting = self._waiting, {}
        reason = str(exc) if exc else "closed"
        for w in waiting.values():
            if w.timer is not None:
                w.timer.cancel()
            if not w.future.done():
                w.future.set_exception(ConnectionLostError(w.code, self.remote, reason))
        self._lost_event.set()
        self._writable.set()  # invokes waiting to write see the loss
        self._run_on_close()

    def _run_on_close(self) -> None:
        """The ``on_close`` callbacks, once (at the peer's EOF, else when the connection is lost)."""
        callbacks, self.on_close = self.on_close, []
        for cb in callbacks:
            try:
                cb(self)
            except Exception:
                log.exception("an on_close callback of %s raised", self.remote)

    # ---- serving requests -------------------------------------------------------------

    def _serve(self, frames: list[Frame]) -> None:
        """Handle ``frames`` in order (after any backlog); what a bound holds back waits."""
        self._backlog.extend(frames)
        self._pump()

    def _pump(self) -> None:
        """Serve the backlog in order while no bound holds it: the in-flight cap, the server
        draining, or (the serving side) answers past the write buffer's high mark, checked
        before each request so one read of many requests cannot queue many answers."""
        cap, high = self.limits.max_in_flight, self.limits.write_high
        pressure = self.PAUSE_READING_ON_WRITE_PRESSURE
        while self._backlog and not self._closed and not self._draining and len(self._in_flight) < cap:
            if pressure and self.buffered > high:
                self._flush()  # to the transport: it pauses us until its buffer drains
                if self._write_paused or self.buffered > high:
                    break
            self._serve_one(self._backlog.popleft())
        self._update_reading()

    def _serve_one(self, frame: Frame) -> None:
        try:
            cmd = decode(frame)
        except TextError as exc:
            if exc.request is None:
                self._refuse(f"header error: {exc}")
            else:
                self._refuse_text(exc.request, exc)
            return
        except HeaderError as exc:
            self._refuse(f"header error: {exc}")
            return
        if cmd.flag & FLAG_RESPONSE:
            self._answered(cmd)
        else:
            self._handle(cmd)

    def _refuse_text(self, req: RemotingCommand, exc: TextError) -> None:
        """A request holding a string that is not text: answered SYSTEM_ERROR naming the field
        (Java's answer to a request whose decoding throws), no handler run, nothing logged (the
        peer's mistake, told to it); a oneway one is dropped."""
        if not req.flag & FLAG_ONEWAY:
            self._queue_answer(req, req.reply(ResponseCode.SYSTEM_ERROR, str(exc)))

    def _handle(self, req: RemotingCommand) -> None:
        observer = self.observer if self._loop is not None else None
        # the loop's clock (monotonic; the transport reads no clock of its own)
        start = self._loop.time() if observer is not None and self._loop is not None else 0.0
        try:
            res = self.request_handler(self, req)
        except Exception as exc:
            log.exception("handler of request code %s from %s raised", req.code, self.remote)
            res = req.reply(ResponseCode.SYSTEM_ERROR, _describe(exc))
        if res is None:
            return
        if isinstance(res, RemotingCommand):
            if not req.flag & FLAG_ONEWAY:
                self._queue_answer(req, res)
                if observer is not None and self._loop is not None:
                    observer(req.code, res.code, self._loop.time() - start, False)
            return
        try:
            fut = asyncio.ensure_future(res)
        except TypeError:
            log.error("handler of request code %s from %s returned %r", req.code, self.remote, res)
            if not req.flag & FLAG_ONEWAY:
                self._queue_answer(
                    req,
                    req.reply(
                        ResponseCode.SYSTEM_ERROR,
                        f"the processor returned {type(res).__name__} {str(res)[:80]!r}, not a command",
                    ),
                )
            return
        self._in_flight.add(fut)
        fut.add_done_callback(lambda f: self._finished(req, f, start=start))
        if fut is res:  # a processor's own future: complete() may finish it at once (see there)
            fut.rmq_finish = lambda: self._finished(req, fut, eager=True, start=start)  # type: ignore[attr-defined]
        if len(self._in_flight) >= self.limits.max_in_flight:
            self._update_reading()

    def _finished(
        self, req: RemotingCommand, fut: asyncio.Future[Any], eager: bool = False, start: float = 0.0
    ) -> None:
        if fut not in self._in_flight:  # finished at once by complete(): its done callback has nothing left
            return
        self._in_flight.discard(fut)
        if fut.cancelled():
            res: Any = req.reply(ResponseCode.SYSTEM_ERROR, "the request's processing was cancelled")
        elif (exc := fut.exception()) is not None:
            log.error("handler of request code %s from %s raised", req.code, self.remote, exc_info=exc)
            res = req.reply(ResponseCode.SYSTEM_ERROR, _describe(exc))
        else:
            res = fut.result()
        if res is not None and not req.flag & FLAG_ONEWAY and not self._closed:
            self._queue_answer(req, res)
            if self.observer is not None and start and self._loop is not None:
                self.observer(req.code, getattr(res, "code", -1), self._loop.time() - start, True)
            self._after_answer(eager)
        if self._backlog:
            self._pump()
            self._after_answer(eager)
        self._update_reading()

    def _after_answer(self, eager: bool) -> None:
        if eager:  # written by flush_completed() in this turn of the loop
            flush_later(self._flush, self._loop)
        else:
            self._schedule_flush()

    def _queue_answer(self, req: RemotingCommand, res: Any) -> None:
        try:
            res.opaque = req.opaque
            res.flag |= FLAG_RESPONSE
            pieces = encode(res)
        except Exception as exc:  # a handler returned something that is not a command
            log.error("answer to request code %s from %s does not encode: %r", req.code, self.remote, exc)
            pieces = encode(req.reply(ResponseCode.SYSTEM_ERROR, f"the answer does not encode: {_describe(exc)}"))
        self._enqueue(pieces, req.code)

    def _enqueue(self, pieces: list[bytes | memoryview], code: int) -> bool:
        """Queue a frame's pieces for the next flush, unless the connection is over its high
        mark and this would take it past ``Limits.write_limit``: then the connection is closed
        (the peer does not read) and False returned."""
        size = sum(len(p) for p in pieces)
        before = self.buffered
        if before > self.limits.write_high and before + size > self.limits.write_limit:
            self._overflow(before, size, code)
            return False
        self._wbuf.extend(pieces)
        self._wbuf_bytes += size
        if before + size > self.buffered_peak:
            self.buffered_peak = before + size
        return True

    def _overflow(self, before: int, size: int, code: int) -> None:
        log.warning(
            "closing the connection from %s: %d bytes unsent (the peer does not read its answers), "
            "another %d (code %s) would pass the write limit of %d",
            self.remote,
            before,
            size,
            code,
            self.limits.write_limit,
        )
        self._wbuf, self._wbuf_bytes = [], 0
        self._backlog.clear()
        self.abort()

    # ---- reading bounds ---------------------------------------------------------------

    def _update_reading(self) -> None:
        """Read from the socket only when nothing bounds it: the in-flight cap, a backlog, a
        full write buffer, or the server draining (a backlog is at most one read: requests
        are not read faster than they are served)."""
        t = self._transport
        if t is None or self._closed:
            return
        want = not (
            (self._write_paused and self.PAUSE_READING_ON_WRITE_PRESSURE)
            or self._draining
            or self._backlog
            or len(self._in_flight) >= self.limits.max_in_flight
        )
        if want != self._reading:
            self._reading = want
            if want:
                t.resume_reading()
            else:
                t.pause_reading()

    def drain(self) -> None:
        """Serve no new request: stop reading; requests read but not started are answered
        ``SERVICE_NOT_AVAILABLE`` (oneway ones dropped). Requests in flight finish."""
        self._draining = True
        self._update_reading()
        backlog, self._backlog = self._backlog, deque()
        for frame in backlog:
            try:
                cmd = decode(frame)
            except TextError as exc:
                if exc.request is None:
                    break
                self._refuse_text(exc.request, exc)
                continue
            except HeaderError:
                break
            if cmd.flag & FLAG_RESPONSE:
                self._answered(cmd)
            elif not cmd.flag & FLAG_ONEWAY:
                self._queue_answer(cmd, cmd.reply(ResponseCode.SERVICE_NOT_AVAILABLE, "the server is stopping"))
        self._flush()

    async def wait_idle(self) -> None:
        """Return once no request is in flight."""
        while self._in_flight:
            await asyncio.wait(list(self._in_flight))

    # ---- writing ----------------------------------------------------------------------

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._wbuf:
            buf, size, self._wbuf, self._wbuf_bytes = self._wbuf, self._wbuf_bytes, [], 0
            if self._transport is not None and not self._lost:
                self.activity += 1
                self._written += size
                self._transport.writelines(buf)

    def _schedule_flush(self) -> None:
        # answers completed in one turn of the loop leave in one write
        if not self._flush_scheduled and self._wbuf and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """Send ``cmd`` as a oneway request (no answer expected); dropped when closed. Like
        every method here, call it on the connection's loop (from another thread:
        ``loop.call_soon_threadsafe(conn.send_oneway, cmd)``)."""
        if self._closed:
            return
        cmd.flag = (cmd.flag | FLAG_ONEWAY) & ~FLAG_RESPONSE
        cmd.opaque = self._opaque()
        if self._enqueue(encode(cmd), cmd.code):
            self._schedule_flush()

    def _opaque(self) -> int:
        self._next_opaque = (self._next_opaque + 1) % _OPAQUE_WRAP
        return self._next_opaque

    async def invoke(self, cmd: RemotingCommand, timeout_s: float | None = 3.0) -> RemotingCommand:
        """Send ``cmd`` as a request and return its answer (any code: the caller reads it).

        The opaque is assigned here. Raises :class:`RemotingTimeoutError` after ``timeout_s``
        and :class:`ConnectionLostError` if the connection is or becomes closed first."""
        if self._write_paused:  # back-pressure on our own requests: wait for the buffer to drain
            await self._writable.wait()
        if self._closed or self._loop is None:
            raise ConnectionLostError(cmd.code, self.remote, "the connection is closed")
        loop = self._loop
        opaque = self._opaque()
        cmd.opaque = opaque
        cmd.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        timer = loop.call_later(timeout_s, self._expire, opaque, timeout_s) if timeout_s is not None else None
        self._waiting[opaque] = _Waiting(fut, timer, cmd.code)
        if self._enqueue(encode(cmd), cmd.code):
            self._schedule_flush()
        try:
            return await fut
        finally:
            w = self._waiting.pop(opaque, None)
            if w is not None and w.timer is not None:
                w.timer.cancel()

    def _expire(self, opaque: int, timeout_s: float) -> None:
        w = self._waiting.pop(opaque, None)
        if w is not None and not w.future.done():
            w.future.set_exception(RemotingTimeoutError(w.code, opaque, self.remote, timeout_s))

    def _answered(self, res: RemotingCommand) -> None:
        w = self._waiting.pop(res.opaque, None)
        if w is None:
            log.debug("an answer from %s with opaque %s nobody waits for (timed out?)", self.remote, res.opaque)
            return
        if w.timer is not None:
            w.timer.cancel()
        if not w.future.done():
            w.future.set_result(res)

    # ---- closing ----------------------------------------------------------------------

    def close(self) -> None:
        """Close after writing what is buffered; waiting requests fail with
        :class:`ConnectionLostError` once the socket is closed."""
        if self._closed:
            return
        self._closed = True
        self._flush()
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Close at once, dropping what is buffered."""
        self._closed = True
        if self._transport is not None:
            self._transport.abort()

    async def wait_closed(self) -> None:
        """Return once the connection is gone (``connection_lost`` ran)."""
        await self._lost_event.wait()

    def _refuse(self, problem: str) -> None:
        log.warning("closing the connection from %s: %s", self.remote, problem)
        self._wbuf, self._wbuf_bytes = [], 0
        self.abort()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
