"""Reads across a broker group's master and slave: the address rules of
:mod:`rmqnet.client.failover` as tables (RocketMQ 4.9.8's ``findBrokerAddressInSubscribe``,
``RemoteBrokerOffsetStore``, 5.x's ``findBrokerAddressInAdmin``, ``sendHeartbeatToAllBroker``),
the down-marks on a ManualClock, and the clients against in-test servers on 127.0.0.1 (a
name server, a master and a slave of one group): a master that refuses connections costs
nothing but its refused dial, its reads and offsets go to the slave at once, the suggested
broker id is followed, and a master back (its mark expired, or shown again by a route) is
read again. The processes' version (kill -9 of a real master) is test_failover_process.py."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from rmqlog import ManualClock
from rmqnet.client import Admin, GroupMember, NoRouteError, PullConsumer, TopicNotFoundError
from rmqnet.client.failover import (
    DownMarks,
    admin_ids,
    by_availability,
    candidates,
    consumer_list_addrs,
    group_of,
    heartbeat_addrs,
    is_address,
    offset_ids,
    pull_ids,
    subscribe_id,
)
from rmqnet.client.loop import call
from rmqnet.remoting import RemotingCommand, ResponseCode
from rmqnet.remoting.route import BrokerData, QueueData, TopicRouteData
from rmqnet.transport import Connection, ConnectionLostError, RemotingServer

M, S1, S2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"

# ---- the rules, as tables --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "broker_id", "only", "expected"),
    [
        ((0, 1), 0, True, 0),  # the master when asked for it
        ((0, 1), 1, True, 1),  # the slave a broker suggested
        ((1,), 0, True, None),  # no master, onlyThisBroker: nothing (Java then refreshes the route)
        ((1,), 0, False, 1),  # no master: the group's first address
        ((0, 2), 1, True, 2),  # a suggested slave id missing: the next id
        ((0, 3), 1, True, None),  # ... only the next one
        ((0, 3), 1, False, 0),  # ... else the first address (lowest id)
        ((2, 3), 0, False, 2),
        ((), 0, False, None),  # an empty group
    ],
)
def test_subscribe_id_is_java_s_find_broker_address_in_subscribe(
    ids: tuple[int, ...], broker_id: int, only: bool, expected: int | None
) -> None:
    assert subscribe_id({i: f"h{i}:1" for i in ids}, broker_id, only) == expected


@pytest.mark.parametrize(
    ("ids", "suggested", "pull", "offsets", "admin"),
    [
        ((0, 1), 0, [0, 1], [0, 1], [0, 1]),
        ((0, 1), 1, [1, 0], [0, 1], [0, 1]),  # slaveReadEnable's suggestion: the slave first
        ((1,), 0, [1], [1], [1]),  # the master gone: its slave
        ((0, 1, 2), 2, [2, 0, 1], [0, 1, 2], [0, 1, 2]),
        ((0, 2), 1, [2, 0], [0, 2], [0, 2]),  # suggested 1, missing: 2
        ((1, 2), 5, [1, 2], [1, 2], [1, 2]),  # an id nobody has: the lowest first
        ((), 0, [], [], []),
    ],
)
def test_orders_of_pulls_offsets_and_admin_questions(
    ids: tuple[int, ...], suggested: int, pull: list[int], offsets: list[int], admin: list[int]
) -> None:
    addrs = {i: f"h{i}:1" for i in ids}
    assert (pull_ids(addrs, suggested), offset_ids(addrs), admin_ids(addrs)) == (pull, offsets, admin)


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1:10911", True),
        ("[::1]:10911", True),
        ("host.example:1", True),
        ("broker-a", False),
        ("broker-a:", False),
        (":10911", False),
        ("a:b", False),
        ("%RETRY%x|y.z", False),
    ],
)
def test_an_address_is_host_port(text: str, address: bool) -> None:
    assert is_address(text) is address


def group(name: str, addrs: dict[int, str]) -> BrokerData:
    return BrokerData("C", name, addrs)


ROUTE = TopicRouteData([QueueData("a", 4, 4), QueueData("b", 4, 4)], [group("a", {0: M, 1: S1}), group("b", {1: S2})])


def test_group_of() -> None:
    assert group_of(ROUTE, "a") is ROUTE.broker_datas[0] and group_of(ROUTE, "b") is ROUTE.broker_datas[1]
    assert group_of(ROUTE, "c") is None and group_of(ROUTE, M) is None and group_of(None, "a") is None


def test_heartbeats_go_to_every_address_of_a_consumer_and_masters_of_a_producer() -> None:
    assert heartbeat_addrs(ROUTE.broker_datas) == sorted([M, S1, S2])
    assert heartbeat_addrs(ROUTE.broker_datas, consumer=False) == [M]


def test_down_marks_on_the_clock() -> None:
    clock = ManualClock()
    marks = DownMarks(clock, 2000)
    assert not marks.is_down(M) and marks.left_ms(M) == 0
    marks.mark(M)
    clock.advance(500)
    marks.mark(S1)
    assert marks.is_down(M) and marks.snapshot() == {M: 1500, S1: 2000}
    # down ones go last, the one back soonest first; the others keep the rule's order
    assert by_availability([S1, M, S2], marks) == [S2, M, S1]
    assert candidates(ROUTE.broker_datas[0], [0, 1], marks) == [M, S1]
    assert candidates(ROUTE.broker_datas[0], [1], marks) == [S1]  # only the rule's ids
    assert candidates(None, [], marks) == []
    assert consumer_list_addrs(ROUTE.broker_datas, marks) == [S2, M, S1]
    clock.advance(1500)
    assert not marks.is_down(M) and marks.is_down(S1)
    marks.clear(S1)
    assert marks.snapshot() == {} and by_availability([S1, M], marks) == [S1, M]
    never = DownMarks(clock, 0)
    never.mark(M)
    assert not never.is_down(M)
    with pytest.raises(ValueError):
        DownMarks(clock, -1)


# ---- the clients against a name server, a master and a slave in the test --------------------


class Node:
    """An in-test server on a port of its own, kept across :meth:`stop` / :meth:`start` (a
    broker killed and restarted); answers by code, records what it saw."""

    def __init__(self, port: int = 0) -> None:
        self.answers: dict[int, object] = {}
        self.seen: list[RemotingCommand] = []
        self.port = port
        self.server: RemotingServer | None = None
        self.start()

    def start(self) -> None:
        self.server = RemotingServer(self._handle, port=self.port)
        call(self.server.start())
        self.port = self.server.port
        self.addr = f"127.0.0.1:{self.port}"

    def _handle(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        self.seen.append(req)
        make = self.answers.get(req.code)
        return make(req) if callable(make) else req.reply(ResponseCode.SUCCESS)

    def of(self, code: int) -> list[RemotingCommand]:
        return [r for r in self.seen if r.code == code]

    def stop(self) -> None:
        if self.server is not None:
            call(self.server.stop(0.5))
            self.server = None


def _route_body(groups: dict[str, dict[int, str]]) -> bytes:
    return TopicRouteData(
        [QueueData(n, 2, 2) for n in sorted(groups)], [BrokerData("C", n, dict(a)) for n, a in sorted(groups.items())]
    ).encode()


class Group:
    """A name server routing topic T to broker-a = {0: master, 1: slave}; ``routed`` is what it
    answers (change it to drop or add an address)."""

    def __init__(self) -> None:
        self.ns, self.master, self.slave = Node(), Node(), Node()
        self.routed: dict[str, dict[int, str]] = {"broker-a": {0: self.master.addr, 1: self.slave.addr}}
        self.ns.answers[105] = lambda r: (
            r.reply(ResponseCode.SUCCESS, body=_route_body(self.routed))
            if r.ext_fields.get("topic") == "T"
            else r.reply(ResponseCode.TOPIC_NOT_EXIST, "no route")
        )
        for node, bid in ((self.master, 0), (self.slave, 1)):
            node.answers[11] = self._pull(bid)
            node.answers[30] = node.answers[31] = lambda r, bid=bid: r.reply(
                ResponseCode.SUCCESS, None, {"offset": 7 + bid}
            )
            node.answers[14] = lambda r, bid=bid: r.reply(ResponseCode.SUCCESS, None, {"offset": 100 + bid})
            node.answers[38] = lambda r: r.reply(
                ResponseCode.SUCCESS, body=json.dumps({"consumerIdList": ["c1", "c2"]}).encode()
            )
        self.suggest = 0  # what the master suggests

    def _pull(self, bid: int):  # type: ignore[no-untyped-def]
        def answer(r: RemotingCommand) -> RemotingCommand:
            return r.reply(
                ResponseCode.PULL_NOT_FOUND,
                "OFFSET_OVERFLOW_ONE",
                {
                    "suggestWhichBrokerId": self.suggest if bid == 0 else 0,
                    "nextBeginOffset": 5,
                    "minOffset": 0,
                    "maxOffset": 5,
                },
            )

        return answer

    def pulled_by(self) -> tuple[int, int]:
        return len(self.master.of(11)), len(self.slave.of(11))

    def close(self) -> None:
        for n in (self.ns, self.master, self.slave):
            n.stop()


@pytest.fixture
def grp() -> Iterator[Group]:
    g = Group()
    yield g
    g.close()


def test_pulls_follow_the_suggested_broker_id(grp: Group) -> None:
    with PullConsumer("G", grp.ns.addr, clock=ManualClock()) as c:
        r = c.pull("T", 0, 5)
        assert (r.status, r.addr, r.broker_id) == ("NO_NEW_MSG", grp.master.addr, 0)
        grp.suggest = 1  # a master with slaveReadEnable sends a slow consumer to its slave
        assert c.pull("T", 0, 5).suggested_broker_id == 1
        r = c.pull("T", 0, 5)
        assert (r.addr, r.broker_id) == (grp.slave.addr, 1)
        assert c.pull("T", 1, 5).addr == grp.master.addr  # another queue: its own suggestion (none)
        assert c.pull("T", 0, 5).addr == grp.master.addr  # the slave suggested the master again
    assert grp.pulled_by() == (4, 1)


def test_a_master_gone_is_read_from_its_slave_at_once_and_again_after_its_mark(grp: Group) -> None:
    clock = ManualClock()
    with (
        PullConsumer("G", grp.ns.addr, clock=clock, down_ms=10_000) as c,
        Admin(grp.ns.addr, clock=clock, down_ms=10_000) as admin,
    ):
        assert c.pull("T", 0, 5).addr == grp.master.addr
        grp.master.stop()  # refused from now on (the name server still routes it: a cut or a kill not yet seen)
        routes = len(grp.ns.of(105))
        r = c.pull("T", 0, 5)
        assert (r.status, r.addr, r.broker_id) == ("NO_NEW_MSG", grp.slave.addr, 1)
        assert set(c.down.snapshot()) == {grp.master.addr}
        c.pull("T", 0, 5)  # the master is down: not dialled, the route (stale) asked again
        assert len(grp.ns.of(105)) == routes + 1
        c.commit("T", 0, 9)
        assert [(r.ext_fields["commitOffset"]) for r in grp.slave.of(15)] == ["9"]
        assert c.committed("T", 0) == 101  # the slave's answer
        # admin questions by broker name: answered by the slave; by an address: that broker alone
        assert admin.max_offset("broker-a", "T", 0) == 8
        assert admin.query_offset("broker-a", "G", "T", 1) == 101
        admin.update_offset("broker-a", "G", "T", 1, 3)
        assert len(grp.slave.of(15)) == 2
        with pytest.raises(ConnectionLostError):
            admin.max_offset(grp.master.addr, "T", 0)
        assert admin.max_offset(grp.slave.addr, "T", 0) == 8
        grp.master.start()  # back on its port
        assert c.pull("T", 0, 5).addr == grp.slave.addr  # still marked down
        clock.advance(10_000)
        assert c.pull("T", 0, 5).addr == grp.master.addr  # its mark expired: the master again
        assert admin.min_offset("broker-a", "T", 0) == 7


def test_a_master_dropped_from_the_route_comes_back_with_its_registration(grp: Group) -> None:
    """The name server drops a killed master at once (its connection closed); the route
    without it is kept only down_ms; a route that shows the master again clears its mark."""
    clock = ManualClock()
    with PullConsumer("G", grp.ns.addr, clock=clock, down_ms=60_000) as c:
        c.pull("T", 0, 5)
        grp.master.stop()
        grp.routed = {"broker-a": {1: grp.slave.addr}}
        assert c.pull("T", 0, 5).addr == grp.slave.addr
        assert c.pull("T", 0, 5).addr == grp.slave.addr  # the fresh route has no master
        grp.master.start()
        grp.routed = {"broker-a": {0: grp.master.addr, 1: grp.slave.addr}}  # registered again
        clock.advance(30_000)  # the route without a master is kept down_ms... capped by ROUTE_TTL_S (30 s)
        assert c.down.is_down(grp.master.addr)  # its mark has 30 s left, but the route shows it again:
        assert c.pull("T", 0, 5).addr == grp.master.addr
        assert not c.down.is_down(grp.master.addr)


def test_a_slave_promoted_under_the_same_name_is_the_master(grp: Group) -> None:
    with PullConsumer("G", grp.ns.addr, clock=ManualClock(), down_ms=5_000) as c:
        c.pull("T", 0, 5)
        grp.master.stop()
        grp.routed = {"broker-a": {0: grp.slave.addr}}  # the slave registered again with brokerId=0
        r = c.pull("T", 0, 5)
        assert (r.addr, r.broker_id) == (grp.slave.addr, 1)  # the cached route's slave
        r = c.pull("T", 0, 5)
        assert (r.addr, r.broker_id) == (grp.slave.addr, 0)  # the route asked again: the master now


def test_no_address_answers(grp: Group) -> None:
    with PullConsumer("G", grp.ns.addr, clock=ManualClock()) as c:
        grp.master.stop()
        grp.slave.stop()
        with pytest.raises(ConnectionLostError):
            c.pull("T", 0, 5)
        assert set(c.down.snapshot()) == {grp.master.addr, grp.slave.addr}


def test_an_address_is_asked_as_given_and_a_name_needs_the_route(grp: Group) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{s.getsockname()[1]}"
    with Admin(grp.ns.addr, clock=ManualClock()) as admin:
        assert admin.max_offset(grp.slave.addr, "NOPE", 0) == 8  # a topic not routed: no route needed
        with pytest.raises(ConnectionLostError):
            admin.max_offset(nobody, "T", 0)
        assert set(admin.down.snapshot()) == {nobody}
        with pytest.raises(TopicNotFoundError):
            admin.max_offset("broker-a", "NOPE", 0)
        with pytest.raises(NoRouteError):
            admin.max_offset("broker-z", "T", 0)


def test_group_members_heartbeat_every_address_and_ask_the_slave_for_the_members(grp: Group) -> None:
    with GroupMember("G", grp.ns.addr, client_id="c1", clock=ManualClock()) as m:
        m.subscribe("T")
        assert m.heartbeat() == sorted([grp.master.addr, grp.slave.addr])
        assert [q.queue_id for q in m.assignment("T")] == [0]  # 2 queues, members c1 and c2
        grp.master.stop()
        assert m.heartbeat() == [grp.slave.addr]  # the master failed: marked down, not an error
        assert len(grp.master.of(38)) == 1
        assert [q.queue_id for q in m.assignment("T")] == [0]  # the list from the slave
        assert len(grp.slave.of(38)) == 1
        assert m.unregister() == [grp.slave.addr]
