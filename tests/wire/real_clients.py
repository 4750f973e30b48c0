"""The harness of the acceptance tests with real RocketMQ clients (test_ali_ons.py, test_cpp_client.py).

What runs, all as child processes on 127.0.0.1 (docs/clients.md, "Clients tested"):

- :class:`Cluster`: ``rmqlog namesrv`` and ``rmqlog broker`` over a temporary store root, each
  waited for until it prints its ready line, stopped by PID (SIGTERM, then SIGKILL) at the end;
- the clients' driver scripts under ``tests/wire/clients/``: ``node/producer.js`` and
  ``node/consumer.js`` (npm ``ali-ons``, installed by ``make clients`` from the committed
  ``package-lock.json``) and ``cpp/cpp_client.py`` (PyPI ``rocketmq`` 0.4.4, Apache's C++ client,
  in ``.venv-rocketmq``), each a :class:`Client` whose stdout is one JSON event a line;
- :class:`Netns`: a loopback-only network namespace (``unshare -n`` + ``ip link set lo up``, held
  by a ``sleep``) that the C++ client runs in *with* the name server and the broker (its libevent
  probes an outside address at start-up): every process of such a cluster is started through
  ``nsenter --net``, so this test process itself never joins it.

Waiting is on events (a line printed by a child, a child's exit), each with a deadline that only
bounds a failure, never a sleep that waits for time to pass. A failed wait raises
:class:`AssertionError` with what the child printed and the end of its stderr; every child's
stderr is also printed at the end of the test, which pytest shows for a failed test only.

A missing client (``make clients`` not run, no ``node``, no ``unshare``) fails the test that needs
it, never skips it: CI must not pass by not running them. ``RMQ_ALLOW_NO_CLIENTS=1`` turns that
into a skip for a machine without the registries.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import javaproperties
import pytest

TESTS_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = TESTS_DIR.parent
CLIENTS_DIR = Path(__file__).resolve().parent / "clients"
NODE_DIR = CLIENTS_DIR / "node"
NODE_PRODUCER = NODE_DIR / "producer.js"
NODE_CONSUMER = NODE_DIR / "consumer.js"
CPP_CLIENT = CLIENTS_DIR / "cpp" / "cpp_client.py"
#: our client's queue lock as a one-shot process (``Cluster.ours``)
LOCK_PROBE = Path(__file__).resolve().parent / "lock_probe.py"
ROCKETMQ_PYTHON = REPO_ROOT / ".venv-rocketmq" / "bin" / "python"
#: RocketMQ's official Node.js 5.x client (gRPC), a locked npm tree of its own (``make clients``)
NODE5_DIR = CLIENTS_DIR / "node5"
NODE5_PRODUCER = NODE5_DIR / "producer5.js"
NODE5_CONSUMER = NODE5_DIR / "consumer5.js"
NODE5_PUSH = NODE5_DIR / "push5.js"
#: RocketMQ's official Python 5.x client (gRPC), in an environment of its own (``make clients``)
PYTHON5_CLIENT = CLIENTS_DIR / "python5" / "python5_client.py"
ROCKETMQ5_PYTHON = REPO_ROOT / ".venv-rocketmq5" / "bin" / "python"
#: the rmqlog command of the environment running the tests (the broker and name server are its
#: subcommands); RMQ_WIRE_RMQLOG names another command with the same two subcommands
RMQLOG = Path(os.environ.get("RMQ_WIRE_RMQLOG") or Path(sys.executable).with_name("rmqlog"))

#: Deadlines of the waits (seconds): they bound a failure, a passing run never waits for them.
START_TIMEOUT = 30.0
EVENT_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0

#: RocketMQ's usual ports: free inside a namespace of our own, which holds nothing else
NS_NAMESRV_PORT = 9876
NS_BROKER_PORT = 10911
#: the wire dump's ports inside a namespace (RMQ_WIRE_DUMP=1)
NS_DUMP_PORTS = (19876, 20911)
WIRE_DUMP = Path(__file__).resolve().parent / "wire_dump.py"
#: lines of the wire dump printed at the end of a test (all of them are in logs/wire.jsonl)
DUMP_TAIL = 400


# --------------------------------------------------------------------------- installation checks


def _missing(what: str) -> None:
    """Fail (or skip, with RMQ_ALLOW_NO_CLIENTS=1) a test whose client cannot run here."""
    text = f"{what}; `make clients` installs the RocketMQ clients (needs npm and the registries once)"
    if os.environ.get("RMQ_ALLOW_NO_CLIENTS") == "1":
        pytest.skip(text)
    pytest.fail(text, pytrace=False)


def require_ali_ons() -> str:
    """The ``node`` executable, with ali-ons installed beside the driver scripts."""
    node = shutil.which("node")
    if node is None:
        _missing("node is not on PATH (ali-ons runs on Node.js)")
    if not (NODE_DIR / "node_modules" / "ali-ons" / "package.json").is_file():
        _missing(f"ali-ons is not installed under {NODE_DIR / 'node_modules'}")
    assert node is not None
    return node


def require_cpp_client() -> None:
    """The C++ client's environment, and the tools of a loopback-only namespace."""
    if not ROCKETMQ_PYTHON.is_file():
        _missing(f"the C++ client's environment {ROCKETMQ_PYTHON.parent.parent} is missing")
    probe = subprocess.run([str(ROCKETMQ_PYTHON), "-c", "import rocketmq.client"], capture_output=True, text=True)
    if probe.returncode != 0:
        _missing(f"{ROCKETMQ_PYTHON} cannot import rocketmq.client: {probe.stderr.strip()[-500:]}")
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            _missing(f"{tool} is not on PATH (the C++ client runs in a loopback-only network namespace)")


def require_node5_client() -> str:
    """The ``node`` executable, with rocketmq-client-nodejs installed beside producer5.js."""
    node = shutil.which("node")
    if node is None:
        _missing("node is not on PATH (rocketmq-client-nodejs runs on Node.js)")
    if not (NODE5_DIR / "node_modules" / "rocketmq-client-nodejs" / "package.json").is_file():
        _missing(f"rocketmq-client-nodejs is not installed under {NODE5_DIR / 'node_modules'}")
    assert node is not None
    return node


def require_python5_client() -> None:
    """The official Python 5.x client's environment (``.venv-rocketmq5``)."""
    if not ROCKETMQ5_PYTHON.is_file():
        _missing(f"the Python 5.x client's environment {ROCKETMQ5_PYTHON.parent.parent} is missing")
    probe = subprocess.run(
        [str(ROCKETMQ5_PYTHON), "-c", "import rocketmq; rocketmq.Producer"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        _missing(f"{ROCKETMQ5_PYTHON} cannot import rocketmq.Producer: {probe.stderr.strip()[-500:]}")


def require_rmqlog() -> None:
    if not RMQLOG.is_file():
        pytest.fail(
            f"the rmqlog command is not beside {sys.executable} (install the project: make .venv/.installed)",
            pytrace=False,
        )


# --------------------------------------------------------------------------- child processes


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick for port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Child:
    """A child process whose stdout and stderr lines are collected by a thread each (stderr is
    also copied to ``LOG_DIR/NAME.stderr``); pipes read as they fill never block the child.

    :meth:`wait_line` waits for a stdout line, :meth:`wait_stderr` for a stderr line (the
    Condition is notified per line and at the end of each stream); :meth:`stop` sends SIGTERM to
    the child's own PID, then SIGKILL after
    ``STOP_TIMEOUT``. Children may share one Condition (``cond``: a :class:`Cluster`'s), which
    every line of any of them notifies.
    """

    def __init__(
        self,
        name: str,
        argv: list[str],
        *,
        env: dict[str, str],
        log_dir: Path,
        cwd: Path | None = None,
        stdin: bool = False,
        cond: threading.Condition | None = None,
    ) -> None:
        self.name = name
        self.argv = argv
        self.stderr_path = log_dir / f"{name}.stderr"
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            errors="replace",
        )
        self.lines: list[str] = []
        self.err_lines: list[str] = []
        self.ended = False
        self.err_ended = False
        # shared by the children of one Cluster, so that a wait can watch all of them
        self._cond = cond if cond is not None else threading.Condition()
        self._reader = threading.Thread(target=self._read, name=f"stdout of {name}", daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_stderr, name=f"stderr of {name}", daemon=True)
        self._err_reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self.ended = True
            self._cond.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        with open(self.stderr_path, "w") as copy:
            for line in self.proc.stderr:
                copy.write(line)
                copy.flush()
                with self._cond:
                    self.err_lines.append(line.rstrip("\n"))
                    self._cond.notify_all()
        with self._cond:
            self.err_ended = True
            self._cond.notify_all()

    def stderr_tail(self, limit: int = 4000) -> str:
        with self._cond:
            text = "\n".join(self.err_lines)
        return text[-limit:]

    def wait_stderr(self, predicate: Callable[[str], bool], what: str, timeout: float = EVENT_TIMEOUT) -> str:
        """The first stderr line ``predicate`` accepts (a server's log line, say)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            i = 0
            while True:
                while i < len(self.err_lines):
                    if predicate(self.err_lines[i]):
                        return self.err_lines[i]
                    i += 1
                left = deadline - time.monotonic()
                if self.err_ended or left <= 0:
                    break
                self._cond.wait(left)
        why = "its stderr ended first" if self.err_ended else f"none within {timeout:.0f} s"
        raise AssertionError(f"waiting for {what} in the stderr of {self.name}: {why}\n{self.describe()}")

    def describe(self) -> str:
        code = self.proc.poll()
        state = "running" if code is None else f"exited with {code}"
        with self._cond:
            printed = "\n  ".join(self.lines[-40:])
        return (
            f"{self.name} (pid {self.pid}, {state}): {' '.join(self.argv)}\n stdout (last lines):\n  {printed}\n"
            f" stderr (end):\n{self.stderr_tail()}"
        )

    def wait_line(
        self, predicate: Callable[[str], bool], what: str, timeout: float = EVENT_TIMEOUT, start: int = 0
    ) -> tuple[int, str]:
        """The first line at index >= ``start`` that ``predicate`` accepts, with its index."""
        deadline = time.monotonic() + timeout
        with self._cond:
            i = start
            while True:
                while i < len(self.lines):
                    if predicate(self.lines[i]):
                        return i, self.lines[i]
                    i += 1
                left = deadline - time.monotonic()
                if self.ended or left <= 0:
                    break
                self._cond.wait(left)
        if self.ended:  # its stdout closed: let it finish exiting, so that the report has its exit code and stderr
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(STOP_TIMEOUT)
            self._err_reader.join(STOP_TIMEOUT)
        why = "it ended first" if self.ended else f"none within {timeout:.0f} s"
        raise AssertionError(f"waiting for {what} from {self.name}: {why}\n{self.describe()}")

    def write(self, line: str) -> None:
        assert self.proc.stdin is not None, f"{self.name} was started without stdin"
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def wait_exit(self, timeout: float = EVENT_TIMEOUT) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not exit within {timeout:.0f} s\n{self.describe()}") from None
        self._reader.join(timeout)
        self._err_reader.join(timeout)
        return code

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Stop the child by its PID (``sig``, then SIGKILL); its exit code (negative: a signal)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.close_stdin()
        self._reader.join(STOP_TIMEOUT)
        self._err_reader.join(STOP_TIMEOUT)
        return self.proc.returncode


class Client(Child):
    """A client driver script: every stdout line is a JSON object with an ``event``."""

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        with self._cond:
            lines = list(self.lines)
        out = [self._parse(line) for line in lines]
        return [e for e in out if kind is None or e.get("event") == kind]

    def _parse(self, line: str) -> dict[str, Any]:
        try:
            event = json.loads(line)
        except ValueError:
            raise AssertionError(f"{self.name} printed a line that is not JSON: {line!r}\n{self.describe()}") from None
        if not isinstance(event, dict) or "event" not in event:
            raise AssertionError(f"{self.name} printed a line that is not an event: {line!r}")
        return event

    def wait_event(
        self,
        kind: str,
        what: str | None = None,
        *,
        where: Callable[[dict[str, Any]], bool] | None = None,
        timeout: float = EVENT_TIMEOUT,
        start: int = 0,
    ) -> dict[str, Any]:
        def match(line: str) -> bool:
            e = self._parse(line)
            return e["event"] == kind and (where is None or where(e))

        _, line = self.wait_line(match, what or f"event {kind!r}", timeout, start)
        return self._parse(line)

    def wait_events(
        self, kind: str, n: int, what: str | None = None, timeout: float = EVENT_TIMEOUT
    ) -> list[dict[str, Any]]:
        """Wait until ``n`` events of ``kind`` were printed; all of them (possibly more than ``n``)."""
        count = [0]

        def match(line: str) -> bool:
            if self._parse(line)["event"] == kind:
                count[0] += 1
            return count[0] >= n

        self.wait_line(match, what or f"{n} events {kind!r}", timeout)
        return self.events(kind)

    def failures(self) -> list[dict[str, Any]]:
        return self.events("failed")


# --------------------------------------------------------------------------- the namespace


class Netns:
    """A loopback-only network namespace, held by a ``sleep`` child until :meth:`close`.

    ``unshare -n`` needs CAP_SYS_ADMIN (root on CI); a machine that refuses it fails the test.
    """

    def __init__(self, log_dir: Path) -> None:
        self.holder = Child(
            "netns",
            ["unshare", "-n", "sh", "-c", "ip link set lo up && echo up && exec sleep 86400"],
            env=dict(os.environ),
            log_dir=log_dir,
        )
        self.holder.wait_line(lambda line: line == "up", "the loopback-only namespace", START_TIMEOUT)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace (``nsenter`` execs it: its PID is the command's)."""
        return ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", "--", *argv]

    def close(self) -> None:
        self.holder.stop(signal.SIGKILL)


# --------------------------------------------------------------------------- the cluster


@dataclass
class Cluster:
    """A name server and one broker over a fresh store root, inside ``netns`` if given.

    ``topics`` are created in the store (queue counts) before the broker opens it, so that
    consumers find their routes at once; other topics are created by the first send through
    ``TBW102`` (``autoCreateTopicEnable``). ``conf`` adds or overrides broker.conf keys.
    ``acl``: the text of a ``plain_acl.yml``; given, the broker runs with ``aclEnable=true`` and
    reads it from a ``ROCKETMQ_HOME`` of the cluster's own (clients sign with the ``accessKey``
    and ``secretKey`` options of their scripts).

    With ``RMQ_WIRE_DUMP=1`` the clients reach the servers through ``wire_dump.py``, which logs
    every frame (code, opaque, flag, remark, extFields, body size) as a JSON line: printed at the
    end of the test (the last ``DUMP_TAIL``) and kept in ``logs/wire.jsonl``.
    """

    tmp: Path
    netns: Netns | None = None
    topics: dict[str, int] = field(default_factory=dict)
    conf: dict[str, str] = field(default_factory=dict)
    acl: str | None = None
    children: list[Child] = field(default_factory=list)
    #: notified by every line any child prints (see :meth:`wait_for`)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        require_rmqlog()
        self.root = self.tmp / "store"
        self.home = self.tmp / "home"  # HOME of every child: the C++ client logs under $HOME/logs
        self.logs = self.tmp / "logs"
        for d in (self.home, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        self.acl_home = self.tmp / "rmqhome"
        if self.acl is not None:
            (self.acl_home / "conf").mkdir(parents=True, exist_ok=True)
            (self.acl_home / "conf" / "plain_acl.yml").write_text(self.acl)
        if self.netns is None:
            self.namesrv_port, self.broker_port = free_port(), free_port()
        else:
            self.namesrv_port, self.broker_port = NS_NAMESRV_PORT, NS_BROKER_PORT
        self.namesrv_addr = f"127.0.0.1:{self.namesrv_port}"
        self.broker_addr = f"127.0.0.1:{self.broker_port}"
        #: the name server the clients are given (the wire dump's port when there is one)
        self.client_namesrv_addr = self.namesrv_addr
        self.dump: Child | None = None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["HOME"] = str(self.home)
        env.pop("ROCKETMQ_HOME", None)  # no ACL file from the machine
        if self.acl is not None:
            env["ROCKETMQ_HOME"] = str(self.acl_home)
        return env

    def argv(self, argv: list[str]) -> list[str]:
        return self.netns.wrap(argv) if self.netns is not None else argv

    def broker_conf(self) -> Path:
        values = {
            "brokerClusterName": "DefaultCluster",
            "brokerName": "broker-a",
            "brokerId": "0",
            "listenPort": str(self.broker_port),
            "namesrvAddr": self.namesrv_addr,
            "brokerIP1": "127.0.0.1",
            "autoCreateTopicEnable": "true",
            "longPollingEnable": "true",
            "flushDiskType": "ASYNC_FLUSH",
        }
        if self.acl is not None:
            values["aclEnable"] = "true"
        values.update(self.conf)
        path = self.tmp / "broker.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        return path

    def start(self) -> Cluster:
        if self.topics:
            import rmqlog

            store = rmqlog.MessageStore.open(self.root)
            try:
                for topic, queues in self.topics.items():
                    store.create_topic(topic, queues)
            finally:
                store.close()
        namesrv = self._server("namesrv", [str(RMQLOG), "namesrv", "--listen", self.namesrv_addr])
        conf = self.broker_conf()
        self._server("broker", self._broker_argv(conf))
        # the broker is ready before its first registration is done: until then the name server
        # has no route for its topics, and a client that asks gets TOPIC_NOT_EXIST
        name = javaproperties.loads(conf.read_text())["brokerName"]
        namesrv.wait_stderr(lambda line: f"broker registered: {name} " in line, "the broker's first registration")
        if os.environ.get("RMQ_WIRE_DUMP") == "1":
            ports = NS_DUMP_PORTS if self.netns is not None else (free_port(), free_port())
            listen = [f"127.0.0.1:{p}" for p in ports]
            self.dump = self._server(
                "wire-dump", [sys.executable, str(WIRE_DUMP), listen[0], self.namesrv_addr, listen[1], self.broker_addr]
            )
            self.client_namesrv_addr = listen[0]
        return self

    def _broker_argv(self, conf: Path) -> list[str]:
        return [
            str(RMQLOG),
            "broker",
            str(self.root),
            "-c",
            str(conf),
            "--listen",
            self.broker_addr,
            "--namesrv",
            self.namesrv_addr,
        ]

    def _server(self, name: str, argv: list[str]) -> Child:
        child = Child(name, self.argv(argv), env=self.env(), log_dir=self.logs, cwd=self.tmp, cond=self.cond)
        self.children.append(child)
        child.wait_line(lambda line: bool(line.strip()), f"the ready line of rmqlog {name}", START_TIMEOUT)
        return child

    def server(self, name: str) -> Child:
        """The newest server started as ``name`` (after :meth:`restart_broker`, the new broker)."""
        return next(c for c in reversed(self.children) if c.name == name)

    def restart_broker(self, sig: int = signal.SIGKILL) -> int | None:
        """Stop the broker by its PID with ``sig`` (``kill -9`` by default: nothing flushed, no
        clean close) and start it again over the same store, conf and ports, waited for until
        it prints its ready line; the old one's exit code. Its registration is not waited for
        (a name server may still hold the killed one's)."""
        code = self.server("broker").stop(sig)
        self._server("broker", self._broker_argv(self.tmp / "broker.conf"))
        return code

    def stop_servers(self) -> dict[str, int | None]:
        """Stop the broker, then the name server (SIGTERM: a clean stop); their exit codes."""
        codes = {}
        for name in ("wire-dump", "broker", "namesrv"):
            for c in self.children:
                if c.name == name:
                    codes[name] = c.stop()
        return codes

    # ------------------------------------------------------------------ clients

    def _client(self, name: str, argv: list[str], *, stdin: bool = False) -> Client:
        child = Client(
            name, self.argv(argv), env=self.env(), log_dir=self.logs, cwd=self.tmp, stdin=stdin, cond=self.cond
        )
        self.children.append(child)
        return child

    def ali_ons_producer(self, name: str = "ali-ons-producer", group: str = "PG_ALI_ONS", **extra: Any) -> Client:
        """An ali-ons producer reading messages on stdin (:meth:`Client.write` of :func:`message_line`);
        ``extra``: more options of producer.js (``accessKey``, ``secretKey``, ...)."""
        node = require_ali_ons()
        opts = {"nameSrv": self.client_namesrv_addr, "group": group, **extra}
        return self._client(name, [node, str(NODE_PRODUCER), json.dumps(opts)], stdin=True)

    def ali_ons_consumer(
        self, name: str, group: str, topic: str, *, model: str = "CLUSTERING", count: int = 0, **opts: Any
    ) -> Client:
        """An ali-ons push consumer (options of consumer.js: ``suspendMillis``, ``rebalanceMillis``, ...)."""
        node = require_ali_ons()
        all_opts = {
            "nameSrv": self.client_namesrv_addr,
            "group": group,
            "topic": topic,
            "model": model,
            "count": count,
            "suspendMillis": 2000,
            "rebalanceMillis": 1000,
            "pollNameServerMillis": 1000,
            **opts,
        }
        return self._client(name, [node, str(NODE_CONSUMER), json.dumps(all_opts)])

    def cpp(self, name: str, command: str, *, stdin: bool = False, **opts: Any) -> Client:
        """``cpp_client.py COMMAND`` with the C++ client's Python (inside the namespace, if any)."""
        require_cpp_client()
        all_opts = {"nameSrv": self.client_namesrv_addr, **opts}
        return self._client(name, [str(ROCKETMQ_PYTHON), str(CPP_CLIENT), command, json.dumps(all_opts)], stdin=stdin)

    def python5(self, name: str, command: str, *, stdin: bool = False, **opts: Any) -> Client:
        """``python5_client.py COMMAND`` with the official Python 5.x client's Python; its access
        point is the broker's gRPC endpoint (``grpcListenPort`` in ``conf``)."""
        require_python5_client()
        all_opts = {"endpoints": f"127.0.0.1:{self.conf['grpcListenPort']}", **opts}
        return self._client(
            name, [str(ROCKETMQ5_PYTHON), str(PYTHON5_CLIENT), command, json.dumps(all_opts)], stdin=stdin
        )

    def node5(self, name: str, *, consumer: bool = False, **opts: Any) -> Client:
        """``producer5.js`` (the official Node.js 5.x client's producer; with ``consumer``:
        ``consumer5.js``, its simple consumer) reading messages or commands on stdin; its access
        point is the broker's gRPC endpoint (``grpcListenPort`` in ``conf``)."""
        node = require_node5_client()
        all_opts = {"endpoints": f"127.0.0.1:{self.conf['grpcListenPort']}", **opts}
        script = NODE5_CONSUMER if consumer else NODE5_PRODUCER
        return self._client(name, [node, str(script), json.dumps(all_opts)], stdin=True)

    def push5(self, name: str, **opts: Any) -> Client:
        """``push5.js``: the official Node.js 5.x client's PushConsumer (options ``group``,
        ``topic``, ``fail``), consuming until its stdin is closed."""
        node = require_node5_client()
        all_opts = {"endpoints": f"127.0.0.1:{self.conf['grpcListenPort']}", **opts}
        return self._client(name, [node, str(NODE5_PUSH), json.dumps(all_opts)], stdin=True)

    def ours(self, name: str, script: Path, *args: str) -> Client:
        """``script`` run by the project's Python (our own client), inside the namespace if any."""
        return self._client(name, [sys.executable, str(script), *args])

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float = EVENT_TIMEOUT) -> None:
        """Wait until ``predicate()`` holds; it is checked again after every line any child prints."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    states = "\n".join(c.describe() for c in self.children if isinstance(c, Client))
                    raise AssertionError(f"waiting for {what}: not within {timeout:.0f} s\n{states}")
                self.cond.wait(left)

    def close(self) -> None:
        """Stop every child still running (clients first), and print each one's stderr."""
        for c in reversed(self.children):
            c.stop()
        for c in self.children:
            tail = c.stderr_tail()
            if tail.strip():
                print(f"--- stderr of {c.name} (pid {c.pid}, exit {c.proc.returncode}):\n{tail}")
        if self.dump is not None:
            path = self.logs / "wire.jsonl"
            path.write_text("".join(line + "\n" for line in self.dump.lines[1:]))
            shown = self.dump.lines[1:][-DUMP_TAIL:]
            print(f"--- wire dump ({len(self.dump.lines) - 1} frames, all in {path}; the last {len(shown)}):")
            print("\n".join(shown))


@contextlib.contextmanager
def cluster(
    tmp: Path,
    *,
    netns: bool = False,
    topics: dict[str, int] | None = None,
    conf: dict[str, str] | None = None,
    acl: str | None = None,
) -> Iterator[Cluster]:
    """A started :class:`Cluster` (in a namespace of its own with ``netns``), stopped at the end."""
    ns = Netns(tmp) if netns else None
    c = Cluster(tmp, ns, dict(topics or {}), dict(conf or {}), acl)
    try:
        yield c.start()
    finally:
        c.close()
        if ns is not None:
            ns.close()


# --------------------------------------------------------------------------- messages


def message(
    topic: str, i: int, *, tags: str | None = None, keys: list[str] | None = None, body: str | None = None
) -> dict[str, Any]:
    """A message spec as the driver scripts read it (``{"topic", "tags", "keys", "body"}``)."""
    return {
        "topic": topic,
        "tags": tags if tags is not None else f"Tag{i % 3}",
        "keys": keys if keys is not None else [f"key-{topic}-{i}"],
        "body": body if body is not None else f"body {i} of {topic}",
    }


def big_body(i: int, size: int = 6000) -> str:
    """A text body of ``size`` bytes that zlib shrinks (both clients compress 4 KiB and more)."""
    unit = f"message {i}: the quick brown fox jumps over the lazy dog. "
    return (unit * (size // len(unit) + 1))[:size]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def message_line(spec: dict[str, Any] | list[dict[str, Any]]) -> str:
    return json.dumps(spec)


def send_all(producer: Client, specs: Iterable[Any], kind: str = "sent") -> list[dict[str, Any]]:
    """Write ``specs`` (messages; for ``send_batch``, lists of them) to a producer's stdin, one a
    line, and wait for as many answers (``kind`` or "failed"); fails the test on a failed send."""
    before = len(producer.events(kind)) + len(producer.failures())
    n = 0
    for spec in specs:
        producer.write(message_line(spec))
        n += 1

    def answered(line: str) -> bool:
        return len(producer.events(kind)) + len(producer.failures()) >= before + n

    producer.wait_line(answered, f"{n} send results")
    failures = producer.failures()
    assert not failures, f"sends failed: {failures}\n{producer.describe()}"
    return producer.events(kind)[-n:] if n else []


def expected(specs: list[dict[str, Any]]) -> list[tuple[str | None, str | None, str]]:
    """What a consumer should print for ``specs``: (tags, keys as the KEYS property, body hash)."""
    return [(s.get("tags") or None, " ".join(s.get("keys") or []) or None, sha256(s["body"])) for s in specs]


def received(events: list[dict[str, Any]]) -> list[tuple[str | None, str | None, str]]:
    return [(e["tags"], e["keys"], e["bodySha256"]) for e in events]
