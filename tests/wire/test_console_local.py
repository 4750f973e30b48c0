"""The console over a store opened read-only (``rmqlog console --path``, rmqnet/console/
backend_local.py): the same pages as over the wire from the store's own calls, its files
untouched, every admin action refused."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

import rmqlog
from rmqnet.console import ConsoleApp, make_app
from rmqnet.console.backend_local import LocalBackend


def _store(root: Path) -> list[rmqlog.PutMessageResult]:
    with rmqlog.MessageStore.open(root) as store:
        store.create_topic("L", 2)
        puts = [store.put("L", json.dumps({"n": i}), queue_id=i % 2, tags="TL", keys=[f"lk{i}"]) for i in range(5)]
        store.dispatch()
        store.commit_offset("CG_L", "L", 0, 1)
    return puts


def _console(root: Path, body: Callable[[TestClient, ConsoleApp], Awaitable[None]], admin: bool = False) -> None:
    backend = LocalBackend(root)
    console = ConsoleApp(backend, admin=admin, sample_s=0)

    async def run() -> None:
        async with TestClient(TestServer(make_app(console))) as client:
            await body(client, console)

    try:
        asyncio.run(run())
    finally:
        backend.close()


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def test_local_store_pages(tmp_path: Path) -> None:
    root = tmp_path / "root"
    puts = _store(root)
    before = _files(root)

    async def body(client: TestClient, console: ConsoleApp) -> None:
        cluster = await (await client.get("/api/cluster")).json()
        assert cluster["brokers"][0]["role"] == "STORE (read-only)" and cluster["brokers"][0]["commitLogMaxOffset"] > 0
        assert "L" in [t["topic"] for t in (await (await client.get("/api/topics")).json())["items"]]
        topic = await (await client.get("/api/topics/L", params={"groups": "1"})).json()
        assert [(q["queueId"], q["max"]) for q in topic["queues"]] == [(0, 3), (1, 2)]
        assert topic["consumers"] == [{"group": "CG_L", "lag": 2}]
        group = await (await client.get("/api/groups/CG_L")).json()
        assert group["totalLag"] == 2 and group["offsets"][0]["committed"] == 1
        browse = await (await client.get("/api/messages", params={"topic": "L", "queue": "0", "offset": "1"})).json()
        assert [m["bodyText"] for m in browse["messages"]] == ['{"n": 2}', '{"n": 4}'] and browse["nextOffset"] == 3
        assert browse["messages"][0]["consumedBy"] == [{"group": "CG_L", "consumed": False}]  # CG_L is at 1
        first = await (await client.get("/api/messages", params={"topic": "L", "queue": "0", "count": "1"})).json()
        assert first["messages"][0]["consumedBy"] == [{"group": "CG_L", "consumed": True}]
        by_key = await (await client.get("/api/messages", params={"topic": "L", "key": "lk3"})).json()
        assert [m["bodyText"] for m in by_key["messages"]] == ['{"n": 3}']
        by_id = await (await client.get("/api/messages", params={"msgId": puts[1].msg_id})).json()
        assert [m["bodyText"] for m in by_id["messages"]] == ['{"n": 1}']
        by_time = await (await client.get("/api/messages", params={"topic": "L", "begin": "0", "count": "3"})).json()
        rest = await (await client.get(by_time["next"].replace("/messages", "/api/messages", 1))).json()
        pages = [m["bodyText"] for m in by_time["messages"] + rest["messages"]]
        # every message once, in store time order (the five puts may share a millisecond: the
        # cursor orders them by queue and offset then)
        assert sorted(pages) == [f'{{"n": {i}}}' for i in range(5)] and len(by_time["messages"]) == 3
        for url, status in (
            ("/topics/NONE", 404),
            ("/groups/NOGROUP", 404),
            ("/messages?topic=L&queue=2", 400),
            ("/messages?topic=L&queue=0&broker=broker-a", 400),
        ):
            assert (await client.get(url)).status == status, url
        res = await client.post("/admin/topics", data={"topic": "X", "token": console.token})
        assert res.status == 403

    _console(root, body)
    assert _files(root) == before  # nothing written


def test_a_local_store_takes_no_change_even_with_admin(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _store(root)

    async def body(client: TestClient, console: ConsoleApp) -> None:
        res = await client.post(
            "/api/admin/groups/CG_L/reset", data={"topic": "L", "offset": "0", "token": console.token}
        )
        assert res.status == 403 and "does not take changes" in (await res.json())["error"]

    _console(root, body, admin=True)


def test_the_command_serves_a_store_until_sigterm(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import urllib.request

    from rmqnet import cli

    root = tmp_path / "root"
    _store(root)
    assert cli.main(["console", "--path", str(root), "--admin"]) == 2  # a store path takes no change
    assert cli.main(["console", "--path", str(root), "--listen", "nohost"]) == 2
    # no store there: what was asked is wrong (2), as in the store's commands (3 before the one table)
    assert cli.main(["console", "--path", str(tmp_path / "none")]) == 2
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqnet", "console", "--path", str(root), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("console at http://127.0.0.1:"), (line, proc.stderr and proc.stderr.read())
        url = line.split()[-1]
        with urllib.request.urlopen(url + "topics?q=L") as res:
            assert res.status == 200 and 'href="/topics/L"' in res.read().decode()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_pages_by_time_hold_every_message_once_when_they_share_a_millisecond(tmp_path: Path) -> None:
    import pyarrow as pa

    root = tmp_path / "root"
    with rmqlog.MessageStore.open(root) as store:
        store.create_topic("B", 3)
        store.put_batch(
            pa.table(
                {
                    "topic": ["B"] * 9,
                    "queueId": pa.array([i % 3 for i in range(9)], pa.int32()),
                    "body": [b"%d" % i for i in range(9)],
                }
            )
        )  # one batch: one store time
        store.dispatch()
    backend = LocalBackend(root)
    try:
        seen, after, pages = [], None, 0
        while True:
            page = backend.by_time("B", 0, (1 << 63) - 1, 2, after)
            pages += 1
            seen += [(m["queueId"], m["queueOffset"]) for m in page]
            if len(page) < 2:
                break
            last = page[-1]
            after = (last["_store_ms"], last["brokerName"], last["queueId"], last["queueOffset"])
        assert seen == [(q, o) for q in range(3) for o in range(3)] and pages == 5
    finally:
        backend.close()
