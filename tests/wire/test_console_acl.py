"""The console against a broker with ``aclEnable`` (test_acl.py's servers): with the
credentials the other network commands take, its requests are signed and the pages answer;
without them the broker's refusal is the page's message (409), never a traceback; credentials
that cannot be used stop the command before it serves."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from rmqnet import cli
from rmqnet.console import ConsoleApp, WireBackend, make_app

from .test_acl import ADMIN_KEY, ADMIN_SECRET, home, servers  # noqa: F401  (the fixtures)


def _pages(backend: WireBackend) -> list[tuple[int, Any]]:
    console = ConsoleApp(backend, sample_s=0)

    async def run() -> list[tuple[int, Any]]:
        async with TestClient(TestServer(make_app(console))) as client:
            out = []
            for url in ("/api/topics/T", "/api/groups", "/api/messages?topic=T&queue=0"):
                res = await client.get(url)
                out.append((res.status, await res.json()))
            return out

    try:
        return asyncio.run(run())
    finally:
        backend.close()


def test_signed_with_credentials_refused_without(servers: dict[str, Any]) -> None:  # noqa: F811
    ns = servers["namesrv"]
    signed = _pages(WireBackend(ns, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET))
    assert [s for s, _ in signed] == [200, 200, 200], signed
    assert [q["queueId"] for q in signed[0][1]["queues"]] == [0, 1, 2, 3]
    unsigned = _pages(WireBackend(ns))
    for status, body in unsigned[:2]:
        assert status == 409 and "No accessKey is configured" in body["error"], body
    wrong = _pages(WireBackend(ns, access_key=ADMIN_KEY, secret_key="wrong!!"))
    assert (
        wrong[0][0] == 409
        and "Check signature failed" in wrong[0][1]["error"]
        and "wrong!!" not in wrong[0][1]["error"]
    )


def test_credentials_that_cannot_be_used_stop_the_command(tmp_path: Path) -> None:
    assert cli.main(["console", "--namesrv", "127.0.0.1:9876", "--access-key", "k"]) == 2  # one key alone
    loose = tmp_path / "tools.yml"
    loose.write_text("accessKey: k\nsecretKey: s\n")
    loose.chmod(0o644)  # others may read it: refused
    assert cli.main(["console", "--namesrv", "127.0.0.1:9876", "--credentials", str(loose)]) == 2
