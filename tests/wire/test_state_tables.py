"""The broker's state in memory, persisted on a schedule (no file I/O on a request's path):
consumer offsets (14, 15, 11's commit flag, 43, 208), topics (unknown ones, auto-creation and
its cap, flags across a restart), heartbeats (registration without file I/O, the caps with
RocketMQ's codes, subscription groups) and the queue-lock table (expired locks dropped,
bounded); the rule by which other processes' writes and the broker's tables meet. Structure
is asserted (the files read and written are counted through ``rmqlog.safe_open``, which every
read and every atomic replacement goes through), never time; the schedule runs on a
``ManualClock``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import small_store_config, subprocess_env

import rmqlog
import rmqlog.safe_open as safe_open
from rmqlog.catalog import Catalog
from rmqnet.broker.broker import Broker
from rmqnet.broker.config import BrokerConfig
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from wire.broker_helpers import FakePeer, make_broker, run, send_header, send_request

T0 = 1_700_000_000_000
CONFIG_FILES = ("topics.json", "consumerOffset.json", "subscriptionGroup.json")


class FileOps:
    """Reads (an ``O_RDONLY`` open) and writes (the rename of an atomic replacement) of the
    config files, and walks of every topic (``Catalog.topics``: ``topics.json`` and every
    consume-queue folder), counted while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[str] = []
        self.writes: list[str] = []
        self.walks = 0
        open_file, rename, topics = safe_open.open_file, safe_open.rename, Catalog.topics

        def counted_open(path: Any, flags: int, mode: int = 0o644) -> int:
            if Path(path).name in CONFIG_FILES and not flags & (os.O_WRONLY | os.O_RDWR):
                self.reads.append(Path(path).name)
            return open_file(path, flags, mode)

        def counted_rename(src: Any, dst: Any) -> None:
            if Path(dst).name in CONFIG_FILES:
                self.writes.append(Path(dst).name)
            rename(src, dst)

        def counted_topics(catalog: Catalog) -> dict[str, rmqlog.TopicConfig]:
            self.walks += 1
            return topics(catalog)

        monkeypatch.setattr(safe_open, "open_file", counted_open)
        monkeypatch.setattr(safe_open, "rename", counted_rename)
        monkeypatch.setattr(Catalog, "topics", counted_topics)

    def none(self) -> bool:
        return not self.reads and not self.writes and not self.walks


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path) -> Iterator[rmqlog.MessageStore]:
    s = rmqlog.MessageStore.open(root, small_store_config())
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def broker(store: rmqlog.MessageStore) -> Broker:
    store.create_topic("T", 4)
    return started(make_broker(store, clock=rmqlog.ManualClock(T0)))


def started(broker: Broker) -> Broker:
    """``broker`` with its first persist done (the system subscription groups written)."""
    state = getattr(broker, "state", None)  # (getattr: the same tests run against a broker without one)
    if state is not None:
        state.persist_all()
    return broker


def call(
    broker: Broker, code: int, ext: dict[str, Any] | None = None, body: bytes = b"", peer: FakePeer | None = None
) -> RemotingCommand:
    res = broker.table.process(broker, peer or FakePeer(), RemotingCommand(code, 3, 0, None, ext or {}, body, "JAVA"))
    assert isinstance(res, RemotingCommand)
    return res


def commit(broker: Broker, group: str, queue_id: int, offset: int, topic: str = "T") -> None:
    res = call(
        broker,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset},
    )
    assert res.code == ResponseCode.SUCCESS, res.remark


def query(broker: Broker, group: str, queue_id: int, topic: str = "T") -> int:
    res = call(broker, RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": queue_id})
    assert res.code == ResponseCode.SUCCESS, res.remark
    return int(res.ext_fields["offset"])


def pull_commit(broker: Broker, group: str, queue_id: int, offset: int) -> RemotingCommand:
    ext = {
        "consumerGroup": group,
        "topic": "T",
        "queueId": queue_id,
        "queueOffset": 0,
        "maxMsgNums": 32,
        "sysFlag": 1 | 4,
        "commitOffset": offset,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
    }
    return call(broker, RequestCode.PULL_MESSAGE, ext)


def rounds(broker: Broker, *at_ms: int) -> None:
    for now in at_ms:
        broker.run_services(now)


def offsets_file(root: Path) -> dict[str, dict[str, int]]:
    path = root / "config" / "consumerOffset.json"
    return json.loads(path.read_text())["offsetTable"] if path.exists() else {}


# ------------------------------------------------------------------ consumer offsets


def test_commits_and_queries_touch_no_file_until_the_persist_round(
    broker: Broker, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every commit or query reloaded and rewrote the whole consumerOffset.json (0.7-0.9 s a
    request at 100 k entries): now they are in memory, at any size, and the file is written
    once per ``flushConsumerOffsetInterval`` when something changed."""
    big = {f"T@G{i}": {"0": i} for i in range(20_000)}
    (root / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": big}))
    broker = started(make_broker(broker.store, clock=rmqlog.ManualClock(T0)))  # a broker started over 20 k entries
    rounds(broker, T0)  # (the schedule starts: the first persist one interval on)
    before = os.stat(root / "config" / "consumerOffset.json")
    ops = FileOps(monkeypatch)
    for q in range(4):
        commit(broker, "G", q, 10 + q)
        assert pull_commit(broker, "P", q, 20 + q).code == ResponseCode.PULL_NOT_FOUND
        assert query(broker, "G", q) == 10 + q and query(broker, "P", q) == 20 + q
    assert query(broker, "G7", 0) == 7
    rounds(broker, T0 + 4999)
    assert ops.none(), (ops.reads, ops.writes, ops.walks)
    after = os.stat(root / "config" / "consumerOffset.json")
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)
    rounds(broker, T0 + 5000)
    # (and the group P, created in memory by its first pull as Java's findSubscriptionGroupConfig does)
    assert ops.writes == ["consumerOffset.json", "subscriptionGroup.json"]
    assert broker.consumer_offsets.rereads == 0  # the file had not moved: not read again
    table = offsets_file(root)
    assert len(table) == 20_002 and table["T@G"] == {"0": 10, "1": 11, "2": 12, "3": 13} and table["T@P"]["3"] == 23
    rounds(broker, T0 + 10_000, T0 + 15_000)  # nothing changed since: nothing written
    assert ops.writes == ["consumerOffset.json", "subscriptionGroup.json"]


def test_a_commit_of_another_process_is_visible_after_a_persist(broker: Broker, root: Path) -> None:
    """The rule: at a persist the file is read again when another process wrote it; the
    broker's changes since its last persist win, every other entry is taken in."""
    commit(broker, "G", 0, 5)
    rounds(broker, T0, T0 + 5000)
    commit(broker, "G", 0, 6)  # the broker's change since its last persist ...
    code = (
        "import sys, rmqlog\n"
        "with rmqlog.MessageStore.open(sys.argv[1]) as s:\n"
        "    s.commit_offset('G', 'T', 0, 100)\n"  # ... and another process's of the same entry
        "    s.commit_offset('Spark', 'T', 2, 42)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(root)], check=True, env=subprocess_env(), timeout=120)
    rounds(broker, T0 + 10_000)
    assert query(broker, "Spark", 2) == 42  # taken in
    assert query(broker, "G", 0) == 6  # the broker's change won
    assert offsets_file(root) == {"T@G": {"0": 6}, "T@Spark": {"2": 42}}
    assert broker.consumer_offsets.rereads == 1


def test_the_brokers_commits_are_visible_to_rmqlog_lag_after_a_persist(broker: Broker, root: Path) -> None:
    broker.store.put_batch(
        __import__("pyarrow").table({"topic": ["T"] * 5, "body": [b"x"] * 5, "queueId": [1] * 5}), dispatch=True
    )
    commit(broker, "LagGroup", 1, 3)
    broker.state.persist_all()  # (what the schedule and the clean stop do)
    out = subprocess.run(
        [sys.executable, "-m", "rmqnet", "lag", str(root), "LagGroup", "--json"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lag = json.loads(out.stdout)
    assert lag["offsets"] == [{"group": "LagGroup", "topic": "T", "queueId": 1, "committed": 3, "max": 5, "lag": 2}]


def test_consume_stats_and_all_offsets_read_the_table(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    for g in ("A", "B"):
        commit(broker, g, 0, 1)
    commit(broker, "A", 1, 2, topic="%RETRY%A")
    ops = FileOps(monkeypatch)
    res = call(broker, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "A", "topic": ""})
    assert res.code == ResponseCode.SUCCESS and b'"consumerOffset":1' in bytes(res.body)
    res = call(broker, RequestCode.GET_ALL_CONSUMER_OFFSET)
    assert json.loads(res.body_bytes())["offsetTable"] == {"T@A": {"0": 1}, "T@B": {"0": 1}, "%RETRY%A@A": {"1": 2}}
    assert ops.none()
    assert broker.consumer_offsets.topics_of("A") == ["%RETRY%A", "T"]


def test_a_commit_the_store_refuses_changes_nothing(broker: Broker) -> None:
    for ext, name in [
        ({"consumerGroup": "bad g", "topic": "T", "queueId": 0, "commitOffset": 1}, "bad g"),
        ({"consumerGroup": "G", "topic": "T", "queueId": 9, "commitOffset": 1}, "queue_id 9"),
        ({"consumerGroup": "G", "topic": "a/b", "queueId": 0, "commitOffset": 1}, "a/b"),
    ]:
        res = call(broker, RequestCode.UPDATE_CONSUMER_OFFSET, ext)
        assert res.code == ResponseCode.SYSTEM_ERROR and name in (res.remark or "")
    assert len(broker.consumer_offsets) == 0 and broker.consumer_offsets.pending == 0


# ----------------------------------------------------------------------------- topics


def test_an_unknown_topic_reads_no_file_and_walks_no_folder(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request naming an unknown topic re-read topics.json and walked every queue folder
    (~250 ms at 5-10 k topics; 40 pipelined pulls froze every client 10 s)."""
    for i in range(50):
        broker.store.create_topic(f"Known{i}", 2)
    ops = FileOps(monkeypatch)
    for i in range(40):
        res = (
            pull_commit(broker, "G", 0, -1)
            if i == 0
            else call(
                broker,
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": "G",
                    "topic": f"Nope{i}",
                    "queueId": 0,
                    "queueOffset": 0,
                    "maxMsgNums": 32,
                    "sysFlag": 4,
                    "commitOffset": 0,
                    "suspendTimeoutMillis": 0,
                    "subscription": "*",
                    "subVersion": 0,
                },
            )
        )
        assert res.code in (ResponseCode.TOPIC_NOT_EXIST, ResponseCode.PULL_NOT_FOUND)
    assert call(broker, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Nope"}).code == ResponseCode.TOPIC_NOT_EXIST
    assert call(broker, RequestCode.GET_MAX_OFFSET, {"topic": "Nope", "queueId": 0}).ext_fields == {"offset": 0}
    commit(broker, "G", 3, 1, topic="Nope")  # RocketMQ stores a commit of any topic
    assert ops.none(), (ops.reads, ops.writes, ops.walks)


def test_auto_creation_writes_topics_json_at_the_persist_round_only(
    broker: Broker, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Auto-creating a topic rewrote topics.json (and re-read it, and walked the queue
    folders): 0.8-1.7 s at 10 k topics. Now: in memory, written by the next persist round."""
    rounds(broker, T0)
    ops = FileOps(monkeypatch)
    for i in range(20):
        (res,) = run(broker, FakePeer(), send_request(send_header(f"Auto{i}"), b"x"))
        assert res is not None and res.code == ResponseCode.SUCCESS, res and res.remark
    assert ops.none(), (ops.reads, ops.writes, ops.walks)
    assert all(broker.topics.get(f"Auto{i}") is not None for i in range(20))
    rounds(broker, T0 + 5000)
    assert ops.writes == ["topics.json"] and ops.walks == 0
    stored = json.loads((root / "config" / "topics.json").read_text())["topicConfigTable"]
    assert {f"Auto{i}" for i in range(20)} <= set(stored) and stored["Auto3"]["perm"] == 6


def test_topic_perm_and_order_survive_a_restart(root: Path) -> None:
    """A perm, order or sysflag UPDATE_AND_CREATE_TOPIC set was held in the broker's memory
    only and lost at a restart."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        b = make_broker(s)
        ext = {
            "topic": "RO",
            "defaultTopic": "TBW102",
            "readQueueNums": 2,
            "writeQueueNums": 2,
            "perm": 4,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": "true",
        }
        assert call(b, RequestCode.UPDATE_AND_CREATE_TOPIC, ext).code == ResponseCode.SUCCESS
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        tc = make_broker(s).topics.get("RO")
        assert tc is not None and (tc.perm, tc.order, tc.read_queue_nums) == (4, True, 2)


def test_auto_creation_past_the_cap_is_topic_not_exist(store: rmqlog.MessageStore) -> None:
    probe = make_broker(store)
    broker = make_broker(store, auto_create_topic_max_nums=probe.topics.count() + 2)
    for name, code in [
        ("New1", ResponseCode.SUCCESS),
        ("New2", ResponseCode.SUCCESS),
        ("New3", ResponseCode.TOPIC_NOT_EXIST),
        ("New4", ResponseCode.TOPIC_NOT_EXIST),
    ]:
        (res,) = run(broker, FakePeer(), send_request(send_header(name), b"x"))
        assert res is not None and res.code == code, (name, res and res.remark)
    assert broker.topics.get("New3") is None and broker.topics.refused == 2
    (res,) = run(broker, FakePeer(), send_request(send_header("New1"), b"y"))  # an existing topic: sent
    assert res is not None and res.code == ResponseCode.SUCCESS


def test_the_cap_changed_by_update_broker_config_counts_at_once(store: rmqlog.MessageStore) -> None:
    """autoCreateTopicMaxNums is one of the keys UPDATE_BROKER_CONFIG changes at once: the topic
    table reads the broker's config of now, not the one it was built with."""
    broker = make_broker(store)
    cap = broker.topics.count() + 1
    assert call(broker, RequestCode.UPDATE_BROKER_CONFIG, body=f"autoCreateTopicMaxNums={cap}\n".encode()).code == 0
    codes = [
        r.code
        for name in ("New1", "New2")
        for r in run(broker, FakePeer(), send_request(send_header(name), b"x"))
        if r is not None
    ]
    assert codes == [ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST]
    assert broker.topics.get("New2") is None and broker.topics.refused == 1


def test_a_topic_only_the_log_has_is_found_when_its_units_arrive(store: rmqlog.MessageStore) -> None:
    """A slave's replicated records (or another process's puts) name a topic the broker does
    not know: the dispatcher's arrival signal takes it in, without a walk of the folders."""
    broker = make_broker(store)
    other = store.put_batch(
        __import__("pyarrow").table({"topic": ["Elsewhere"] * 2, "body": [b"x", b"y"], "queueId": [0, 2]})
    )
    assert (
        other.num_rows == 2 and broker.topics.get("Elsewhere") is not None
    )  # (the put auto-created it in topics.json)
    store.put_topic(rmqlog.TopicConfig("Gone", 1, 1), persist=True)
    broker.topics._arrived(["Replicated", "Replicated"], [0, 5], [1, 1])
    tc = broker.topics.get("Replicated")
    assert tc is not None and tc.write_queue_nums == 6


# ------------------------------------------------------------------------- heartbeats


def heartbeat(groups: list[str], producers: tuple[str, ...] = (), client: str = "10.0.0.1@1") -> bytes:
    return json.dumps(
        {
            "clientID": client,
            "producerDataSet": [{"groupName": g} for g in producers],
            "consumerDataSet": [
                {
                    "groupName": g,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "unitMode": False,
                    "subscriptionDataSet": [{"topic": "T", "subString": "*", "subVersion": 1}],
                }
                for g in groups
            ],
        }
    ).encode()


def test_a_heartbeat_of_400_new_groups_writes_no_file(
    broker: Broker, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One heartbeat naming 400 new consumer groups froze the broker ~3 s: each group's retry
    topic was written to topics.json (and the file re-read, the folders walked)."""
    rounds(broker, T0)
    groups = [f"CG{i}" for i in range(400)]
    ops = FileOps(monkeypatch)
    res = call(broker, RequestCode.HEART_BEAT, body=heartbeat(groups))
    assert res.code == ResponseCode.SUCCESS, res.remark
    assert ops.none(), (ops.reads, ops.writes, ops.walks)
    assert len(broker.consumers.consumer_groups) == 400
    assert all(broker.topics.get(f"%RETRY%{g}") is not None and broker.subscription_groups.find(g) for g in groups)
    rounds(broker, T0 + 5000)
    assert sorted(ops.writes) == ["subscriptionGroup.json", "topics.json"]
    saved = json.loads((root / "config" / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    assert set(groups) <= set(saved) and saved["CG7"]["retryQueueNums"] == 1
    assert {f"%RETRY%{g}" for g in groups} <= set(
        json.loads((root / "config" / "topics.json").read_text())["topicConfigTable"]
    )


def _nothing_registered(broker: Broker, groups: list[str]) -> None:
    assert not any(g in broker.consumers.consumer_groups for g in groups)
    assert not any(broker.topics.get(f"%RETRY%{g}") or broker.subscription_groups.find(g) for g in groups)


def test_a_heartbeat_naming_more_groups_than_the_cap_is_refused_and_changes_nothing(store: rmqlog.MessageStore) -> None:
    broker = make_broker(store, heartbeat_max_group_nums=3)
    groups = ["A", "B", "C", "D"]
    res = call(broker, RequestCode.HEART_BEAT, body=heartbeat(groups))
    assert res.code == ResponseCode.SYSTEM_ERROR and "heartbeatMaxGroupNums 3" in (res.remark or "")
    res = call(broker, RequestCode.HEART_BEAT, body=heartbeat(groups[:2], producers=("P1", "P2")))
    assert res.code == ResponseCode.SYSTEM_ERROR  # producers count too
    _nothing_registered(broker, groups)
    assert not broker.consumers.producer_groups
    assert call(broker, RequestCode.HEART_BEAT, body=heartbeat(groups[:3])).code == ResponseCode.SUCCESS


def test_a_heartbeat_past_the_registry_cap_is_refused_and_changes_nothing(store: rmqlog.MessageStore) -> None:
    broker = make_broker(store, client_group_max_nums=2)
    assert call(broker, RequestCode.HEART_BEAT, body=heartbeat(["A", "B"])).code == ResponseCode.SUCCESS
    res = call(broker, RequestCode.HEART_BEAT, body=heartbeat(["A", "C"], client="10.0.0.2@1"))
    assert res.code == ResponseCode.SYSTEM_ERROR and "clientGroupMaxNums 2" in (res.remark or "")
    _nothing_registered(broker, ["C"])
    assert (
        call(broker, RequestCode.HEART_BEAT, body=heartbeat(["A", "B"], client="10.0.0.3@1")).code
        == ResponseCode.SUCCESS
    )


def test_a_heartbeat_past_the_subscription_group_cap_is_26_and_changes_nothing(store: rmqlog.MessageStore) -> None:
    probe = make_broker(store)
    broker = make_broker(store, auto_create_subscription_group_max_nums=len(probe.subscription_groups) + 1)
    res = call(broker, RequestCode.HEART_BEAT, body=heartbeat(["A", "B"]))
    assert res.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "autoCreateSubscriptionGroupMaxNums" in (
        res.remark or ""
    )
    _nothing_registered(broker, ["A", "B"])
    assert call(broker, RequestCode.HEART_BEAT, body=heartbeat(["A"])).code == ResponseCode.SUCCESS


def test_without_auto_create_a_group_gets_no_retry_topic(store: rmqlog.MessageStore) -> None:
    """RocketMQ's heartbeat with ``autoCreateSubscriptionGroup=false``: registered, no retry
    topic for a group it does not know (a ``CID_RMQ_SYS_`` group is created all the same)."""
    broker = make_broker(store, auto_create_subscription_group=False)
    assert call(broker, RequestCode.HEART_BEAT, body=heartbeat(["Plain", "CID_RMQ_SYS_X"])).code == ResponseCode.SUCCESS
    assert "Plain" in broker.consumers.consumer_groups and broker.topics.get("%RETRY%Plain") is None
    assert broker.subscription_groups.find("CID_RMQ_SYS_X") is not None and broker.topics.get("%RETRY%CID_RMQ_SYS_X")


def test_a_closed_connection_leaves_only_its_groups(broker: Broker) -> None:
    a, b = FakePeer(), FakePeer()
    assert call(broker, RequestCode.HEART_BEAT, body=heartbeat(["A", "Both"], producers=("PA",)), peer=a).code == 0
    assert call(broker, RequestCode.HEART_BEAT, body=heartbeat(["Both"], client="c2"), peer=b).code == 0
    assert broker.consumers.on_close(a) == ["A", "Both"]
    assert set(broker.consumers.consumer_groups) == {"Both"} and not broker.consumers.producer_groups
    assert broker.consumers._peer_consumers == {id(b): {"Both"}}


def test_the_broker_conf_keys_of_the_state_tables(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "flushConsumerOffsetInterval=250\nautoCreateTopicMaxNums=7\nheartbeatMaxGroupNums=9\n"
        "clientGroupMaxNums=11\nautoCreateSubscriptionGroupMaxNums=13\nqueueLockMaxNums=15\n"
    )
    c = BrokerConfig.from_properties(conf)
    assert (
        c.flush_consumer_offset_interval,
        c.auto_create_topic_max_nums,
        c.heartbeat_max_group_nums,
        c.client_group_max_nums,
        c.auto_create_subscription_group_max_nums,
        c.queue_lock_max_nums,
    ) == (250, 7, 9, 11, 13, 15)
    conf.write_text("heartbeatMaxGroupNums=0\n")
    with pytest.raises(rmqlog.ConfigError, match="heartbeat_max_group_nums"):
        BrokerConfig.from_properties(conf)


# ------------------------------------------------------------------------ queue locks


def lock_body(group: str, client: str, queues: list[int], topic: str = "T") -> bytes:
    return json.dumps(
        {
            "clientId": client,
            "consumerGroup": group,
            "mqSet": [{"brokerName": "broker-a", "queueId": q, "topic": topic} for q in queues],
        }
    ).encode()


def locked(broker: Broker, group: str, client: str, queues: list[int]) -> list[int]:
    res = call(broker, RequestCode.LOCK_BATCH_MQ, body=lock_body(group, client, queues))
    assert res.code == ResponseCode.SUCCESS
    return sorted(mq["queueId"] for mq in json.loads(res.body_bytes())["lockOKMQSet"])


def test_expired_locks_and_idle_groups_are_dropped_by_a_service_round(broker: Broker) -> None:
    """The lock table never dropped an expired lock (+93 to +105 MiB held after every lock expired)."""
    clock = broker.clock
    for g in range(50):
        assert locked(broker, f"G{g}", "c1", list(range(20))) == list(range(20))
    clock.advance(30_000)  # type: ignore[attr-defined]
    assert locked(broker, "G0", "c1", [0]) == [0]  # renewed: alive 60 s from now
    clock.advance(40_000)  # type: ignore[attr-defined]
    broker.run_services()
    locks = broker.queue_locks
    assert set(locks._groups) == {"G0"} and len(locks) == 1
    clock.advance(60_001)  # type: ignore[attr-defined]
    broker.run_services()
    assert locks._groups == {} and len(locks) == 0


def test_the_lock_table_is_bounded(store: rmqlog.MessageStore) -> None:
    broker = make_broker(store, queue_lock_max_nums=3)
    assert locked(broker, "G", "c1", [0, 1, 2, 3, 4]) == [0, 1, 2]
    assert locked(broker, "H", "c2", [0]) == []  # full: not granted (the client tries again)
    assert locked(broker, "G", "c1", [0, 1, 2]) == [0, 1, 2]  # renewals are
    assert call(broker, RequestCode.UNLOCK_BATCH_MQ, body=lock_body("G", "c1", [2])).code == ResponseCode.SUCCESS
    assert locked(broker, "H", "c2", [0]) == [0]
    assert broker.queue_locks.refused == 3


def test_a_broker_over_an_unreadable_offsets_file_does_not_start(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As RocketMQ's ``ConfigManager.load``: exit 1 naming the file, no traceback."""
    from rmqnet.broker import launch

    rmqlog.MessageStore.open(root).close()
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        (root / "config" / name).write_bytes(b"\xff{{not json")
    assert launch.main(str(root), None, "127.0.0.1:0", None) == 1
    err = capsys.readouterr().err
    assert "CorruptStoreError" in err and "consumerOffset.json" in err and "Traceback" not in err


def test_a_topic_found_from_the_log_grows_with_the_queues_that_get_units(
    broker: Broker, store: rmqlog.MessageStore, root: Path
) -> None:
    """Records of a topic the broker does not know, dispatched by another opener (a slave's
    replicated records, another process's puts): the topic is taken in with as many queues as
    got units, and grown when a later queue gets some (a slave saw queue 0 first and then
    refused pulls of queue 1 as an illegal queue id)."""
    import pyarrow as pa

    other = rmqlog.MessageStore.open(root, small_store_config())
    try:
        other.create_topic("Found", 4)

        def put(queue_id: int) -> None:
            other.put_wire(
                pa.table({"topic": ["Found"], "queueId": pa.array([queue_id], pa.int32()), "body": [b"x"]}),
                dispatch=True,
            )
            store.dispatch()  # this process's next dispatch tells of the other's units

        put(0)
        tc = broker.topics.get("Found")
        assert tc is not None and tc.read_queue_nums == 1
        put(3)
        tc = broker.topics.get("Found")
        assert tc is not None and tc.read_queue_nums == 4
        r = call(broker, RequestCode.GET_MAX_OFFSET, {"topic": "Found", "queueId": "3"})
        assert r.code == ResponseCode.SUCCESS and int(r.ext_fields["offset"]) == 1
    finally:
        other.close()
