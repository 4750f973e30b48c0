"""``rmqlog info|topic-status|lag --namesrv``'s refusals, in-process (the cluster tests run the
commands against brokers across test hosts): what cannot be asked is status 3 naming why, a
wrong argument 2, and the store's own commands still get a ROOT without --namesrv."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import small_store_config

import rmqlog
from rmqlog.admin import jsonl, render
from rmqnet.cli import main


def test_no_name_server_answering_is_status_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topic-status", "--namesrv", "127.0.0.1:1", "T"]) == 3
    assert "rmqlog: the cluster cannot be asked" in capsys.readouterr().err


def test_wrong_arguments_are_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topic-status", "--namesrv", "nohostport", "T"]) == 2
    assert "is not host:port" in capsys.readouterr().err
    assert main(["lag", "--namesrv", "127.0.0.1:1"]) == 2  # over the wire a group must be named
    assert "group" in capsys.readouterr().err


def test_without_namesrv_the_store_s_command_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topic-status", str(tmp_path / "none"), "T"]) == 2  # the store's: no store at ROOT
    err = capsys.readouterr().err
    assert "rmqlog:" in err and "cannot be asked" not in err


@pytest.mark.parametrize("body", ["text", "hex", "none"])
def test_messages_print_as_the_store_s_command_prints_them(
    tmp_path: Path, body: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The function the reading commands over the wire print messages with (the store
    command's, rmqlog.admin.render.messages: vectorized) against ``json.dumps`` of each row as
    rmqlog.admin.jsonl.row_dict makes it, for the same records: quotes, control characters,
    non-ASCII, bodies that are not UTF-8, keys, properties, no tags."""
    bodies = [
        b"plain",
        'quote " back \\ tab \t nl \n \u00e9\u4e2d\U0001f600'.encode(),
        b"\xff\xfe not utf-8",
        b"",
        bytes(range(32)),
    ]
    with rmqlog.MessageStore.open(tmp_path / "root", small_store_config()) as s:
        s.create_topic("T", 1)
        s.put_batch(
            pa.table(
                {
                    "topic": ["T"] * 5,
                    "queueId": pa.array([0] * 5, pa.int32()),
                    "body": pa.array(bodies, pa.binary()),
                    "tags": ["a", None, "\u00e9", 'x"y', ""],
                    "keys": [["k1", "k2"], None, ["\u4e2d"], [], ["a\tb"]],
                }
            )
        )
        s.dispatch()
        table = s.get_messages("g", "T", 0, 0, max_count=10).messages
    assert table.num_rows == 5
    render.messages(table, body, False)
    expected = "".join(json.dumps(jsonl.row_dict(r, body), ensure_ascii=False) + "\n" for r in table.to_pylist())
    assert capsys.readouterr().out == expected
