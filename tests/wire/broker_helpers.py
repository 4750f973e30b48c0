"""Stand-ins shared by the broker's tests: a peer, a store whose ``put_wire`` and ``flush`` are
recorded (over a real store for topics), RocketMQ's batch body encoder, request builders,
:func:`read_until` for a broker or name server process's log, and a live cluster in process
(:func:`live_cluster`: a name server and broker processes on an event loop of a thread)."""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

import refcodec as rc
import rmqlog
from rmqnet.broker import launch
from rmqnet.broker.broker import Broker
from rmqnet.broker.config import BrokerConfig
from rmqnet.namesrv.process import NameServerProcess
from rmqnet.remoting import RemotingCommand, RequestCode, SendMessageHeader

from .brokerpull_support import HANG_GUARD_S


class FakePeer:
    def __init__(self, remote: str = "127.0.0.1:50001") -> None:
        self.remote = remote
        self.attrs: dict[str, Any] = {}
        self.sent: list[RemotingCommand] = []
        self.closed = False

    def send_oneway(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)


class RecordingStore:
    """A real store for everything but ``put_wire``/``flush``: puts are recorded and answered
    with offsets of their own (or raise ``fail``); ``flush`` waits for ``flush_gate`` when set."""

    def __init__(self, store: rmqlog.MessageStore, host: str = "127.0.0.1:10911") -> None:
        self._store = store
        self.host = host
        self.puts: list[pa.Table] = []
        self.fail: BaseException | Callable[[pa.Table], BaseException | None] | None = None
        self.flushes = 0
        self.flush_gate: threading.Event | None = None
        self._offset = 0
        self._queues: dict[tuple[str, int], int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @property
    def wire(self) -> Any:
        """The broker's face: this double's puts and flushes, the real store's other calls."""
        return _RecordingWire(self)

    def put_messages(
        self,
        messages: list[rmqlog.WireMessage],
        *,
        cluster: str | None = None,
        system: bool = False,
        writer: str | None = None,
        sequence: int | None = None,
        wait_flush: bool = True,
        dispatch: bool = False,
        defer_dispatch: bool = False,
    ) -> rmqlog.PutRows:
        """:meth:`put_wire` of the messages as the store would store their properties (WAIT
        dropped, CLUSTER set), as :class:`rmqlog.PutRows`."""
        from rmqlog.access.wire import wire_messages_table

        result = self.put_wire(wire_messages_table(messages), cluster=cluster)
        return rmqlog.PutRows(
            result.column("commitLogOffset").to_pylist(),
            result.column("queueOffset").to_pylist(),
            result.column("msgId").to_pylist(),
            0,
            0,
            self._offset,
        )

    def put_wire(self, table: pa.Table, *, cluster: str | None = None, **_: Any) -> pa.Table:
        if cluster is not None and "properties" in table.column_names:
            props = [_stored_properties(p, cluster) for p in table.column("properties").to_pylist()]
            table = table.set_column(
                table.schema.get_field_index("properties"), "properties", pa.array(props, pa.string())
            )
        fail = self.fail(table) if callable(self.fail) else self.fail
        if fail is not None:
            raise fail
        self.puts.append(table)
        offsets, qoffs, ids = [], [], []
        for row in table.to_pylist():  # (a test double: one row at a time is fine here)
            key = (row["topic"], row["queueId"])
            q = self._queues.get(key, 0)
            self._queues[key] = q + 1
            offsets.append(self._offset)
            qoffs.append(q)
            ids.append(rc.offset_msg_id(self.host, self._offset))
            self._offset += 100 + len(row["body"])
        n = table.num_rows
        return pa.table(
            {
                "commitLogOffset": pa.array(offsets, pa.int64()),
                "queueOffset": pa.array(qoffs, pa.int64()),
                "msgId": pa.array(ids, pa.string()),
                "storeTimestamp": pa.array([0] * n, pa.int64()),
            }
        )

    def dispatch_put(self, rows: rmqlog.PutRows) -> bool:
        return True

    def flush_to(self, offset: int) -> int:
        return self.flush()

    def flush(self) -> int:
        if self.flush_gate is not None:
            self.flush_gate.wait()
        self.flushes += 1
        return self._offset


class _RecordingWire:
    RECORDED = ("put_messages", "put_wire", "dispatch_put", "flush_to")

    def __init__(self, recording: RecordingStore) -> None:
        self._recording = recording

    def __getattr__(self, name: str) -> Any:
        if name in self.RECORDED:
            return getattr(self._recording, name)
        return getattr(self._recording._store.wire, name)


def _stored_properties(text: str | None, cluster: str) -> str:
    """The properties as the store keeps a wire put's: WAIT dropped, CLUSTER set (a test double's view)."""
    items = [i.split("\x01") for i in (text or "").split("\x02") if i]
    kept = {k: v for k, v in (i for i in items if len(i) == 2) if k not in ("WAIT", "CLUSTER")}
    kept["CLUSTER"] = cluster
    return "".join(f"{k}\x01{v}\x02" for k, v in kept.items())


def encode_batch(messages: list[tuple[bytes, int, dict[str, str]]]) -> bytes:
    """``MessageDecoder.encodeMessages``: per message int32 totalSize, int32 magic 0, int32
    bodyCRC 0, int32 flag, int32 bodyLen, body, int16 propsLen, props."""
    out = b""
    for body, flag, props in messages:
        p = "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()
        total = 4 * 5 + len(body) + 2 + len(p)
        out += struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body + struct.pack(">h", len(p)) + p
    return out


def send_header(
    topic: str,
    *,
    queue_id: int = 0,
    props: str = "",
    sys_flag: int = 0,
    flag: int = 0,
    default_topic: str = "TBW102",
    batch: bool = False,
    reconsume: int = 0,
    max_reconsume: int | None = None,
    unit_mode: bool = False,
) -> SendMessageHeader:
    return SendMessageHeader(
        producer_group="PG",
        topic=topic,
        default_topic=default_topic,
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=1_700_000_000_123,
        flag=flag,
        properties=props,
        reconsume_times=reconsume,
        unit_mode=unit_mode,
        batch=batch,
        max_reconsume_times=max_reconsume,
        broker_name=None,
    )


def send_request(
    header: SendMessageHeader, body: bytes, *, code: int = RequestCode.SEND_MESSAGE_V2, opaque: int = 1
) -> RemotingCommand:
    v2 = code != RequestCode.SEND_MESSAGE
    return RemotingCommand(code, opaque, 0, None, header.to_ext(v2), body, "JAVA")


def run(broker: Broker, peer: FakePeer, *requests: RemotingCommand) -> list[RemotingCommand | None]:
    """Process ``requests`` as if they arrived in one read (one loop iteration), await all."""

    async def main() -> list[RemotingCommand | None]:
        results = [broker.table.process(broker, peer, r) for r in requests]
        return [await r if asyncio.isfuture(r) or asyncio.iscoroutine(r) else r for r in results]  # type: ignore[misc]

    return asyncio.run(main())


def make_broker(
    store: Any, clock: rmqlog.Clock | None = None, store_config: rmqlog.StoreConfig | None = None, **changes: Any
) -> Broker:
    store_cfg = store_config or store.config
    config = BrokerConfig(broker_name="broker-a", store=store_cfg).replace(**changes)
    return Broker(store, config, clock=clock or rmqlog.ManualClock(1_700_000_000_000))


def read_until(stream: Any, text: str) -> str:
    """Lines of ``stream`` (a process's log) up to the first holding ``text`` (that line); an
    AssertionError with what came if the stream ends first."""
    lines = []
    for line in iter(stream.readline, ""):
        lines.append(line)
        if text in line:
            return line
    raise AssertionError(f"{text!r} never came: {''.join(lines)[-3000:]}")


@dataclass
class LiveCluster:
    """A name server and broker processes on one event loop of a thread (:func:`live_cluster`)."""

    namesrv: str
    #: the broker processes and their addresses, by broker name (in the order given)
    procs: dict[str, launch.BrokerProcess]
    addresses: dict[str, str]
    loop: asyncio.AbstractEventLoop
    #: the name server itself (its routes), on the same loop
    ns: NameServerProcess

    def on_loop(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` run on the servers' loop (where the brokers' state lives)."""

        async def call() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(HANG_GUARD_S)


@contextmanager
def live_cluster(brokers: dict[str, tuple[Path, BrokerConfig]], thread_name: str = "cluster") -> Iterator[LiveCluster]:
    """A name server on 127.0.0.1 and a :class:`~rmqnet.broker.launch.BrokerProcess` per entry of
    ``brokers`` (broker name: its root and its config, pointed at the name server here), started
    in order on an event loop of a thread; returns once every broker registered. At the end the
    brokers stop (one a test stopped itself is not asked again), then the name server."""
    ready: dict[str, LiveCluster] = {}
    started, stop = threading.Event(), threading.Event()

    def serve() -> None:
        async def main() -> None:
            ns = NameServerProcess("127.0.0.1", 0)
            await ns.start()
            seen: set[str] = set()
            all_in = asyncio.Event()
            register = ns.server.routes.register

            def watched(**kw: Any) -> Any:
                res = register(**kw)
                seen.add(kw.get("broker_name", ""))
                if seen >= brokers.keys():
                    all_in.set()
                return res

            ns.server.routes.register = watched  # type: ignore[method-assign]
            procs: dict[str, launch.BrokerProcess] = {}
            addresses: dict[str, str] = {}
            try:
                for name, (root, config) in brokers.items():
                    procs[name] = launch.BrokerProcess(root, config.replace(namesrv_addr=ns.address))
                    addresses[name] = await procs[name].start()
                await all_in.wait()
                ready["cluster"] = LiveCluster(ns.address, procs, addresses, asyncio.get_running_loop(), ns)
                started.set()
                await asyncio.get_running_loop().run_in_executor(None, stop.wait)
            finally:
                for proc in procs.values():
                    if not proc._stop.is_set():
                        proc.request_stop()
                    await proc.wait_stopped(grace_s=1.0)
                await ns.stop()

        try:
            asyncio.run(main())
        finally:
            started.set()

    thread = threading.Thread(target=serve, name=thread_name)
    thread.start()
    assert started.wait(HANG_GUARD_S) and "cluster" in ready, "the servers did not start"
    try:
        yield ready["cluster"]
    finally:
        stop.set()
        thread.join(HANG_GUARD_S)
