"""NATS JetStream as a peer of the broker benchmark (``jobs/bench_broker.py``): the NATS client
protocol spoken directly over a socket, no client library.

- :func:`pub` / :func:`sub` / :data:`CONNECT` encode the client's protocol lines; the benchmark
  encodes every request before its clock starts, as it does for the broker's frames.
- :class:`NatsReader` takes bytes in and hands back whole server messages (sans-I/O): ``MSG``
  and ``HMSG`` (subject, sid, reply subject, headers, payload), ``PING``, ``PONG``, ``+OK``,
  ``-ERR``, ``INFO``.
- :class:`NatsWire` is the blocking client of the one-at-a-time figures: it subscribes to an
  inbox of its own (``_INBOX.<name>.*``, sid 1), answers the server's ``PING``\\ s, and makes
  JetStream API requests (``$JS.API...`` with a reply inbox, the JSON answer returned).
- :class:`NatsCounter` counts a pipelined load's answers for ``broker_load.Pipeline``: acked
  publishes (``PUB subject inbox``: the ``{"stream", "seq"}`` ack on the inbox, ``{"error"}``
  booked as an error) or a pull consumer's fetches (``$JS.API.CONSUMER.MSG.NEXT``: every
  ``batch`` delivered messages one answer).
- :func:`nats_argv`: ``nats-server -js`` on 127.0.0.1, a port and a store folder of the
  benchmark's (file storage; JetStream writes each message to its block file before the ack
  and syncs the files on its own interval, so its acked publish is comparable with our
  ASYNC_FLUSH, not with SYNC_FLUSH).

The benchmark's stream is ``BENCH`` over subjects ``bench.>``; a topic's queue ``q`` is the
subject ``bench.<topic>.<q>``.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any

STREAM = "BENCH"
#: the reply code a counter books for a JetStream error (the broker's codes are >= 0)
ERROR_CODE = -1
CONNECT = (
    b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,'
    b'"lang":"python","version":"bench"}\r\n'
)


def subject(topic: str, queue_id: int) -> str:
    """The subject of a topic's queue in the ``BENCH`` stream."""
    return f"bench.{topic}.{queue_id}"


def pub(subj: str, payload: bytes, reply: str | None = None) -> bytes:
    """``PUB subject [reply] n`` and the payload."""
    head = f"PUB {subj} {reply} {len(payload)}\r\n" if reply else f"PUB {subj} {len(payload)}\r\n"
    return head.encode() + payload + b"\r\n"


def sub(subj: str, sid: int) -> bytes:
    return f"SUB {subj} {sid}\r\n".encode()


@dataclass(frozen=True)
class Msg:
    """A ``MSG`` or ``HMSG`` from the server (``headers`` None for a plain ``MSG``)."""

    subject: str
    sid: int
    reply: str | None
    headers: bytes | None
    payload: bytes


class NatsReader:
    """Whole server messages out of a byte stream: ``feed`` returns those completed so far
    (``Msg`` objects, or the verbs ``PING``, ``PONG``, ``+OK`` as strings, ``-ERR ...``, ``INFO``)."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list[Msg | str]:
        self.buf += data
        out: list[Msg | str] = []
        buf, pos = self.buf, 0
        while True:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            line = buf[pos:end]
            if line.startswith((b"MSG ", b"HMSG ")):
                parts = line.split()
                hmsg = parts[0] == b"HMSG"
                total = int(parts[-1])
                hlen = int(parts[-2]) if hmsg else 0
                reply_at = 3 if len(parts) == (6 if hmsg else 5) else None
                start = end + 2
                if len(buf) < start + total + 2:
                    break
                body = buf[start : start + total]
                out.append(
                    Msg(
                        parts[1].decode(),
                        int(parts[2]),
                        parts[reply_at].decode() if reply_at else None,
                        body[:hlen] if hmsg else None,
                        body[hlen:],
                    )
                )
                pos = start + total + 2
                continue
            verb = line.split(b" ", 1)[0].decode(errors="replace")
            out.append(line.decode(errors="replace") if verb == "-ERR" else verb)
            pos = end + 2
        self.buf = buf[pos:]
        return out


def js_error(payload: bytes) -> str | None:
    """The ``error`` of a JetStream API answer or publish ack, or None."""
    obj = json.loads(payload)
    err = obj.get("error") if isinstance(obj, dict) else None
    return None if err is None else str(err)


class NatsWire:
    """A blocking connection (TCP_NODELAY) subscribed to the inbox ``_INBOX.<name>.*`` (sid 1)."""

    def __init__(self, port: int, name: str = "bench", host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = NatsReader()
        self.pending: list[Msg | str] = []
        self.inbox = f"_INBOX.{name}"
        self.n = 0
        self.sock.sendall(CONNECT + sub(f"{self.inbox}.*", 1) + b"PING\r\n")
        while self.next() != "PONG":  # INFO first, then the PONG: connected and subscribed
            pass

    def next(self) -> Msg | str:
        """The next server message (a ``PING`` is answered here and not returned)."""
        while True:
            while not self.pending:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("nats-server closed the connection")
                self.pending.extend(self.reader.feed(data))
            m = self.pending.pop(0)
            if m == "PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            if isinstance(m, str) and m.startswith("-ERR"):
                raise RuntimeError(f"nats-server: {m}")
            return m

    def next_msg(self) -> Msg:
        while True:
            m = self.next()
            if isinstance(m, Msg):
                return m

    def send(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def call(self, frame: bytes) -> Msg:
        """Write ``frame`` (an acked publish, say), read the next message; ``RuntimeError``
        if it is a JetStream error."""
        self.sock.sendall(frame)
        m = self.next_msg()
        err = js_error(m.payload) if m.headers is None else None
        if err is not None:
            raise RuntimeError(f"JetStream answered {err}")
        return m

    def take(self, data: bytes) -> list[Msg]:
        """The messages completed by ``data`` (bytes this caller read from :attr:`sock`); a
        ``PING`` among them is answered."""
        out = []
        for m in self.reader.feed(data):
            if m == "PING":
                self.sock.sendall(b"PONG\r\n")
            elif isinstance(m, Msg):
                out.append(m)
        return out

    def reply_to(self) -> str:
        """A reply subject of this connection's inbox not used before."""
        self.n += 1
        return f"{self.inbox}.{self.n}"

    def pub_frame(self, subj: str, payload: bytes) -> bytes:
        """An acked publish of ``payload`` to ``subj``, its ack due on this connection's inbox."""
        return pub(subj, payload, self.reply_to())

    def request(self, subj: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """A JetStream API request; its JSON answer (``RuntimeError`` if it names an error)."""
        reply = self.reply_to()
        self.sock.sendall(pub(subj, json.dumps(body).encode() if body is not None else b"", reply))
        while True:
            m = self.next_msg()
            if m.subject == reply:
                obj: dict[str, Any] = json.loads(m.payload)
                if "error" in obj:
                    raise RuntimeError(f"{subj}: {obj['error']}")
                return obj

    def close(self) -> None:
        self.sock.close()


def create_stream(wire: NatsWire, stream: str = STREAM) -> None:
    """The stream over ``bench.>``, file storage, one replica."""
    wire.request(
        f"$JS.API.STREAM.CREATE.{stream}",
        {"name": stream, "subjects": ["bench.>"], "storage": "file", "retention": "limits", "num_replicas": 1},
    )


def stream_messages(wire: NatsWire, stream: str = STREAM) -> int:
    """The messages the stream holds (``$JS.API.STREAM.INFO``)."""
    return int(wire.request(f"$JS.API.STREAM.INFO.{stream}")["state"]["messages"])


def pull_consumer(wire: NatsWire, durable: str, subj: str, stream: str = STREAM) -> None:
    """A durable pull consumer of ``subj`` from its first message, no acks."""
    wire.request(
        f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{durable}",
        {
            "stream_name": stream,
            "config": {"durable_name": durable, "ack_policy": "none", "filter_subject": subj, "deliver_policy": "all"},
        },
    )


def push_consumer(wire: NatsWire, subj: str, deliver: str, stream: str = STREAM) -> None:
    """An ephemeral push consumer of the messages of ``subj`` published from now on, delivered
    to ``deliver``, no acks."""
    wire.request(
        f"$JS.API.CONSUMER.CREATE.{stream}",
        {
            "stream_name": stream,
            "config": {
                "ack_policy": "none",
                "filter_subject": subj,
                "deliver_policy": "new",
                "deliver_subject": deliver,
            },
        },
    )


def fetch(stream: str, durable: str, batch: int, reply: str) -> bytes:
    """A pull consumer's request for its next ``batch`` messages, delivered to ``reply``."""
    return pub(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}", b'{"batch":%d}' % batch, reply)


class NatsCounter:
    """Counts a pipelined load's answers (``broker_load.Pipeline``). ``batch`` None: acked
    publishes, one answer per ack (code 0, or ``ERROR_CODE`` for ``{"error"}``); ``batch`` n:
    fetches, one answer per ``n`` messages delivered. The server's ``PING``\\ s are answered."""

    def __init__(self, outcome: Any, *, batch: int | None) -> None:
        self.outcome, self.batch = outcome, batch
        self.reader = NatsReader()
        self.delivered = 0

    def feed(self, data: bytes) -> tuple[int, bytes]:
        answered, back = 0, b""
        codes = self.outcome.codes
        for m in self.reader.feed(data):
            if m == "PING":
                back += b"PONG\r\n"
            elif isinstance(m, str) and m.startswith("-ERR"):
                codes[ERROR_CODE] = codes.get(ERROR_CODE, 0) + 1
            elif isinstance(m, Msg) and self.batch is None:
                code = ERROR_CODE if m.headers is not None or js_error(m.payload) else 0
                codes[code] = codes.get(code, 0) + 1
                self.outcome.messages += code == 0
                answered += 1
            elif isinstance(m, Msg):
                if m.headers is not None:  # a status (404 no messages, 408 expired): the fetch ended short
                    codes[ERROR_CODE] = codes.get(ERROR_CODE, 0) + 1
                    answered += 1
                    continue
                self.outcome.messages += 1
                self.delivered += 1
                if self.delivered == self.batch:
                    codes[0] = codes.get(0, 0) + 1
                    self.delivered = 0
                    answered += 1
        return answered, back


def nats_argv(binary: str, port: int, folder: str) -> list[str]:
    """``nats-server`` with JetStream (file storage in ``folder``) on 127.0.0.1:``port``."""
    return [binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", folder]


def nats_ready(port: int) -> bool:
    """Whether the server on ``port`` answers a ``PING`` and JetStream its account info."""
    try:
        w = NatsWire(port, "ready")
    except OSError:
        return False
    try:
        w.request("$JS.API.INFO")
        return True
    except (OSError, RuntimeError):
        return False
    finally:
        w.close()
