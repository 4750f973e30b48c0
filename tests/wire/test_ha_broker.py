"""Brokers by role over 127.0.0.1: SYNC_MASTER's three answers (SUCCESS once a slave holds
the message, FLUSH_SLAVE_TIMEOUT after ``slaveTimeout``, SLAVE_NOT_AVAILABLE with no slave,
as RocketMQ 4.9.8's ``CommitLog.submitReplicaRequest`` and ``SendMessageProcessor``), a
SLAVE refusing sends (``DefaultMessageStore.checkStoreStatus``: SERVICE_NOT_AVAILABLE) and
answering pulls byte-exact, and the registration that hands a slave its master's HA address
(``RouteInfoManager.registerBroker``). Requests go through each broker's processor table;
replication runs on real sockets.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

import rmqlog
from rmqnet.broker.broker import Broker
from rmqnet.broker.config import BrokerConfig
from rmqnet.broker.registration import Registrar
from rmqnet.ha import HAClient
from rmqnet.namesrv.server import NameServer
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from tests.wire.broker_helpers import FakePeer, send_header, send_request

GUARD_S = 30.0  # a hang guard only


def _run(test: Any) -> None:
    async def guarded() -> None:
        async with asyncio.timeout(GUARD_S):
            await test()

    asyncio.run(guarded())


def _broker(root: Path, role: str, **changes: Any) -> Broker:
    store = rmqlog.MessageStore.open(root, rmqlog.StoreConfig(mapped_file_size_commit_log=64 << 10))
    config = BrokerConfig(
        broker_name="broker-a",
        broker_role=role,
        ha_listen_port=0,
        broker_id=1 if role == "SLAVE" else 0,
        store=store.config,
    ).replace(**changes)
    return Broker(store, config, clock=rmqlog.SystemClock(), address="127.0.0.1:10911")


async def _send(broker: Broker, body: bytes, props: str = "", opaque: int = 1) -> RemotingCommand:
    req = send_request(send_header("TopicA", props=props), body, opaque=opaque)
    res = broker.table.process(broker, FakePeer(), req)
    if asyncio.isfuture(res) or asyncio.iscoroutine(res):
        res = await res
    assert isinstance(res, RemotingCommand)
    return res


async def _slave_of(master: Broker, slave: Broker) -> HAClient:
    await master.replication.start()
    await slave.replication.start()
    client: HAClient = slave.replication.client
    client.set_master(master.replication.ha_server_addr)
    slave.run_services()
    await master.replication.server.slave_reported.wait()
    return client


async def _caught_up(client: HAClient, slave: Broker, master: Broker) -> None:
    while slave.store.replica_end() < master.store.published_tail():
        client.progress.clear()
        if slave.store.replica_end() >= master.store.published_tail():
            return
        await client.progress.wait()


def test_sync_master_answers_once_the_slave_holds_it(tmp_path: Path) -> None:
    master = _broker(tmp_path / "m", "SYNC_MASTER")
    slave = _broker(tmp_path / "s", "SLAVE")

    async def body() -> None:
        client = await _slave_of(master, slave)
        for i in range(5):
            res = await _send(master, b"sync-%d" % i, opaque=i)
            assert res.code == ResponseCode.SUCCESS, res.remark
            # answered SEND_OK: the slave already holds every byte of it
            assert slave.store.replica_end() >= master.store.published_tail()
            assert res.ext_fields["msgId"]
        await client.close()
        await master.replication.close()
        await slave.replication.close()

    _run(body)
    tail = master.store.published_tail()
    a = (tmp_path / "m" / "commitlog" / f"{0:020d}").read_bytes()[:tail]
    b = (tmp_path / "s" / "commitlog" / f"{0:020d}").read_bytes()[:tail]
    assert a == b
    master.store.close()
    slave.store.close()


def test_sync_master_without_slave_and_with_a_stalled_one(tmp_path: Path) -> None:
    master = _broker(tmp_path / "m", "SYNC_MASTER", slave_timeout=50)

    async def body() -> None:
        await master.replication.start()
        res = await _send(master, b"lonely")
        assert res.code == ResponseCode.SLAVE_NOT_AVAILABLE
        assert res.ext_fields["msgId"] and res.ext_fields["queueOffset"] == "0"  # stored all the same
        # WAIT=false: no wait for a slave (isWaitStoreMsgOK)
        res = await _send(master, b"no-wait", props="WAIT\x01false\x02")
        assert res.code == ResponseCode.SUCCESS
        # a slave that reports once and never acknowledges what it is sent
        host, port = master.replication.ha_server_addr.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(struct.pack(">q", master.store.published_tail()))
        await writer.drain()
        server = master.replication.server
        assert await server.wait_for_replica(master.store.published_tail(), GUARD_S)  # its report arrived
        res = await _send(master, b"stalled")
        assert res.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        assert res.ext_fields["msgId"] and res.ext_fields["queueOffset"] == "2"
        writer.close()
        await master.replication.close()

    _run(body)
    master.store.dispatch()
    assert master.store.read_queue("TopicA", 0, 0, 10).column("body").to_pylist() == [b"lonely", b"no-wait", b"stalled"]
    master.store.close()


def test_slave_refuses_sends_and_serves_pulls(tmp_path: Path) -> None:
    master = _broker(tmp_path / "m", "ASYNC_MASTER")
    slave = _broker(tmp_path / "s", "SLAVE")

    async def body() -> None:
        res = await _send(slave, b"to-the-slave")
        assert res.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "messages are put to the slave" in (res.remark or "")
        assert slave.store.published_tail() == 0
        client = await _slave_of(master, slave)
        for i in range(3):
            assert (await _send(master, b"m%d" % i)).code == ResponseCode.SUCCESS
        await _caught_up(client, slave, master)
        slave.store.dispatch()
        pull = RemotingCommand(
            RequestCode.PULL_MESSAGE,
            7,
            0,
            None,
            {
                "consumerGroup": "G",
                "topic": "TopicA",
                "queueId": 0,
                "queueOffset": 0,
                "maxMsgNums": 32,
                "sysFlag": 1 | 4,
                "commitOffset": 2,
                "suspendTimeoutMillis": 0,
                "subscription": "*",
                "subVersion": 0,
            },
            b"",
            "JAVA",
        )
        got = slave.table.process(slave, FakePeer(), pull)
        if asyncio.isfuture(got):
            got = await got
        assert got.code == ResponseCode.SUCCESS
        assert got.ext_fields["suggestWhichBrokerId"] in (0, "0")
        records = rmqlog.decode_records(got.body_bytes())
        assert records.column("body").to_pylist() == [b"m0", b"m1", b"m2"]
        master.store.dispatch()
        want = master.store.read_window("TopicA", 0, 0, max_count=32, raw=True)
        assert got.body_bytes() == bytes(want.records.data)  # byte-exact, the master's records
        assert slave.consumer_offsets.query("G", "TopicA", 0) < 0  # a slave stores no commit offset
        await client.close()
        await master.replication.close()
        await slave.replication.close()

    _run(body)
    master.store.close()
    slave.store.close()


def test_registration_hands_the_slave_its_masters_ha_address(tmp_path: Path) -> None:
    master = _broker(tmp_path / "m", "ASYNC_MASTER", namesrv_addr="127.0.0.1:9876")
    slave = _broker(tmp_path / "s", "SLAVE", namesrv_addr="127.0.0.1:9876")
    slave.address = "127.0.0.1:20911"
    namesrv = NameServer()

    async def invoke(addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
        res = namesrv.handle(req, 1_700_000_000_000, conn=None)
        assert res is not None
        return res

    async def body() -> None:
        await master.replication.start()
        await slave.replication.start()
        ha = master.replication.ha_server_addr
        reg_m = Registrar(master, invoke=invoke, ha_server_addr=ha)
        reg_s = Registrar(slave, invoke=invoke, ha_server_addr=None)
        assert reg_m.header.broker_id == 0 and reg_m.header.ha_server_addr == ha
        assert reg_s.header.broker_id == 1
        assert await reg_m.register_all() == 1
        slave.add_registrar(reg_s)
        assert await reg_s.register_all() == 1
        assert next(iter(reg_s.results.values())).ha_server_addr == ha
        client: HAClient = slave.replication.client
        assert client.master is None
        slave.replication.run_once(1)
        assert client.master is not None and f"{client.master[0]}:{client.master[1]}" == ha
        assert (await _send(master, b"via-namesrv")).code == ResponseCode.SUCCESS
        await _caught_up(client, slave, master)
        await client.close()
        await master.replication.close()
        await slave.replication.close()

    _run(body)
    master.store.close()
    slave.store.close()


def _pull(broker: Broker, offset: int, nums: int = 32) -> RemotingCommand:
    req = RemotingCommand(
        RequestCode.PULL_MESSAGE,
        9,
        0,
        None,
        {
            "consumerGroup": "G",
            "topic": "TopicA",
            "queueId": 0,
            "queueOffset": offset,
            "maxMsgNums": nums,
            "sysFlag": 4,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
            "subVersion": 0,
        },
        b"",
        "JAVA",
    )
    got = broker.table.process(broker, FakePeer(), req)
    assert isinstance(got, RemotingCommand)
    return got


def test_master_suggests_the_slave_to_a_slow_consumer(tmp_path: Path, monkeypatch: Any) -> None:
    from rmqnet.broker import pull

    master = _broker(tmp_path / "m", "ASYNC_MASTER", slave_read_enable=True)
    plain = _broker(tmp_path / "p", "ASYNC_MASTER")

    async def body() -> None:
        for b in (master, plain):
            for i in range(3):
                assert (await _send(b, b"x" * 200 + bytes([i]))).code == ResponseCode.SUCCESS
            b.store.dispatch()

    _run(body)
    monkeypatch.setattr(pull, "total_memory", lambda: 1000)  # 40% of it: 400 bytes "in memory"
    far, near = _pull(master, 0, 1), _pull(master, 2, 1)  # ~600 bytes behind the end; the last one
    assert far.code == near.code == ResponseCode.SUCCESS
    assert str(far.ext_fields["suggestWhichBrokerId"]) == "1"  # whichBrokerWhenConsumeSlowly
    assert str(near.ext_fields["suggestWhichBrokerId"]) == "0"
    assert str(_pull(plain, 0, 1).ext_fields["suggestWhichBrokerId"]) == "0"  # slaveReadEnable off: the master
    master.store.close()
    plain.store.close()


def test_slave_answers_an_offset_past_its_queue_retry_not_moved(tmp_path: Path) -> None:
    master = _broker(tmp_path / "m", "ASYNC_MASTER")
    slave = _broker(tmp_path / "s", "SLAVE")

    async def body() -> None:
        client = await _slave_of(master, slave)
        assert (await _send(master, b"one")).code == ResponseCode.SUCCESS
        await _caught_up(client, slave, master)
        await client.close()
        await master.replication.close()
        await slave.replication.close()

    _run(body)
    slave.store.dispatch()
    master.store.dispatch()
    assert _pull(master, 50).code == ResponseCode.PULL_OFFSET_MOVED
    assert _pull(slave, 50).code == ResponseCode.PULL_RETRY_IMMEDIATELY  # offsetCheckInSlave off
    master.store.close()
    slave.store.close()


def test_slave_copies_its_masters_topics_offsets_and_delay_offsets(tmp_path: Path) -> None:
    import json

    from rmqlog import TopicConfig
    from rmqnet.broker.slave_sync import FIRST_DELAY_MS, PERIOD_MS

    master = _broker(tmp_path / "m", "ASYNC_MASTER")
    slave = _broker(tmp_path / "s", "SLAVE")
    master.topics.update(TopicConfig("TopicB", 6, 6, perm=4))
    master.store.create_topic("TopicC", 2)
    master.consumer_offsets.commit("G1", "TopicB", 5, 17)
    master.consumer_offsets.commit("G2", "TopicC", 0, 3)
    master.store.set_delay_offsets({1: 4, 3: 0, 18: 12})  # (as the master's scheduler leaves them)
    asked: list[int] = []

    async def invoke(addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
        assert addr == "10.0.0.1:10911"
        asked.append(req.code)
        res = master.table.process(master, FakePeer(), req)
        assert isinstance(res, RemotingCommand)
        return res

    async def body() -> None:
        sync = slave.slave_sync
        sync.invoke = invoke
        raw = master.table.process(master, FakePeer(), RemotingCommand(RequestCode.GET_ALL_CONSUMER_OFFSET, 1))
        assert json.loads(raw.body_bytes()) == {"offsetTable": {"TopicB@G1": {"5": 17}, "TopicC@G2": {"0": 3}}}
        # 45: ScheduleMessageService.encode(), fastjson's compact form with bare level keys
        raw = master.table.process(master, FakePeer(), RemotingCommand(RequestCode.GET_ALL_DELAY_OFFSET, 2))
        assert raw.code == ResponseCode.SUCCESS and raw.body_bytes() == b'{"offsetTable":{1:4,3:0,18:12}}'
        start = slave.clock.wall_ms()
        assert sync.run_once(start + FIRST_DELAY_MS) is None  # no master known yet
        sync.master_addr = "10.0.0.1:10911"
        assert sync.run_once(start + FIRST_DELAY_MS - 100) is None  # not due yet
        task = sync.run_once(start + FIRST_DELAY_MS + 10)
        assert task is not None
        await task
        assert asked == [
            RequestCode.GET_ALL_TOPIC_CONFIG,
            RequestCode.GET_ALL_CONSUMER_OFFSET,
            RequestCode.GET_ALL_DELAY_OFFSET,
        ]
        assert sync.rounds == 1 and sync.last_error is None
        assert slave.store.delay_offsets() == {1: 4, 3: 0, 18: 12}
        assert sync.run_once(start + FIRST_DELAY_MS + PERIOD_MS) is None  # the next round: 10 s on
        master.consumer_offsets.commit("G1", "TopicB", 5, 20)
        master.store.set_delay_offsets({1: 5, 3: 0, 18: 12})
        task = sync.run_once(start + FIRST_DELAY_MS + 10 + PERIOD_MS)
        assert task is not None
        await task
        await sync.close()

    _run(body)
    tb = slave.topics.get("TopicB")
    assert tb is not None and (tb.write_queue_nums, tb.read_queue_nums, tb.perm) == (6, 6, 4)
    assert slave.topics.get("TopicC") is not None
    assert slave.consumer_offsets.query("G1", "TopicB", 5) == 20
    assert slave.consumer_offsets.query("G2", "TopicC", 0) == 3
    slave.state.persist_all()  # the slave's own schedule: its consumerOffset.json
    assert slave.store.committed_offset("G1", "TopicB", 5) == 20
    assert slave.store.committed_offset("G2", "TopicC", 0) == 3
    assert slave.store.delay_offsets() == {1: 5, 3: 0, 18: 12}
    master.store.close()
    slave.store.close()


def test_a_master_without_delay_offsets_leaves_the_slaves_file(tmp_path: Path) -> None:
    """A RocketMQ master answers 45 with SYSTEM_ERROR "No delay offset in this broker" when it
    has none: the round goes on, the slave's file stays as it is."""
    slave = _broker(tmp_path / "s", "SLAVE")
    slave.store.set_delay_offsets({2: 7})

    async def invoke(addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if req.code == RequestCode.GET_ALL_DELAY_OFFSET:
            return req.reply(ResponseCode.SYSTEM_ERROR, "No delay offset in this broker")
        body = b'{"topicConfigTable":{}}' if req.code == RequestCode.GET_ALL_TOPIC_CONFIG else b'{"offsetTable":{}}'
        return req.reply(ResponseCode.SUCCESS, None, None, body)

    async def body() -> None:
        sync = slave.slave_sync
        sync.invoke = invoke
        await sync.sync_all("10.0.0.1:10911")
        assert sync.rounds == 1 and sync.last_error is None
        await sync.close()

    _run(body)
    assert slave.store.delay_offsets() == {2: 7}
    slave.store.close()


def test_ha_port_default_taken_falls_back_configured_one_fails(tmp_path: Path) -> None:
    import socket

    import pytest

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = holder.getsockname()[1]
    a = _broker(tmp_path / "a", "ASYNC_MASTER", ha_listen_port=None, listen_port=taken - 1)
    b = _broker(tmp_path / "b", "ASYNC_MASTER", ha_listen_port=taken)

    async def body() -> None:
        await a.replication.start()
        assert not a.replication.ha_server_addr.endswith(f":{taken}")
        with pytest.raises(OSError):
            await b.replication.start()
        await a.replication.close()

    try:
        _run(body)
    finally:
        holder.close()
        a.store.close()
        b.store.close()


def test_a_topic_deleted_on_the_master_leaves_its_slaves_table(tmp_path: Path) -> None:
    """SlaveSynchronize replaces the slave's topics with its master's (Java clears the table):
    a topic the master deleted (215) leaves the slave's table too; its offsets there stay (Java
    puts the master's offsets over the slave's, removing none); the slave's system topics and
    the groups' retry topics stay."""
    from rmqlog import TopicConfig
    from rmqnet.broker.slave_sync import FIRST_DELAY_MS, PERIOD_MS

    master = _broker(tmp_path / "m", "ASYNC_MASTER")
    slave = _broker(tmp_path / "s", "SLAVE")
    for broker in (master, slave):
        broker.topics.update(TopicConfig("Kept", 2, 2))
        broker.topics.update(TopicConfig("Doomed", 2, 2))
    slave.topics.create_retry("G9")
    master.consumer_offsets.commit("G1", "Doomed", 0, 4)

    async def invoke(addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
        res = master.table.process(master, FakePeer(), req)
        assert isinstance(res, RemotingCommand)
        return res

    async def body() -> None:
        sync = slave.slave_sync
        sync.invoke = invoke
        sync.master_addr = "10.0.0.1:10911"
        start = slave.clock.wall_ms()
        task = sync.run_once(start + FIRST_DELAY_MS + 10)
        assert task is not None
        await task
        assert slave.consumer_offsets.query("G1", "Doomed", 0) == 4
        slave.state.persist_all()
        res = master.table.process(
            master, FakePeer(), RemotingCommand(RequestCode.DELETE_TOPIC_IN_BROKER, 3, ext_fields={"topic": "Doomed"})
        )
        assert isinstance(res, RemotingCommand) and res.code == ResponseCode.SUCCESS, res.remark
        task = sync.run_once(start + FIRST_DELAY_MS + 10 + PERIOD_MS)
        assert task is not None
        await task
        assert sync.last_error is None
        await sync.close()

    _run(body)
    assert slave.topics.get("Doomed") is None and "Doomed" not in slave.store.topic_table()
    assert slave.consumer_offsets.query("G1", "Doomed", 0) == 4
    assert slave.topics.get("Kept") is not None and slave.topics.get("%RETRY%G9") is not None
    assert slave.topics.get("TBW102") is not None and slave.topics.get("SCHEDULE_TOPIC_XXXX") is not None
    master.store.close()
    slave.store.close()


def test_a_topic_missing_from_the_masters_snapshot_keeps_its_units_on_the_slave(tmp_path: Path) -> None:
    """A slave's sync never deletes queues: a topic made on the master just after the snapshot the slave synced
    from, its first records already replicated and dispatched on the slave: the sync drops the
    topic from the slave's table only (Java's SlaveSynchronize replaces the config table and
    touches no queue, no offset); its units stay readable, and the next snapshot brings it back."""
    from rmqlog import TopicConfig

    master = _broker(tmp_path / "m", "ASYNC_MASTER")
    slave = _broker(tmp_path / "s", "SLAVE")
    snapshot_without = master.table.process(master, FakePeer(), RemotingCommand(RequestCode.GET_ALL_TOPIC_CONFIG, 1))
    assert isinstance(snapshot_without, RemotingCommand)
    master.topics.update(TopicConfig("Fresh", 1, 1))
    for store in (master.store, slave.store):  # (the slave's copy as replication leaves it: same records)
        for i in range(4):
            store.put("Fresh", f"m{i}".encode(), queue_id=0)
        store.dispatch()
    slave.consumer_offsets.commit("G1", "Fresh", 0, 2)
    assert slave.topics.get("Fresh") is not None  # (taken in from its units, as a slave does)
    answers = [snapshot_without, None, snapshot_without]  # stale, the master's own, stale again

    async def invoke(addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if req.code == RequestCode.GET_ALL_TOPIC_CONFIG and (stale := answers.pop(0)) is not None:
            return stale
        res = master.table.process(master, FakePeer(), req)
        assert isinstance(res, RemotingCommand)
        return res

    async def body() -> None:
        sync = slave.slave_sync
        sync.invoke = invoke
        await sync.sync_all("10.0.0.1:10911")
        assert sync.last_error is None
        assert slave.topics.get("Fresh") is None  # the config table is the master's snapshot
        assert slave.store.max_offset("Fresh", 0) == 4  # ... and the queue is untouched
        assert slave.store.read_queue("Fresh", 0, 0, 4).num_rows == 4
        assert slave.consumer_offsets.query("G1", "Fresh", 0) == 2
        await sync.sync_all("10.0.0.1:10911")  # the next snapshot has it
        assert slave.topics.get("Fresh") is not None
        await sync.sync_all("10.0.0.1:10911")  # stale again, and then the master is lost
        assert slave.topics.get("Fresh") is None
        await sync.close()

    _run(body)
    assert slave.store.read_queue("Fresh", 0, 0, 4).num_rows == 4
    slave.store.close()
    # the slave promoted (restarted as the group's master): the topic is taken in from its queues
    promoted = _broker(tmp_path / "s", "ASYNC_MASTER")
    assert promoted.topics.get("Fresh") is not None and "Fresh" in promoted.store.topics()
    assert promoted.store.read_queue("Fresh", 0, 0, 4).num_rows == 4
    promoted.store.close()


async def _stalled_slave(master: Broker) -> asyncio.StreamWriter:
    """A slave that reports the master's tail once and acknowledges only what the test writes."""
    await master.replication.start()
    host, port = master.replication.ha_server_addr.rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port))
    writer.write(struct.pack(">q", master.store.published_tail()))
    await writer.drain()
    await master.replication.server.slave_reported.wait()  # admitted, its first report read
    assert len(master.replication.server.links) == 1
    return writer


def _end_request(half: RemotingCommand, outcome: int) -> RemotingCommand:
    ext = {
        "producerGroup": "PG",
        "tranStateTableOffset": half.ext_fields["queueOffset"],
        "commitLogOffset": str(int(half.ext_fields["msgId"][16:], 16)),
        "commitOrRollback": str(outcome),
        "fromTransactionCheck": "false",
        "msgId": "M",
    }
    return RemotingCommand(RequestCode.END_TRANSACTION, 9, 0, None, ext, b"", "JAVA")


def test_sync_master_answers_end_transaction_once_the_slave_holds_it(tmp_path: Path) -> None:
    # Java 4.9.8's EndTransactionProcessor stores the commit and its op message with putMessage,
    # which under SYNC_MASTER waits for a slave as a send does (it did not wait before)
    master = _broker(tmp_path / "m", "SYNC_MASTER", slave_timeout=int(GUARD_S * 1000))

    async def body() -> None:
        writer = await _stalled_slave(master)
        # the half message, not waiting for the slave (WAIT=false), acknowledged at once
        half = await _send(
            master, b"tx", props="TRAN_MSG\x01true\x02PGROUP\x01PG\x02UNIQ_KEY\x01U1\x02WAIT\x01false\x02"
        )
        assert half.code == ResponseCode.SUCCESS, half.remark
        writer.write(struct.pack(">q", master.store.published_tail()))
        before = master.store.published_tail()
        for outcome in (8, 12):  # a commit, then (a second half) a rollback
            if outcome == 12:
                half = await _send(
                    master, b"tx2", props="TRAN_MSG\x01true\x02PGROUP\x01PG\x02UNIQ_KEY\x01U2\x02WAIT\x01false\x02"
                )
                before = master.store.published_tail()
                writer.write(struct.pack(">q", before))
            res = master.table.process(master, FakePeer(), _end_request(half, outcome))
            assert asyncio.isfuture(res)
            while master.store.published_tail() == before:  # the END's put: one turn of the loop
                await asyncio.sleep(0)
            for _ in range(5):
                await asyncio.sleep(0)
            assert not res.done()  # stored, and no slave holds it yet: not answered
            writer.write(struct.pack(">q", master.store.published_tail()))  # the slave acknowledges it
            answer = await res
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert master.replication.server.push_offset >= master.store.published_tail()
        writer.close()
        await master.replication.close()

    _run(body)
    master.store.close()


def test_sync_master_answers_end_transaction_success_without_a_slave(tmp_path: Path) -> None:
    # sendFinalMessage: SLAVE_NOT_AVAILABLE and FLUSH_SLAVE_TIMEOUT are SUCCESS to the producer
    master = _broker(tmp_path / "m", "SYNC_MASTER", slave_timeout=50)

    async def body() -> None:
        await master.replication.start()
        half = await _send(master, b"tx", props="TRAN_MSG\x01true\x02PGROUP\x01PG\x02UNIQ_KEY\x01U1\x02")
        assert half.code == ResponseCode.SLAVE_NOT_AVAILABLE  # the half itself: stored, no slave
        res = master.table.process(master, FakePeer(), _end_request(half, 8))
        answer = await res if asyncio.isfuture(res) else res
        assert answer.code == ResponseCode.SUCCESS
        writer = await _stalled_slave(master)
        half = await _send(
            master, b"tx2", props="TRAN_MSG\x01true\x02PGROUP\x01PG\x02UNIQ_KEY\x01U2\x02WAIT\x01false\x02"
        )
        res = master.table.process(master, FakePeer(), _end_request(half, 8))
        answer = await res  # the slave never acknowledges: slaveTimeout, then SUCCESS
        assert answer.code == ResponseCode.SUCCESS
        writer.close()
        await master.replication.close()

    _run(body)
    master.store.dispatch()
    assert master.store.read_queue("TopicA", 0, 0, 10).column("body").to_pylist() == [b"tx", b"tx2"]
    master.store.close()
