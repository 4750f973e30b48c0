"""The test hosts themselves: namespaces that reach each other and nothing else, a cut link and
its healing, a teardown that leaves nothing behind (after a failure too, and of a killed
run's leftovers), and the fault proxy's stall, delay, drop and cut, each seen by a client on
another host. Waits are on the data itself; a socket timeout is used only where the point is
that nothing arrives."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from .hosts import Hosts, remove_stale_sets
from .proxy import FaultProxy

HostsFactory = Callable[[Sequence[str]], Hosts]

#: an echo server: prints "ready" once it listens, echoes every connection until killed
ECHO = """
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16); print("ready", flush=True)
def echo(c):
    while True:
        d = c.recv(65536)
        if not d:
            return c.close()
        c.sendall(d)
while True:
    threading.Thread(target=echo, args=(s.accept()[0],), daemon=True).start()
"""
#: long enough that silence means nothing is coming (only used to show silence)
SILENCE_S = 0.5


def start_echo(hosts: Hosts, host: str, port: int = 7000) -> subprocess.Popen[str]:
    proc = hosts.popen(
        host, [sys.executable, "-c", ECHO, hosts.addr(host), str(port)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def in_host(hosts: Hosts, host: str, fn: Callable[[], Any]) -> Any:
    """``fn()`` run on a thread inside ``host``; its result (or its error re-raised)."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    hosts.thread_in(host, body).join(60)
    if "error" in out:
        raise out["error"]
    return out["value"]


def echo_once(addr: str, port: int, data: bytes, timeout: float = 30) -> bytes:
    with socket.create_connection((addr, port), timeout=timeout) as s:
        s.sendall(data)
        got = b""
        while len(got) < len(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def test_hosts_reach_each_other_and_nothing_else(hosts_factory: HostsFactory) -> None:
    hosts = hosts_factory(["a", "b"])
    start_echo(hosts, "a")
    assert in_host(hosts, "b", lambda: echo_once(hosts.addr("a"), 7000, b"hello")) == b"hello"
    links = hosts.run("b", ["ip", "-o", "link", "show"]).stdout
    assert sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines()) == ["eth0", "lo"]
    assert hosts.run("b", ["ip", "route", "show"]).stdout.split() == [
        "10.231.0.0/24",
        "dev",
        "eth0",
        "proto",
        "kernel",
        "scope",
        "link",
        "src",
        "10.231.0.2",
    ]
    # the root namespace has no way to the hosts: nothing was added to it
    with pytest.raises(OSError):
        echo_once(hosts.addr("a"), 7000, b"x", timeout=SILENCE_S)


def test_a_cut_link_is_silent_and_heals(hosts_factory: HostsFactory) -> None:
    hosts = hosts_factory(["a", "b"])
    start_echo(hosts, "a")
    hosts.cut("a")
    with pytest.raises(TimeoutError):
        in_host(hosts, "b", lambda: echo_once(hosts.addr("a"), 7000, b"x", timeout=SILENCE_S))
    hosts.heal("a")
    assert in_host(hosts, "b", lambda: echo_once(hosts.addr("a"), 7000, b"back")) == b"back"


def test_teardown_after_a_failure_leaves_nothing(hosts_factory: HostsFactory) -> None:
    hosts = Hosts(["a", "b"])
    proc = None
    with pytest.raises(ZeroDivisionError), hosts:
        proc = start_echo(hosts, "a")
        assert hosts.existing() == sorted([hosts.switch, hosts.ns("a"), hosts.ns("b")])
        1 / 0  # noqa: B018 (the failing test body)
    assert proc is not None and proc.poll() is not None
    assert hosts.existing() == []


def test_a_killed_run_s_leftovers_are_removed() -> None:
    from .hosts import _ip, netns_unavailable

    if netns_unavailable():
        pytest.skip(str(netns_unavailable()))
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    name = f"rmqc{dead.pid}x1-a"
    _ip("netns", "add", name)
    try:
        assert name in remove_stale_sets()
    finally:
        _ip("netns", "del", name, check=False)


def test_proxy_stall_delay_drop_and_cut(hosts_factory: HostsFactory) -> None:
    hosts = hosts_factory(["a", "b", "p"])
    start_echo(hosts, "a")
    with FaultProxy(hosts, "p", 7000, (hosts.addr("a"), 7000)) as proxy:
        pa, pp = hosts.addr("p"), 7000

        def session() -> dict[str, Any]:
            out: dict[str, Any] = {}
            s = socket.create_connection((pa, pp), timeout=30)
            s.sendall(b"one")
            out["plain"] = s.recv(100)
            proxy.stall("down")  # the answer is held at the proxy
            s.sendall(b"two")
            s.settimeout(SILENCE_S)
            try:
                out["stalled"] = s.recv(100)
            except TimeoutError:
                out["stalled"] = None
            s.settimeout(30)
            proxy.resume("down")
            out["resumed"] = s.recv(100)
            proxy.delay("up", 0.2)
            t0 = time.monotonic()
            s.sendall(b"three")
            out["delayed"] = s.recv(100)
            out["delay_s"] = time.monotonic() - t0
            proxy.delay("up", 0)
            proxy.drop("up")
            s.sendall(b"lost")
            s.settimeout(SILENCE_S)
            try:
                out["dropped"] = s.recv(100)
            except TimeoutError:
                out["dropped"] = None
            proxy.drop("up", False)
            s.settimeout(30)
            assert proxy.cut() == 1
            try:
                out["after_cut"] = s.recv(100)
            except ConnectionResetError:
                out["after_cut"] = "reset"
            s.close()
            out["new"] = echo_once(pa, pp, b"again")
            return out

        got = in_host(hosts, "b", session)
        assert got["plain"] == b"one"
        assert got["stalled"] is None and got["resumed"] == b"two"
        assert got["delayed"] == b"three" and got["delay_s"] >= 0.2  # at least the injected delay (not a speed bound)
        assert got["dropped"] is None
        assert got["after_cut"] in ("reset", b"")
        assert got["new"] == b"again"
        stats = proxy.stats()
        assert stats["accepted"] == 2 and stats["up"] == len(b"onetwothreeagain")


def test_proxy_refuses_new_connections(hosts_factory: HostsFactory) -> None:
    hosts = hosts_factory(["a", "p"])
    start_echo(hosts, "a")
    with FaultProxy(hosts, "p", 7000, (hosts.addr("a"), 7000)) as proxy:
        proxy.refuse()
        with pytest.raises(OSError):
            in_host(hosts, "a", lambda: echo_once(hosts.addr("p"), 7000, b"x"))
        proxy.refuse(False)
        assert in_host(hosts, "a", lambda: echo_once(hosts.addr("p"), 7000, b"ok")) == b"ok"
