"""``rmqlog dlq`` / ``rmqlog dlq-resend`` (rmqlog.admin.dead_letters) on a store holding dead
letters as the broker's CONSUMER_SEND_MSG_BACK writes them (rmqlog.log.send_back)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import rmqlog
from rmqlog.admin.cli import main as cli
from rmqlog.log.send_back import send_back_table


def _dead(root: Path) -> list[str]:
    """Three messages of T and one of U made dead letters of group G (max reached), and one
    put straight into %DLQ%G without RETRY_TOPIC. Returns the first msgIds."""
    with rmqlog.MessageStore.open(root, clock=rmqlog.ManualClock(1_700_000_000_000)) as s:
        s.create_topic("T", 2)
        s.create_topic("U", 1)
        res = s.wire.put_wire(
            pa.table(
                {
                    "topic": ["T", "T", "U", "T"],
                    "queueId": [0, 1, 0, 0],
                    "body": [b"t0", b"t1", b"u0", b"t2"],
                    "properties": ["TAGS\x01a\x02KEYS\x01k0\x02", "", "color\x01red\x02", ""],
                    "reconsumeTimes": pa.array([16] * 4, pa.int32()),
                }
            ),
            dispatch=True,
        )
        records, _ = s.wire.wire_records(res.column("commitLogOffset").to_numpy())
        s.create_topic("%DLQ%G", 1)
        s.wire.put_wire(
            send_back_table(records, pa.array(["%DLQ%G"] * 4), np.zeros(4, np.int64), np.zeros(4, np.int64)),
            dispatch=True,
        )
        s.wire.put_wire(pa.table({"topic": ["%DLQ%G"], "queueId": [0], "body": [b"stray"]}), dispatch=True)
        return res.column("msgId").to_pylist()


def test_dlq_lists_the_dead_letters_with_where_they_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = _dead(tmp_path)
    assert cli(["dlq", str(tmp_path), "G"]) == 0
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["body"] for r in rows] == ["t0", "t1", "u0", "t2", "stray"]
    assert [r["properties"].get("RETRY_TOPIC") for r in rows] == ["T", "T", "U", "T", None]
    assert [r["properties"].get("ORIGIN_MESSAGE_ID") for r in rows[:4]] == ids
    assert [r["reconsumeTimes"] for r in rows] == [17, 17, 17, 17, 0]
    assert "5 dead letter(s) of G" in err and "T: 3" in err and "U: 1" in err
    assert cli(["dead-letters", str(tmp_path), "G", "--offset", "2", "--count", "1", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert [m["body"] for m in obj["messages"]] == ["u0"] and obj["origins"] == {"U": 1} and obj["fromOffset"] == 2


def test_dlq_refuses_an_unknown_or_bad_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _dead(tmp_path)
    assert cli(["dlq", str(tmp_path), "Other"]) == 2
    assert "groups with dead letters: G" in capsys.readouterr().err
    assert cli(["dlq", str(tmp_path), "bad/group"]) == 2
    assert cli(["dlq", str(tmp_path), "G", "--offset", "99"]) == 1


def test_dlq_resend_puts_them_back_on_their_topics_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _dead(tmp_path)
    assert cli(["dlq-resend", str(tmp_path), "G", "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["resent"] == 4 and dry["topics"] == {"T": 3, "U": 1} and dry["noOrigin"] == 1 and dry["dryRun"]
    assert cli(["dlq-resend", str(tmp_path), "G", "--count", "2"]) == 0
    assert "re-sent 2 dead letter(s) of G" in capsys.readouterr().out
    assert cli(["dlq-resend", str(tmp_path), "G", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert (second["resent"], second["alreadyResent"], second["fromOffset"]) == (2, 2, 2)
    assert second["topics"] == {"T": 1, "U": 1} and second["noOrigin"] == 1
    assert cli(["dlq-resend", str(tmp_path), "G", "--offset", "0", "--json"]) == 1  # all re-sent already
    assert json.loads(capsys.readouterr().out)["alreadyResent"] == 5
    with rmqlog.MessageStore.open(tmp_path) as s:
        s.dispatch()
        t = [m for q in range(2) for m in s.read_queue("T", q, 0, 100).to_pylist()]
        u = s.read_queue("U", 0, 0, 100).to_pylist()
    again = [m for m in t if m["reconsumeTimes"] == 0 and "ORIGIN_MESSAGE_ID" in dict(m["properties"])]
    assert sorted(m["body"] for m in again) == [b"t0", b"t1", b"t2"]
    [u_again] = [m for m in u if "ORIGIN_MESSAGE_ID" in dict(m["properties"])]
    props = dict(u_again["properties"])
    assert u_again["body"] == b"u0" and props["color"] == "red" and "RETRY_TOPIC" not in props
    k0 = next(m for m in again if m["body"] == b"t0")
    assert k0["tags"] == "a" and k0["keys"] == ["k0"]
