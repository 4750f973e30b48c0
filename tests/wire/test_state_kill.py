"""Consumer offsets persisted on a schedule, checked against ``kill -9`` of an ``rmqlog broker``
process (docs/broker.md, "State tables"): offsets committed and persisted are there after a
restart; offsets committed after the last persist may be missing (their consumers read those
messages again), never anything else: no other entry lost or changed, the files whole. A clean
stop (SIGTERM) persists everything. Waits are on the files the broker writes; nothing sleeps
for a fixed time."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import refcodec as rc
from rmqnet.client import Admin
from tests.conftest import subprocess_env
from tests.wire.failover_procs import wait

TIMEOUT_S = 60
#: the persist schedule of the broker under test (ms): short, so the test waits little
INTERVAL_MS = 300


class BrokerProc:
    """``rmqlog broker`` on a free port of 127.0.0.1, no name server."""

    def __init__(self, root: Path, conf: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rmqnet", "broker", str(root), "-c", str(conf), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=subprocess_env(),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert " ready at 127.0.0.1:" in line, line
        self.address = line.split()[-1]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=TIMEOUT_S)
        self._close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=TIMEOUT_S)
        self._close()
        return self.proc.returncode

    def _close(self) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _offsets(root: Path) -> dict[tuple[str, int], int]:
    """consumerOffset.json as (group, queue) -> offset of topic T (it must parse: never torn)."""
    path = root / "config" / "consumerOffset.json"
    if not path.exists():
        return {}
    data = rc.parse_fastjson(path.read_text("utf-8"))
    assert isinstance(data, dict)
    out = {}
    for key, per_queue in data["offsetTable"].items():
        topic, _, group = key.partition("@")
        assert topic == "T", key  # nothing but what was committed
        out.update({(group, int(q)): int(o) for q, o in per_queue.items()})
    return out


def _commit(admin: Admin, broker: str, offsets: dict[tuple[str, int], int]) -> None:
    for (group, q), offset in offsets.items():
        admin.update_offset(broker, group, "T", q, offset)


def test_offsets_persisted_on_a_schedule_survive_a_kill_9(tmp_path: Path) -> None:
    root, conf = tmp_path / "store", tmp_path / "broker.conf"
    conf.write_text(
        f"brokerName=broker-a\nflushConsumerOffsetInterval={INTERVAL_MS}\nmappedFileSizeCommitLog={1 << 20}\n"
    )
    broker = BrokerProc(root, conf)
    admin = Admin("127.0.0.1:9")  # (no name server: every call names the broker's address)
    try:
        admin.create_topic(broker.address, "T", 4)  # UPDATE_AND_CREATE_TOPIC: written at once
        persisted = {("GA", q): 10 + q for q in range(4)} | {("GB", q): 100 + q for q in range(4)}
        _commit(admin, broker.address, persisted)
        wait("the first persist", lambda: _offsets(root) == persisted)
        later = {("GA", q): 20 + q for q in range(4)} | {("GC", q): 7 for q in range(4)}
        _commit(admin, broker.address, later)
        broker.kill()  # between two persists (or just after one: then the later ones are there too)
    finally:
        if broker.proc.poll() is None:
            broker.kill()
        admin.close()

    after = _offsets(root)
    for key, offset in after.items():  # each entry is the persisted value or a later commit's
        assert offset in {persisted.get(key), later.get(key)} - {None}, (key, offset)
    assert persisted.keys() <= after.keys()  # nothing persisted is missing
    assert all(after[("GB", q)] == 100 + q for q in range(4))  # untouched since: exactly as persisted
    topics = json.loads((root / "config" / "topics.json").read_text())["topicConfigTable"]
    assert topics["T"]["writeQueueNums"] == 4 and topics["T"]["perm"] == 6
    bak = root / "config" / "consumerOffset.json.bak"
    if bak.exists():
        assert isinstance(rc.parse_fastjson(bak.read_text("utf-8")), dict)

    # the restarted broker answers what survived; a clean stop then persists everything
    broker = BrokerProc(root, conf)
    admin = Admin("127.0.0.1:9")
    try:
        got: dict[Any, Any] = {key: admin.query_offset(broker.address, key[0], "T", key[1]) for key in after}
        assert got == after
        admin.update_offset(broker.address, "GD", "T", 0, 5)
        assert broker.stop() == 0
    finally:
        if broker.proc.poll() is None:
            broker.kill()
        admin.close()
    assert _offsets(root) == after | {("GD", 0): 5}
