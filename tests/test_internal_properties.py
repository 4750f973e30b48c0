"""The store's own properties (``RMQLOG_*``: the idempotence marker ``RMQLOG_WRITER``) are kept
on disk and used there, but are not the user's: no read shows them in the message table's
``properties`` (store API reads and queries, the CLI); RocketMQ's own system properties stay
as a RocketMQ client sees them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import walk

import rmqlog
from rmqlog.admin.cli import main as cli

MAP = pa.map_(pa.string(), pa.string())


def _props(row: dict) -> dict[str, str]:
    return dict(row["properties"])


def test_the_writer_marker_stays_on_disk_and_out_of_every_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        s.create_topic("T", 1)
        res = s.put_batch(
            pa.table(
                {
                    "topic": ["T", "T"],
                    "body": [b"a", b"b"],
                    "tags": ["x", "y"],
                    "keys": [["k1"], ["k2"]],
                    "properties": pa.array([[("color", "red")], []], MAP),
                }
            ),
            writer="job-1",
            sequence=7,
        )
        s.dispatch()
        last = int(res.column("commitLogOffset")[1].as_py())
        msg_id = res.column("msgId")[1].as_py()
        reads = {
            "read_queue": s.read_queue("T", 0, 0, 2).to_pylist(),
            "get_messages": s.get_messages("g", "T", 0, 0).messages.to_pylist(),
            "query_by_key": s.query_by_key("T", "k2").to_pylist(),
            "query_by_time": s.query_by_time(0, topics=["T"]).to_pylist(),
            "message_by_offset": [s.message_by_offset(last)],
            "message_by_id": [s.message_by_id(msg_id)],
        }
        for call, rows in reads.items():
            marked = [r for r in rows if r is not None and r["commitLogOffset"] == last]
            assert len(marked) == 1, call
            props = _props(marked[0])
            assert not [k for k in props if k.startswith("RMQLOG_")], (call, props)
            # RocketMQ's own properties, as its clients see them
            assert (props["TAGS"], props["KEYS"]) == ("y", "k2") and len(props["UNIQ_KEY"]) == 32, (call, props)
        assert _props(reads["read_queue"][0]) == {
            "TAGS": "x",
            "KEYS": "k1",
            "color": "red",
            "UNIQ_KEY": _props(reads["read_queue"][0])["UNIQ_KEY"],
        }
    on_disk = {r.physical_offset: r.properties for r in walk(root)}
    assert on_disk[last]["RMQLOG_WRITER"] == "7 job-1"  # kept in the log, where the idempotence needs it
    (root / "append.state").unlink()  # the state is rebuilt from the log: the marker is read there
    with rmqlog.MessageStore.open(root) as s:
        assert s.writer_sequence("job-1") == 7
        assert s.put_batch(pa.table({"topic": ["T"], "body": [b"again"]}), writer="job-1", sequence=7).num_rows == 0
    assert cli(["read", str(root), "T", "0"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2 and not [k for line in lines for k in line["properties"] if k.startswith("RMQLOG_")]


def test_delayed_messages_keep_rocketmqs_properties(tmp_path: Path) -> None:
    """The waiting message carries DELAY, REAL_TOPIC and REAL_QID, and the delivered copy keeps
    REAL_TOPIC and REAL_QID (RocketMQ's messageTimeup leaves them); the scheduler's own
    marker is on disk only."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        s.create_topic("T", 1)
        s.put("T", b"d", delay_level=1, tags="t")
        s.dispatch()
        [waiting] = s.read_queue("SCHEDULE_TOPIC_XXXX", 0, 0, 1).to_pylist()
        assert {k: v for k, v in _props(waiting).items() if k != "UNIQ_KEY"} == {
            "TAGS": "t",
            "DELAY": "1",
            "REAL_TOPIC": "T",
            "REAL_QID": "0",
        }
        assert s.deliver_due(1 << 50) == 1
        s.dispatch()
        [copy] = s.read_queue("T", 0, 0, 1).to_pylist()
        assert {k: v for k, v in _props(copy).items() if k != "UNIQ_KEY"} == {
            "TAGS": "t",
            "REAL_TOPIC": "T",
            "REAL_QID": "0",
        }
    on_disk = {r.physical_offset: r.properties for r in walk(root)}
    assert on_disk[copy["commitLogOffset"]]["RMQLOG_WRITER"] == "1 schedule/level-1"
