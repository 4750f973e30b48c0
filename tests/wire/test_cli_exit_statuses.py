"""The network commands fail as the store's commands do (rmqlog.admin.exits, rmqlog.admin.render):
every family (reading over the wire, admin against one broker, ``broker-status``, ``console``)
with a bad argument exits 2, against a name server or broker nobody answers for exits 3, both
with ``--json`` too: nothing on stdout, one ``rmqlog:`` line on stderr (argparse's usage lines
before it) and no traceback."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqnet import cli
from tests.wire.real_clients import free_port

OFFSET_MSG_ID = "7F00000100002A9F0000000000000000"  # 127.0.0.1:10911, commitlog offset 0


@pytest.fixture(scope="module")
def dead() -> str:
    """An address on 127.0.0.1 where nothing listens: every connection is refused."""
    return f"127.0.0.1:{free_port()}"


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str) -> str:
    """The one ``rmqlog:`` line of ``err``; nothing else but argparse's usage before it."""
    assert "Traceback" not in err, err
    ours = [line for line in err.splitlines() if line.startswith("rmqlog:")]
    assert len(ours) == 1, err
    others = [line for line in err.splitlines() if not line.startswith("rmqlog:")]
    assert all(line.startswith(("usage:", " ")) for line in others), err
    return ours[0]


READING = [
    ["info"],
    ["topic-status", "T"],
    ["lag", "G"],
    ["consumer-progress", "G"],
    ["read", "T", "0"],
    ["query", "T", "--key", "k"],
    ["get", "--id", OFFSET_MSG_ID, "--topic", "T"],
    ["dlq", "G"],
    ["dead-letters", "G"],
    ["pop-status", "--group", "G", "--topic", "T"],
]
ADMIN = [
    ["topic-list"],
    ["topic-create", "T"],
    ["topic-delete", "T"],
    ["topic-stats", "T"],
    ["consumer-status", "G"],
    ["broker-config"],
    ["broker-config", "--set", "k=v"],
    ["group-list"],
    ["group-create", "G"],
    ["group-delete", "G"],
]


def test_every_network_command_is_dispatched_and_tried_here() -> None:
    from rmqnet.commands import broker_admin, reading

    assert sorted(reading.HANDLERS) == sorted([*cli.WIRE_READING, "pop-status"]) == sorted(a[0] for a in READING)
    assert sorted(broker_admin.HANDLERS) == sorted(cli.WIRE_ADMIN) == sorted({a[0] for a in ADMIN})


@pytest.mark.parametrize("json", [[], ["--json"]], ids=["text", "json"])
@pytest.mark.parametrize("argv", READING, ids=lambda a: a[0])
def test_a_reading_command_without_a_name_server_exits_3(
    capsys: pytest.CaptureFixture[str], dead: str, argv: list[str], json: list[str]
) -> None:
    code, out, err = _run(capsys, [*argv, "--namesrv", dead, "--timeout", "2", *json])
    assert (code, out) == (3, "")
    assert _one_error_line(err).startswith("rmqlog: the cluster cannot be asked: ")


@pytest.mark.parametrize("json", [[], ["--json"]], ids=["text", "json"])
@pytest.mark.parametrize("argv", ADMIN, ids=lambda a: "-".join(a[:2]))
def test_an_admin_command_without_its_broker_exits_3(
    capsys: pytest.CaptureFixture[str], dead: str, argv: list[str], json: list[str]
) -> None:
    code, out, err = _run(capsys, [*argv, "--broker", dead, "--timeout", "2", *json])
    assert (code, out) == (3, "")
    assert _one_error_line(err).startswith(f"rmqlog: the broker at {dead} cannot be asked: ")


@pytest.mark.parametrize("json", [[], ["--json"]], ids=["text", "json"])
def test_broker_status_without_a_name_server_exits_3(
    capsys: pytest.CaptureFixture[str], dead: str, json: list[str]
) -> None:
    code, out, err = _run(capsys, ["broker-status", "--namesrv", dead, "--timeout", "2", *json])
    assert (code, out) == (3, "")
    assert _one_error_line(err).startswith(f"rmqlog: the name server at {dead} cannot be asked: ")


BAD = [
    # argparse's refusals: the usage, then one line naming the command
    (["topic-status", "--namesrv", "nohostport", "T"], "rmqlog: topic-status: argument --namesrv: "),
    (["read", "T", "x", "--namesrv", "127.0.0.1:9876"], "rmqlog: read: argument queue: "),
    (["lag", "--namesrv", "127.0.0.1:9876"], "rmqlog: lag: the following arguments are required: group"),
    (["query", "T", "--namesrv", "127.0.0.1:9876", "--max", "0"], "rmqlog: query: argument --max: "),
    (["topic-create", "T", "--broker", "127.0.0.1:10911", "--queues", "0"], "rmqlog: topic-create: argument --queues"),
    (["topic-list"], "rmqlog: topic-list: the following arguments are required: --broker"),
    (["group-create", "G", "--broker", "127.0.0.1:10911", "--retry-max-times", "-1"], "rmqlog: group-create: "),
    (["broker-status", "--timeout", "x", "--namesrv", "127.0.0.1:9876"], "rmqlog: broker-status: argument --timeout"),
    (["broker-status"], "rmqlog: broker-status: the following arguments are required: --namesrv"),
    # refused after parsing, before any request
    (["topic-list", "--broker", "127.0.0.1:10911", "--access-key", "k"], "rmqlog: "),
    (["info", "--namesrv", "127.0.0.1:9876", "--secret-key", "s"], "rmqlog: "),
    (["get", "--id", "nonsense", "--namesrv", "127.0.0.1:1"], "rmqlog: not a message id: 'nonsense'"),
    (["query", "*", "--key", "k", "--namesrv", "127.0.0.1:1"], "rmqlog: a query by store time"),
]


@pytest.mark.parametrize("json", [[], ["--json"]], ids=["text", "json"])
@pytest.mark.parametrize(("argv", "said"), BAD, ids=lambda a: a[0] if isinstance(a, list) else None)
def test_a_bad_argument_exits_2_in_every_family(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str, json: list[str]
) -> None:
    code, out, err = _run(capsys, [*argv, *json])
    assert (code, out) == (2, "")
    assert _one_error_line(err).startswith(said), err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["console", "--json", "--namesrv", "127.0.0.1:9876"], "rmqlog: console: unrecognized arguments: --json"),
        (["console", "--listen", "nohost", "--namesrv", "127.0.0.1:9876"], "rmqlog: console: argument --listen: "),
        (["console", "--path", "/nonexistent", "--admin"], "rmqlog: --admin needs --namesrv"),
    ],
)
def test_a_bad_console_argument_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str], said: str) -> None:
    code, out, err = _run(capsys, argv)  # (the console takes no --json: it serves pages)
    assert (code, out) == (2, "")
    assert _one_error_line(err).startswith(said), err


@pytest.fixture
def taken() -> Iterator[str]:
    """An address on 127.0.0.1 that this test listens on: a server cannot bind it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield f"127.0.0.1:{s.getsockname()[1]}"


def test_a_console_that_cannot_listen_exits_3(capsys: pytest.CaptureFixture[str], dead: str, taken: str) -> None:
    code, out, err = _run(capsys, ["console", "--namesrv", dead, "--listen", taken])
    assert (code, out) == (3, "")
    assert _one_error_line(err).startswith(f"rmqlog: cannot listen on {taken}: ")


def test_a_console_over_no_store_exits_2_naming_the_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = _run(capsys, ["console", "--path", str(tmp_path / "none")])
    assert (code, out) == (2, "")  # a ROOT that holds no store, as the store's commands say
    assert _one_error_line(err).startswith(f"rmqlog: cannot open {tmp_path / 'none'}: ")
