"""A RocketMQ deployment on the test hosts: a name server, broker groups (each its own store
root and host), and the clients' agent (:mod:`.agent`) on a host of its own, all as processes
(``rmqlog namesrv``, ``rmqlog broker``) inside their hosts; optionally a broker reached
through a :class:`~.proxy.FaultProxy` on another host (the broker advertises the proxy's
address, ``brokerIP1``, so every client's connection goes through it).

Ports are the defaults (9876, 10911): every host has its own network stack, so they never
clash. Store roots are folders of the test's ``tmp_path``; :meth:`Cluster.stored_keys` reads
a root's messages (UNIQ_KEYs) after its broker has ended, for the checker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import subprocess_env

import rmqlog

from .hosts import Hosts
from .proxy import FaultProxy

NAMESRV_PORT = 9876
BROKER_PORT = 10911
AGENT = Path(__file__).with_name("agent.py")
#: small files: a broker's store stays a few MB
STORE = {
    "mappedFileSizeCommitLog": 1 << 20,
    "mappedFileSizeConsumeQueue": 6000,
    "maxHashSlotNum": 4000,
    "maxIndexNum": 16000,
}


def store_config() -> rmqlog.StoreConfig:
    return rmqlog.StoreConfig(
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=6000,
        max_hash_slot_num=4000,
        max_index_num=16000,
    )


def _ready_line(proc: subprocess.Popen[str], what: str) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed once it serves; '' if it died first
    if not line:
        err = proc.stderr.read() if proc.stderr is not None and proc.poll() is not None else ""
        raise RuntimeError(f"{what} did not start: {err[-2000:]}")
    return line.strip()


class Cluster:
    """``Cluster(hosts, tmp_path)``; start the parts with :meth:`namesrv`, :meth:`broker`,
    :meth:`agent`; order the agent with :meth:`ask`."""

    def __init__(self, hosts: Hosts, tmp: Path) -> None:
        self.hosts = hosts
        self.tmp = tmp
        self.brokers: dict[str, subprocess.Popen[str]] = {}
        self.roots: dict[str, Path] = {}
        self.proxies: list[FaultProxy] = []
        self.namesrv_addr = ""
        self._agent: subprocess.Popen[str] | None = None

    def namesrv(self, host: str) -> str:
        addr = f"{self.hosts.addr(host)}:{NAMESRV_PORT}"
        proc = self.hosts.popen(
            host,
            [sys.executable, "-m", "rmqnet", "namesrv", "--listen", addr],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
        )
        assert _ready_line(proc, "the name server") == f"listening on {addr}"
        self.namesrv_addr = addr
        return addr

    def broker(
        self,
        host: str,
        name: str,
        topics: dict[str, int],
        *,
        via_proxy: str | None = None,
        conf: dict[str, str] | None = None,
        root_name: str | None = None,
    ) -> str:
        """Broker group ``name`` (its master unless ``conf`` says otherwise, e.g. ``brokerId``
        and ``brokerRole`` for a slave, whose root is then ``root_name``) on ``host`` over a
        root of its own holding ``topics`` (name -> queues) before it starts; with
        ``via_proxy`` (a host), clients reach it through a FaultProxy there. Its advertised
        address. (One process per root name: ``self.brokers`` and ``self.roots`` are keyed by it.)"""
        key = root_name or name
        root = self.tmp / key
        if key not in self.roots:
            with rmqlog.MessageStore.open(root, store_config()) as store:
                for topic, queues in topics.items():
                    store.create_topic(topic, queues)
        self.roots[key] = root
        advertised = self.hosts.addr(via_proxy or host)
        path = self.tmp / f"{key}.conf"
        lines = {
            "brokerClusterName": "DefaultCluster",
            "brokerName": name,
            "brokerId": "0",
            "brokerIP1": advertised,
            "listenPort": str(BROKER_PORT),
            "namesrvAddr": self.namesrv_addr,
            **STORE,
            **(conf or {}),
        }
        path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        proc = self.hosts.popen(
            host,
            [
                sys.executable,
                "-m",
                "rmqnet",
                "broker",
                str(root),
                "-c",
                str(path),
                "--listen",
                f"0.0.0.0:{BROKER_PORT}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
        )
        line = _ready_line(proc, f"broker {name}")
        assert line == f"broker {name} ready at {advertised}:{BROKER_PORT}", line
        self.brokers[key] = proc
        if via_proxy is not None:
            self.proxies.append(FaultProxy(self.hosts, via_proxy, BROKER_PORT, (self.hosts.addr(host), BROKER_PORT)))
        return f"{advertised}:{BROKER_PORT}"

    def kill(self, name: str) -> None:
        """kill -9 of broker ``name``'s process."""
        proc = self.brokers[name]
        proc.kill()
        proc.wait(60)

    def stop(self, name: str) -> int:
        """SIGTERM: a clean stop; its exit status."""
        proc = self.brokers[name]
        proc.terminate()
        return proc.wait(60)

    def agent(self, host: str) -> None:
        self._agent = self.hosts.popen(
            host,
            [sys.executable, str(AGENT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
        )
        assert json.loads(_ready_line(self._agent, "the agent")) == {"ok": True, "ready": True}

    def ask(self, op: str, **order: Any) -> dict[str, Any]:
        """One order to the agent; its answer (an AssertionError when the order failed)."""
        a = self._agent
        assert a is not None and a.stdin is not None and a.stdout is not None
        a.stdin.write(json.dumps({"op": op, **order}) + "\n")
        a.stdin.flush()
        line = a.stdout.readline()
        if not line:
            raise RuntimeError(f"the agent died: {a.stderr.read()[-2000:] if a.stderr else ''}")
        answer: dict[str, Any] = json.loads(line)
        assert answer["ok"], answer
        return answer

    def stored_keys(self, name: str, topic: str) -> list[str]:
        """The UNIQ_KEYs of ``topic`` in broker ``name``'s root (its broker ended: a killed
        one's root is recovered by this open, as a restart would)."""
        assert self.brokers[name].poll() is not None, "the broker still runs"
        keys: list[str] = []
        with rmqlog.MessageStore.open(self.roots[name], store_config()) as store:
            store.dispatch()
            for qid in range(store.topics()[topic].read_queue_nums):
                offset = store.min_offset(topic, qid)
                while True:
                    res = store.get_messages("checker", topic, qid, offset, max_count=256)
                    if res.status != rmqlog.GetMessageStatus.FOUND:
                        break
                    for props in res.messages.column("properties").to_pylist():
                        keys.append(dict(props)["UNIQ_KEY"])
                    offset = res.next_begin_offset
        return keys

    def published_tail(self, name: str) -> int:
        """The published end of broker ``name``'s commitlog (its broker ended; a read-only
        open: nothing in the root changes)."""
        assert self.brokers[name].poll() is not None, "the broker still runs"
        with rmqlog.MessageStore.open(self.roots[name], store_config(), read_only=True) as store:
            return store.published_tail()

    def commitlog_bytes(self, name: str, end: int) -> bytes:
        """The bytes ``[0, end)`` of broker ``name``'s commitlog, read from its segment files
        (RocketMQ's names: the start offset, 20 digits), whatever the broker's state."""
        folder = self.roots[name] / "commitlog"
        out = bytearray()
        for seg in sorted(folder.iterdir()):
            if not seg.name.isdigit():
                continue
            start = int(seg.name)
            if start >= end:
                break
            assert start == len(out), f"{name}: segment {seg.name} does not follow the bytes before it"
            with seg.open("rb") as f:
                out += f.read(min(end - start, 1 << 20))
        return bytes(out[:end])

    def close(self) -> None:
        for p in self.proxies:
            p.close()
        if self._agent is not None and self._agent.stdin is not None:
            self._agent.stdin.close()
        # processes and namespaces: Hosts.close (the fixture)
