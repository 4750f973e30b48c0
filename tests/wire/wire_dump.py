"""A logging proxy in front of a name server and a broker: every remoting frame the clients and
the servers exchange, one JSON line each (``RMQ_WIRE_DUMP=1`` makes tests/wire/real_clients.py
put it between the real clients and ``rmqlog namesrv``/``rmqlog broker``).

    python wire_dump.py NAMESRV_LISTEN NAMESRV BROKER_LISTEN BROKER

Clients dial ``NAMESRV_LISTEN``; the proxy forwards to ``NAMESRV`` and rewrites the broker
address ``BROKER`` in route answers (105) to ``BROKER_LISTEN``, so the clients' broker traffic
comes through it too. It prints ``ready`` once both ports listen, then per frame::

    {"t": epoch ms, "link": "namesrv"|"broker", "conn": n, "dir": "request"|"response",
     "code", "opaque", "flag", "remark", "ext": {extFields}, "language", "bodyLength",
     "body": the first 300 bytes as text (for codes whose body is JSON), "rewritten": bool}

A stream that is not remoting frames is logged once (``"dir": "undecodable"``) and passed
through raw. Frames are forwarded whole, in order, unchanged but for the route rewrite.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rmqnet.remoting import FrameDecoder, RemotingError, decode, encode_frame

#: codes whose bodies are JSON worth showing (routes, heartbeats, consumer lists, registrations)
JSON_BODIES = {34, 38, 103, 105, 106, 206}
ROUTE = 105
_conns = itertools.count(1)


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def split(addr: str) -> tuple[str, int]:
    host, port = addr.rsplit(":", 1)
    return host, int(port)


async def pump(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    link: str,
    conn: int,
    requests: bool,
    routes: set[int],
    rewrite: tuple[bytes, bytes] | None,
) -> None:
    """Copy frames from ``reader`` to ``writer``, logging each; requests record the opaques of
    route lookups so that their answers can be rewritten."""
    decoder: FrameDecoder | None = FrameDecoder()
    held = bytearray()  # bytes fed to the decoder and not yet forwarded as frames
    try:
        while data := await reader.read(65536):
            if decoder is None:
                writer.write(data)
                await writer.drain()
                continue
            held += data
            try:
                frames = decoder.feed(data)
            except RemotingError as exc:
                emit({"t": time.time() * 1000, "link": link, "conn": conn, "dir": "undecodable", "error": str(exc)})
                decoder = None
                writer.write(bytes(held))  # the peer gets the stream as it came, from the first byte not forwarded
                held.clear()
                await writer.drain()
                continue
            for frame in frames:
                del held[: 8 + len(frame.header) + len(frame.body)]
                out = encode_frame(frame.header, frame.body, frame.serialize_type)
                entry: dict[str, Any] = {
                    "t": time.time() * 1000,
                    "link": link,
                    "conn": conn,
                    "dir": "request" if requests else "response",
                }
                try:
                    cmd = decode(frame)
                except RemotingError as exc:
                    entry["error"] = str(exc)
                else:
                    entry.update(
                        code=cmd.code,
                        opaque=cmd.opaque,
                        flag=cmd.flag,
                        remark=cmd.remark,
                        ext=cmd.ext_fields,
                        language=cmd.language,
                        bodyLength=len(frame.body),
                    )
                    if requests:
                        if cmd.code == ROUTE:
                            routes.add(cmd.opaque)
                        if cmd.code in JSON_BODIES:
                            entry["body"] = bytes(frame.body[:300]).decode(errors="replace")
                    elif cmd.opaque in routes:
                        routes.discard(cmd.opaque)
                        body = bytes(frame.body)
                        if rewrite is not None and rewrite[0] in body:
                            body = body.replace(*rewrite)
                            out = encode_frame(frame.header, body, frame.serialize_type)
                            entry["rewritten"] = True
                        entry["body"] = body[:300].decode(errors="replace")
                emit(entry)
                writer.write(out)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def proxy(listen: str, upstream: str, link: str, rewrite: tuple[bytes, bytes] | None) -> asyncio.Server:
    async def accept(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        conn = next(_conns)
        try:
            s_reader, s_writer = await asyncio.open_connection(*split(upstream))
        except OSError as exc:
            emit({"t": time.time() * 1000, "link": link, "conn": conn, "dir": "connect", "error": str(exc)})
            c_writer.close()
            return
        routes: set[int] = set()
        await asyncio.gather(
            pump(c_reader, s_writer, link=link, conn=conn, requests=True, routes=routes, rewrite=None),
            pump(s_reader, c_writer, link=link, conn=conn, requests=False, routes=routes, rewrite=rewrite),
        )

    return await asyncio.start_server(accept, *split(listen))


async def main(namesrv_listen: str, namesrv: str, broker_listen: str, broker: str) -> None:
    rewrite = (broker.encode(), broker_listen.encode())
    servers = [
        await proxy(namesrv_listen, namesrv, "namesrv", rewrite),
        await proxy(broker_listen, broker, "broker", None),
    ]
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit("usage: wire_dump.py NAMESRV_LISTEN NAMESRV BROKER_LISTEN BROKER")
    asyncio.run(main(*sys.argv[1:]))
