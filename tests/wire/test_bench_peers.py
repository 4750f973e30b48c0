"""The broker benchmark's peer protocols (``jobs/peers_redis.py``, ``jobs/peers_nats.py``) and
its servers' bookkeeping (``jobs/broker_servers.py``), without servers: the readers are sans-I/O,
so they are fed bytes in every split a socket could deliver, and the counters that pace the
pipelined loads are checked on the answers they count."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

JOBS = Path(__file__).resolve().parents[2] / "jobs"
sys.path.insert(0, str(JOBS))

import broker_servers  # noqa: E402
import peers_nats as pn  # noqa: E402
import peers_redis as pr  # noqa: E402

from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode, encode_bytes  # noqa: E402

XREAD_REPLY = (
    b"*1\r\n*2\r\n$11\r\nBenchPull:0\r\n*2\r\n*2\r\n$3\r\n0-1\r\n*2\r\n$4\r\nbody\r\n$3\r\nabc\r\n"
    b"*2\r\n$3\r\n0-2\r\n*2\r\n$4\r\nbody\r\n$0\r\n\r\n"
)


def _splits(data: bytes) -> list[list[bytes]]:
    """``data`` whole, byte by byte, and cut at every position in two."""
    return [[data], [data[i : i + 1] for i in range(len(data))], *([data[:i], data[i:]] for i in range(1, len(data)))]


def test_resp_commands_are_arrays_of_bulk_strings() -> None:
    assert pr.command("PING") == b"*1\r\n$4\r\nPING\r\n"
    assert pr.xadd("s:0", b"\r\nx") == b"*5\r\n$4\r\nXADD\r\n$3\r\ns:0\r\n$1\r\n*\r\n$4\r\nbody\r\n$3\r\n\r\nx\r\n"
    assert pr.xread("s:0", "0-32", 32, block_ms=100) == pr.command(
        "XREAD", "BLOCK", 100, "COUNT", 32, "STREAMS", "s:0", "0-32"
    )


def test_resp_reader_hands_back_whole_replies_however_the_bytes_arrive() -> None:
    stream = b"+PONG\r\n$6\r\n1-0\r\nx\r\n-ERR no\r\n:42\r\n$-1\r\n*-1\r\n" + XREAD_REPLY
    want = [
        b"PONG",
        b"1-0\r\nx",
        pr.RespError("ERR no"),
        42,
        None,
        None,
        [[b"BenchPull:0", [[b"0-1", [b"body", b"abc"]], [b"0-2", [b"body", b""]]]]],
    ]
    for chunks in _splits(stream):
        reader = pr.RespReader()
        got = [r for c in chunks for r in reader.feed(c)]
        assert got == want, chunks
        assert reader.buf == b""
    assert pr.xread_entries(want[-1]) == 2 and pr.xread_entries(None) == 0


def test_resp_reader_refuses_what_is_not_resp() -> None:
    with pytest.raises(ValueError, match="not a RESP reply at byte 0"):
        pr.RespReader().feed(b"HTTP/1.1 400\r\n")


def test_resp_counter_books_replies_errors_and_entries() -> None:
    out = SimpleNamespace(codes={}, messages=0)
    adds = pr.RespCounter(out, entries=False)
    assert adds.feed(b"$3\r\n1-1\r\n$3\r\n1-") == (1, b"")
    assert adds.feed(b"2\r\n-ERR full\r\n") == (2, b"")
    assert out.codes == {0: 2, pr.ERROR_CODE: 1} and out.messages == 2
    reads = SimpleNamespace(codes={}, messages=0)
    assert pr.RespCounter(reads, entries=True).feed(XREAD_REPLY + b"*-1\r\n") == (2, b"")
    assert reads.messages == 2 and reads.codes == {0: 2}


def test_nats_reader_hands_back_messages_and_verbs_however_the_bytes_arrive() -> None:
    stream = (
        b'INFO {"server_id":"x"}\r\nPING\r\nMSG _INBOX.b.1 1  27\r\n{"stream":"BENCH", "seq":1}\r\n'
        b"MSG bench.T.0 2 $JS.ACK.BENCH.c.1.2.2.1.0 5\r\nhe\r\no\r\n"
        b"HMSG _INBOX.b.f 1 28 28\r\nNATS/1.0 404 No Messages\r\n\r\n\r\n+OK\r\n-ERR 'Unknown Protocol'\r\n"
    )
    want = [
        "INFO",
        "PING",
        pn.Msg("_INBOX.b.1", 1, None, None, b'{"stream":"BENCH", "seq":1}'),
        pn.Msg("bench.T.0", 2, "$JS.ACK.BENCH.c.1.2.2.1.0", None, b"he\r\no"),
        pn.Msg("_INBOX.b.f", 1, None, b"NATS/1.0 404 No Messages\r\n\r\n", b""),
        "+OK",
        "-ERR 'Unknown Protocol'",
    ]
    for chunks in _splits(stream):
        reader = pn.NatsReader()
        got = [m for c in chunks for m in reader.feed(c)]
        assert got == want, chunks
        assert reader.buf == b""


def test_nats_frames() -> None:
    assert pn.pub("bench.T.0", b"ab", "_INBOX.x.1") == b"PUB bench.T.0 _INBOX.x.1 2\r\nab\r\n"
    assert pn.pub("bench.T.0", b"") == b"PUB bench.T.0 0\r\n\r\n"
    assert (
        pn.fetch("BENCH", "T-0", 32, "_INBOX.x.f")
        == b'PUB $JS.API.CONSUMER.MSG.NEXT.BENCH.T-0 _INBOX.x.f 12\r\n{"batch":32}\r\n'
    )
    assert pn.subject("BenchPull", 3) == "bench.BenchPull.3"


def test_nats_counter_acks_and_fetches() -> None:
    out = SimpleNamespace(codes={}, messages=0)
    acks = pn.NatsCounter(out, batch=None)
    data = (
        b'MSG _INBOX.w.1 1 27\r\n{"stream":"BENCH", "seq":1}\r\nPING\r\n'
        b'MSG _INBOX.w.2 1 40\r\n{"error":{"code":503,"description":"x"}}\r\n'
    )
    assert acks.feed(data) == (2, b"PONG\r\n")
    assert out.codes == {0: 1, pn.ERROR_CODE: 1} and out.messages == 1
    got = SimpleNamespace(codes={}, messages=0)
    fetches = pn.NatsCounter(got, batch=2)
    one = b"MSG bench.T.0 1 $JS.ACK.a 1\r\nx\r\n"
    assert fetches.feed(one * 3) == (1, b"")
    assert fetches.feed(one + b"HMSG _INBOX.w.f 1 16 16\r\nNATS/1.0 408\r\n\r\n\r\n") == (2, b"")
    assert got.messages == 4 and got.codes == {0: 2, pn.ERROR_CODE: 1}


def test_the_load_counts_the_brokers_answers_and_skips_its_requests() -> None:
    import broker_load as bl

    out = bl.Outcome()
    counter = bl.RemotingCounter(out)
    notify = encode_bytes(RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, 9, 0, None, {"consumerGroup": "g"}))
    ok = encode_bytes(RemotingCommand(RequestCode.SEND_MESSAGE_V2, 1).reply(ResponseCode.SUCCESS))
    busy = encode_bytes(RemotingCommand(RequestCode.SEND_MESSAGE_V2, 2).reply(ResponseCode.SYSTEM_BUSY, "busy"))
    assert counter.feed(notify + ok + busy[:10]) == (1, b"")
    assert counter.feed(busy[10:]) == (1, b"")
    assert out.codes == {ResponseCode.SUCCESS: 1, ResponseCode.SYSTEM_BUSY: 1} and out.messages == 1 and out.errors == 1


def test_an_absent_peer_is_said_once(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    peers = broker_servers.Peers(str(tmp_path / "no-redis"), str(tmp_path / "no-nats"), str(tmp_path / "no-python"))
    assert peers.get("redis") is None and peers.get("redis") is None and peers.get("nats") is None
    out = capsys.readouterr().out
    assert out.count("peer absent: Redis") == 1 and out.count("peer absent: NATS JetStream") == 1, out
    exe = tmp_path / "redis-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert broker_servers.Peers(str(exe), None, None).get("redis") == str(exe)


def test_cpu_meter_counts_this_process_threads() -> None:
    meter = broker_servers.CpuMeter(os.getpid()).start()
    x = 0
    for i in range(2_000_000):  # CPU to measure
        x += i
    assert meter.stop() > 0 and x
    assert broker_servers.vm_rss_mib(os.getpid()) > 1


def test_report_prints_each_peer_present_and_writes_a_json_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    lines: list[dict[str, object]] = []
    bench = SimpleNamespace(figure=lambda name, value, unit, **kw: lines.append({"name": name, "value": value, **kw}))
    broker_servers.report(bench, "fig", 2.0, "ms", [("peer A", 1.0), ("peer B", None), ("peer C", 4.0)])  # type: ignore[arg-type]
    broker_servers.report(bench, "alone", 3.0, "ms", [("peer B", None)])  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "(2.00x)   peer A" in out and "(0.50x)   peer C" in out and "peer B" not in out, out
    assert "(no peer present)" in out
    assert lines == [
        {"name": "fig", "value": 2.0, "peer": "peer A", "peer_value": 1.0},
        {"name": "fig", "value": 2.0, "peer": "peer C", "peer_value": 4.0},
        {"name": "alone", "value": 3.0},
    ]
