"""POP consumption through a ``kill -9`` of an ``rmqlog broker`` process (docs/broker.md, "POP
consumption"): a consumer pops every message with 200050 and acks some with 200051 (each ack
answered before the kill); the broker is killed with SIGKILL and started again over the same
store. The guarantee checked (at-least-once): every message handed out and not acked is handed
out again (from ``%RETRY%<group>_<topic>``, ``reconsumeTimes`` 1) once its invisible time has
passed, none is lost, no acked message comes again, and the topic's own queues are not read
again from their start. Waits are on what the broker answers, with a deadline; nothing sleeps
for a fixed time."""

from __future__ import annotations

import time
from pathlib import Path

import rmqlog
from rmqnet.client import Admin
from rmqnet.client.loop import call
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from tests.wire.broker_helpers import send_header, send_request
from tests.wire.test_state_kill import BrokerProc

GROUP, TOPIC = "PG_KILL", "T"
MESSAGES = 30
#: the consumer's invisible time (ms): long enough for its acks, short enough to wait out
INVISIBLE_MS = 4000
DEADLINE_S = 60


def _pop(admin: Admin, addr: str, n: int = 16) -> RemotingCommand:
    now = int(time.time() * 1000)
    ext = {
        "consumerGroup": GROUP,
        "topic": TOPIC,
        "queueId": "-1",
        "maxMsgNums": str(n),
        "invisibleTime": str(INVISIBLE_MS),
        "pollTime": "0",
        "bornTime": str(now),
        "initMode": "0",
        "expType": "TAG",
        "exp": "*",
        "order": "false",
    }
    cmd = RemotingCommand(RequestCode.POP_MESSAGE, 0, 0, None, ext, b"", "JAVA")
    return call(admin.invoke(addr, cmd, ok=(ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT)))


def _messages(res: RemotingCommand) -> list[dict[str, object]]:
    """The popped messages, each with the receipt handle a Java client builds."""
    if res.code != ResponseCode.SUCCESS:
        return []
    ext = res.ext_fields
    starts = {}
    for entry in str(ext["startOffsetInfo"]).split(";"):
        mark, qid, start = entry.split(" ")
        starts[(mark, int(qid))] = start
    out = rmqlog.decode_records(res.body_bytes()).to_pylist()
    for m in out:
        mark = "1" if str(m["topic"]).startswith("%RETRY%") else "0"
        m["handle"] = (
            f"{starts[(mark, m['queueId'])]} {ext['popTime']} {ext['invisibleTime']} {ext['reviveQid']} "
            f"{mark} broker-a {m['queueId']} {m['queueOffset']}"
        )
    return out


def _ack(admin: Admin, addr: str, m: dict[str, object]) -> None:
    ext = {
        "consumerGroup": GROUP,
        "topic": str(m["topic"]),
        "queueId": str(m["queueId"]),
        "extraInfo": str(m["handle"]),
        "offset": str(m["queueOffset"]),
    }
    call(admin.invoke(addr, RemotingCommand(RequestCode.ACK_MESSAGE, 0, 0, None, ext, b"", "JAVA")))


def test_unacked_messages_come_again_after_a_kill_9_and_acked_ones_do_not(tmp_path: Path) -> None:
    root, conf = tmp_path / "store", tmp_path / "broker.conf"
    conf.write_text(f"brokerName=broker-a\nmappedFileSizeCommitLog={1 << 20}\n")
    broker = BrokerProc(root, conf)
    admin = Admin("127.0.0.1:9")
    try:
        admin.create_topic(broker.address, TOPIC, 2)
        for i in range(MESSAGES):
            req = send_request(send_header(TOPIC, queue_id=i % 2), b"m%d" % i)
            call(admin.invoke(broker.address, req))
        handed: dict[bytes, dict[str, object]] = {}
        deadline = time.monotonic() + DEADLINE_S
        while len(handed) < MESSAGES:
            assert time.monotonic() < deadline, f"only {len(handed)} popped"
            for m in _messages(_pop(admin, broker.address)):
                assert m["body"] not in handed  # handed out once before any invisible time passed
                handed[m["body"]] = m  # type: ignore[index]
        acked = {b for b in handed if int(b[1:]) % 3 == 0}
        for body in sorted(acked):
            _ack(admin, broker.address, handed[body])  # each answered SUCCESS before the kill
        broker.kill()
    finally:
        if broker.proc.poll() is None:
            broker.kill()
        admin.close()

    unacked = set(handed) - acked
    broker = BrokerProc(root, conf)
    admin = Admin("127.0.0.1:9")
    try:
        again: dict[bytes, dict[str, object]] = {}
        deadline = time.monotonic() + DEADLINE_S
        while set(again) != unacked:
            assert time.monotonic() < deadline, f"not redelivered: {sorted(unacked - set(again))}"
            for m in _messages(_pop(admin, broker.address)):
                body = m["body"]
                assert body in unacked, f"{body!r}: acked before the kill, or never sent, yet delivered"
                assert body not in again, f"{body!r} delivered twice after the restart"
                assert (m["topic"], m["reconsumeTimes"]) == (f"%RETRY%{GROUP}_{TOPIC}", 1)
                again[body] = m  # type: ignore[index]
                _ack(admin, broker.address, m)
            time.sleep(0.05)  # (the revive runs on the broker's rounds)
        res = _pop(admin, broker.address)
        assert _messages(res) == [] and res.code == ResponseCode.POLLING_TIMEOUT  # T not read again from 0
        assert broker.stop() == 0
    finally:
        if broker.proc.poll() is None:
            broker.kill()
        admin.close()
