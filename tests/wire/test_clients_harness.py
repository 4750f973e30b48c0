"""The real clients' installation and harness on their own, without a broker: the pinned
versions are what runs, the C++ and Python 5.x clients stay out of the project's environment, the namespace
is loopback-only, the scripts fail cleanly when nothing listens, and a server that does not
start fails the test with its stderr."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

from . import real_clients as rcl


def test_ali_ons_is_the_locked_version() -> None:
    rcl.require_ali_ons()
    lock = json.loads((rcl.NODE_DIR / "package-lock.json").read_text())
    locked = lock["packages"]["node_modules/ali-ons"]
    assert locked["version"] == "3.12.0" and locked["integrity"].startswith("sha512-")
    installed = json.loads((rcl.NODE_DIR / "node_modules" / "ali-ons" / "package.json").read_text())
    assert installed["version"] == "3.12.0"


def test_the_cpp_client_has_an_environment_of_its_own() -> None:
    rcl.require_cpp_client()
    out = subprocess.run(
        [
            str(rcl.ROCKETMQ_PYTHON),
            "-c",
            "import importlib.metadata as m, rocketmq.client as c, os; "
            "print(m.version('rocketmq'), os.path.exists(os.path.join(os.path.dirname(c.__file__), 'librocketmq.so')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["0.4.4", "True"]
    assert importlib.util.find_spec("rocketmq") is None, "the C++ client leaked into the project's environment"


def test_the_node5_client_is_the_locked_version() -> None:
    rcl.require_node5_client()
    lock = json.loads((rcl.NODE5_DIR / "package-lock.json").read_text())
    locked = lock["packages"]["node_modules/rocketmq-client-nodejs"]
    assert locked["version"] == "1.0.8" and locked["integrity"].startswith("sha512-")
    installed = json.loads((rcl.NODE5_DIR / "node_modules" / "rocketmq-client-nodejs" / "package.json").read_text())
    assert installed["version"] == "1.0.8"


def test_the_python5_client_has_an_environment_of_its_own() -> None:
    rcl.require_python5_client()
    out = subprocess.run(
        [
            str(rcl.ROCKETMQ5_PYTHON),
            "-c",
            "import importlib.metadata as m, rocketmq; print(m.version('rocketmq-python-client'), "
            "rocketmq.Producer.__module__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["5.1.2", "rocketmq.v5.producer.producer"]
    assert importlib.util.find_spec("rocketmq") is None, "the Python 5.x client leaked into the project's environment"


@pytest.mark.parametrize(
    "args, why",
    [
        (["pull", "{}"], "a command and its options"),
        (["consume"], "a command and its options"),
        (["consume", "{}"], "consume needs endpoints, group, topic"),
        (["receive", '{"endpoints": "127.0.0.1:1", "group": "G"}'], "receive needs topic"),
        (["produce", "[1]"], "options are not a JSON object"),
        (["produce", "{"], "options are not JSON"),
    ],
)
def test_python5_client_refuses_bad_arguments(args: list[str], why: str) -> None:
    rcl.require_python5_client()
    out = subprocess.run([str(rcl.ROCKETMQ5_PYTHON), str(rcl.PYTHON5_CLIENT), *args], capture_output=True, text=True)
    assert out.returncode == 2 and "usage: python5_client.py" in out.stderr and why in out.stderr, out.stderr
    assert out.stdout == "" and "Traceback" not in out.stderr


def test_the_namespace_has_only_loopback(tmp_path: Path) -> None:
    rcl.require_cpp_client()
    ns = rcl.Netns(tmp_path)
    try:
        links = subprocess.run(ns.wrap(["ip", "-o", "link"]), capture_output=True, text=True, check=True).stdout
        routes = subprocess.run(ns.wrap(["ip", "-o", "route"]), capture_output=True, text=True, check=True).stdout
    finally:
        ns.close()
    assert [line.split(":")[1].strip() for line in links.splitlines()] == ["lo"]
    assert "UP" in links.split("<", 1)[1].split(">", 1)[0]
    assert routes.strip() == "", "no route leaves the namespace"


def test_ali_ons_producer_reports_a_refused_connection(tmp_path: Path) -> None:
    node = rcl.require_ali_ons()
    opts = {"nameSrv": f"127.0.0.1:{rcl.free_port()}"}
    p = rcl.Client(
        "producer", [node, str(rcl.NODE_PRODUCER), json.dumps(opts)], env=dict(os.environ), log_dir=tmp_path, stdin=True
    )
    try:
        p.wait_event("ready")
        p.write(json.dumps(rcl.message("T", 0)))
        failed = p.wait_event("failed")
        p.close_stdin()
        p.wait_event("closed")
        assert p.wait_exit() == 0
    finally:
        p.stop()
    assert failed["i"] == 0 and "ECONNREFUSED" in failed["message"]


@pytest.mark.parametrize("line", ["not json", json.dumps({"topic": "T"})])
def test_ali_ons_producer_refuses_a_bad_message_line(tmp_path: Path, line: str) -> None:
    node = rcl.require_ali_ons()
    p = rcl.Client(
        "producer",
        [node, str(rcl.NODE_PRODUCER), json.dumps({"nameSrv": "127.0.0.1:1"})],
        env=dict(os.environ),
        log_dir=tmp_path,
        stdin=True,
    )
    try:
        p.wait_event("ready")
        p.write(line)
        assert p.wait_exit() == 2
        assert "bad message line 0" in p.stderr_tail()
    finally:
        p.stop()


def test_cpp_client_reports_a_missing_route(tmp_path: Path) -> None:
    """send_sync with no name server in the namespace: a "failed" answer, then a clean exit."""
    rcl.require_cpp_client()
    ns = rcl.Netns(tmp_path)
    env = {**os.environ, "HOME": str(tmp_path)}
    argv = [str(rcl.ROCKETMQ_PYTHON), str(rcl.CPP_CLIENT), "send_sync", json.dumps({"nameSrv": "127.0.0.1:9876"})]
    p = rcl.Client("send-sync", ns.wrap(argv), env=env, log_dir=tmp_path, stdin=True)
    try:
        p.wait_event("ready")
        p.write(json.dumps(rcl.message("T", 0)))
        failed = p.wait_event("failed")
        p.close_stdin()
        p.wait_event("closed")
        assert p.wait_exit() == 0
    finally:
        p.stop()
        ns.close()
    assert "No route info of this topic: T" in failed["message"]


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["push"], "usage: cpp_client.py"),
        (["pull", "{"], "OPTIONS_JSON"),
        (["push", json.dumps({"nameSrv": "127.0.0.1:1"})], "options group and topic are required"),
    ],
)
def test_cpp_client_refuses_bad_arguments(args: list[str], text: str) -> None:
    rcl.require_cpp_client()
    out = subprocess.run([str(rcl.ROCKETMQ_PYTHON), str(rcl.CPP_CLIENT), *args], capture_output=True, text=True)
    assert out.returncode == 2 and text in out.stderr and out.stdout == ""


def test_a_server_that_does_not_start_fails_with_its_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "rmqlog"
    fake.write_text('#!/bin/sh\necho "no such command: $1" >&2\nexit 3\n')
    fake.chmod(0o755)
    monkeypatch.setattr(rcl, "RMQLOG", fake)
    with pytest.raises(AssertionError) as info, rcl.cluster(tmp_path / "c"):
        pass
    text = str(info.value)
    assert "the ready line of rmqlog namesrv" in text and "exited with 3" in text
    assert "no such command: namesrv" in text
