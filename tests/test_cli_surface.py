"""The ``rmqlog`` command as a new user meets it: ``--help`` lists
every command, the network ones too; a reading command's help names ``--namesrv``; help text
shows ``%DLQ%`` as written; ``query --id`` takes the offset msgId a send's result and ali-ons
print; and what finds nothing says so on stderr, with exit status 1."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import rmqlog
from rmqnet.cli import WIRE_READING, main


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_help_lists_the_network_and_admin_commands(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(capsys)
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("    ") and line.split()}
    for name in (
        "namesrv",
        "broker",
        "topic-create",
        "topic-list",
        "topic-delete",
        "topic-stats",
        "consumer-status",
        "broker-config",
        "info",
        "read",
        "dlq",
    ):
        assert name in listed, name


@pytest.mark.parametrize("command", sorted({"info", "topic-status", "lag", "read", "get", "query", "dlq"}))
def test_every_reading_command_s_help_names_namesrv(capsys: pytest.CaptureFixture[str], command: str) -> None:
    assert command in WIRE_READING
    assert "--namesrv ADDRS" in _help(capsys, command)


def test_dlq_help_shows_the_topic_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(capsys, "dlq")
    assert "%DLQ%GROUP" in out and "%%" not in out


@pytest.fixture
def sent(tmp_path: Path) -> tuple[Path, str, str]:
    """A store with one message of ``orders``: (root, its offset msgId, its client msgId)."""
    with rmqlog.MessageStore.open(tmp_path, rmqlog.StoreConfig(store_host="127.0.0.1:10911")) as s:
        s.put_batch(
            pa.table(
                {
                    "topic": ["orders", "other"],
                    "body": [b"find me", b"elsewhere"],
                    "keys": [["k-1"], None],
                    "queueId": pa.array([0, 0], pa.int32()),
                }
            )
        )
        s.dispatch()
        row = s.read_queue("orders", 0, 0, 1).to_pylist()[0]
    return tmp_path, row["msgId"], dict(row["properties"])["UNIQ_KEY"]


def test_query_by_an_offset_msg_id_finds_it(sent: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    root, offset_id, uniq = sent
    assert offset_id != uniq
    for msg_id in (offset_id, uniq):
        assert main(["query", str(root), "orders", "--id", msg_id]) == 0, capsys.readouterr().err
        (line,) = capsys.readouterr().out.splitlines()
        assert json.loads(line)["body"] == "find me"


def test_not_found_is_said_with_status_1(sent: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    root, offset_id, _ = sent
    assert main(["query", str(root), "orders", "--key", "no-such-key"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "no message with key 'no-such-key' in topic 'orders'" in err
    assert main(["query", str(root), "other", "--id", offset_id]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "is a message of topic 'orders', not of 'other'" in err
    far = offset_id[:16] + f"{1 << 40:016X}"
    assert main(["get", str(root), "--id", far]) == 1
    out, err = capsys.readouterr()
    assert out == "" and f"no message with msgId {far}" in err and f"commitlog offset {1 << 40}" in err
    assert main(["get", str(root), "--offset", str(1 << 40)]) == 1
    assert f"no message at commitlog offset {1 << 40}" in capsys.readouterr().err
