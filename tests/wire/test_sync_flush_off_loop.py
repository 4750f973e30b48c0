"""Under SYNC_FLUSH the broker's event loop never waits for a disk: sends (310), send-backs
(36) and END_TRANSACTION (37) reach the store without its flush wait, and every sync (the
store's group commit, ``FlushService.flush_to``) runs off the loop's thread; sends and
END_TRANSACTION are answered after it, a send-back (WAIT=false, as in Java) after its put."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from conftest import small_store_config

import rmqlog
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from wire.broker_helpers import FakePeer, make_broker, run, send_header, send_request
from wire.test_send_back import back
from wire.test_transactions import end_request, half_props

NOW = 1_700_000_000_000


def _broker(tmp_path: Path) -> tuple[Any, list[tuple[int, bool]]]:
    store = rmqlog.MessageStore.open(
        tmp_path / "s",
        small_store_config(store_host="127.0.0.1:10911", flush_disk_type="SYNC_FLUSH"),
        clock=rmqlog.ManualClock(NOW),
    )
    broker = make_broker(store, clock=rmqlog.ManualClock(NOW))
    broker.topics.update(rmqlog.TopicConfig("T1", 4, 4))
    syncs: list[tuple[int, bool]] = []  # (thread, whether it was the loop's)
    service = store.parts.flush_service
    real = service.flush_to

    def recorded(end: int) -> Any:
        syncs.append((threading.get_ident(), threading.get_ident() == broker.loop_thread))
        return real(end)

    service.flush_to = recorded  # type: ignore[method-assign]
    return broker, syncs


def _on_loop(broker: Any, peer: FakePeer, *reqs: RemotingCommand) -> list[RemotingCommand | None]:
    broker.loop_thread = threading.get_ident()  # run() runs the loop on this thread
    return run(broker, peer, *reqs)


def test_sends_send_backs_and_transaction_ends_never_sync_on_the_loop(tmp_path: Path) -> None:
    broker, syncs = _broker(tmp_path)
    try:
        (sent,) = _on_loop(broker, FakePeer(), send_request(send_header("T1", queue_id=1, props="TAGS\x01a\x02"), b"m"))
        assert sent is not None and sent.code == ResponseCode.SUCCESS
        assert syncs and not any(on_loop for _, on_loop in syncs)  # the group commit ran, off the loop
        syncs.clear()
        (half,) = _on_loop(
            broker, FakePeer(), send_request(send_header("T1", queue_id=2, props=half_props("U1"), sys_flag=4), b"h")
        )
        assert half is not None and half.code == ResponseCode.SUCCESS
        syncs.clear()
        (ended,) = _on_loop(broker, FakePeer(), end_request(half, 8))  # commit
        assert ended is not None and ended.code == ResponseCode.SUCCESS
        assert syncs and not any(on_loop for _, on_loop in syncs)
        syncs.clear()
        offset = int(sent.ext_fields["msgId"][16:], 16)
        (backed,) = _on_loop(broker, FakePeer(), back(offset, "G"))
        assert backed is not None and backed.code == ResponseCode.SUCCESS
        assert not any(on_loop for _, on_loop in syncs)
        assert RequestCode.CONSUMER_SEND_MSG_BACK == 36
    finally:
        broker.store.close()
