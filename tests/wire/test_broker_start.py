"""How the broker starts and logs, as a user meets it: an address already
taken is one line and exit 3, the name server's rule; a root another broker serves is refused
with a message naming it; the broker's log lines carry time and level as the name server's;
``info --namesrv`` writes a run of queues with one range once."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import rmqlog
from rmqnet import cli
from rmqnet.broker import launch
from rmqnet.broker.config import BrokerConfig

from .test_broker_pull_over_the_wire import Servers, servers  # noqa: F401  (the fixture)

GUARD_S = 60.0  # a hang guard only


@pytest.fixture
def taken() -> Iterator[int]:
    """A port of 127.0.0.1 something listens on."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def test_a_taken_port_is_one_line_and_exit_3_for_broker_and_name_server(
    tmp_path: Path, taken: int, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ["broker", str(tmp_path / "root"), "--listen", f"127.0.0.1:{taken}"],
        ["namesrv", "--listen", f"127.0.0.1:{taken}"],
    ):
        assert cli.main(argv) == 3, argv
        out, err = capsys.readouterr()
        (line,) = err.splitlines()
        assert re.fullmatch(rf"rmqlog {argv[0]}: cannot listen on 127\.0\.0\.1:{taken}: .*(in use|Address).*", line), (
            line
        )


def test_broker_log_lines_carry_time_and_level(tmp_path: Path, taken: int) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\nnoSuchKeyAtAll=1\n")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "rmqnet",
            "broker",
            str(tmp_path / "root"),
            "-c",
            str(conf),
            "--listen",
            f"127.0.0.1:{taken}",
        ],
        capture_output=True,
        text=True,
        timeout=GUARD_S,
    )
    assert res.returncode == 3, res.stderr
    lines = res.stderr.splitlines()
    warning = [line for line in lines if "noSuchKeyAtAll" in line]
    assert len(warning) == 1 and re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING rmqlog\.", warning[0]), lines
    assert lines[-1].startswith("rmqlog broker: cannot listen on") and "Traceback" not in res.stderr


def test_a_second_broker_on_a_served_root_is_refused(tmp_path: Path) -> None:
    from rmqnet.broker.serve_lock import RootServedError

    root = tmp_path / "root"
    config = BrokerConfig(broker_name="b", listen_port=0, store=rmqlog.StoreConfig(mapped_file_size_commit_log=1 << 20))

    async def body() -> None:
        first = launch.BrokerProcess(root, config)
        await first.start()
        second = launch.BrokerProcess(root, config)
        with pytest.raises(RootServedError) as err:
            await second.start()
        assert str(root) in str(err.value) and f"pid {os.getpid()}" in str(err.value)
        assert second.broker is None and second.store is not None  # opened, then closed: no service ran
        with pytest.raises(rmqlog.StoreClosedError):
            second.store.topics()
        first.request_stop()
        await first.wait_stopped(grace_s=1.0)
        third = launch.BrokerProcess(root, config)  # the root is free again
        await third.start()
        third.request_stop()
        await third.wait_stopped(grace_s=1.0)

    asyncio.run(asyncio.wait_for(body(), GUARD_S))


def test_a_second_broker_process_exits_3_naming_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    cmd = [sys.executable, "-m", "rmqnet", "broker", str(root), "--listen", "127.0.0.1:0"]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert first.stdout is not None and "ready at" in first.stdout.readline()
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=GUARD_S)
        assert res.returncode == 3
        assert res.stderr.splitlines()[-1] == (
            f"rmqlog broker: the store at {root} is served by another broker (pid {first.pid} holds broker.lock); "
            "one broker per store root: stop it, or give this one another root"
        )
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(GUARD_S) == 0


def test_queue_ranges_write_a_run_once() -> None:
    from rmqnet.commands.reading_queues import queue_ranges

    queues = [{"brokerName": "b", "queueId": i, "min": 0, "max": 0} for i in range(1024)]
    assert queue_ranges(queues) == "b/0-1023:[0,0)"
    queues[5]["max"] = 3
    queues += [{"brokerName": "c", "queueId": 0, "min": 0, "max": 0}]
    assert queue_ranges(queues) == "b/0-4:[0,0) b/5:[0,3) b/6-1023:[0,0) c/0:[0,0)"


def test_info_over_the_wire_summarizes_a_system_topic(servers: Servers, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert cli.main(["info", "--namesrv", servers.namesrv]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("BenchmarkTest")]
    assert line.split() == ["BenchmarkTest", "broker-a/0-1023:[0,0)"]
