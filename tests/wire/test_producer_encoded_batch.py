"""``Producer.send_encoded_batch``, in this process (no broker: a producer whose routes and
answers come from a script): a pre-encoded batch goes to the queue the caller routed it to,
with the idempotence marker; a group without a master in reach is waited for within
``master_wait_s`` (RocketMQ's ``retryTimesWhenSendFailed``, bounded by time), the route asked
again for the master it names. The same across real hosts, Spark and a promoted slave:
tests/cluster/test_spark_hosts.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rmqnet.client import NoRouteError, Producer, SendResult
from rmqnet.client import producer as producer_module
from rmqnet.client.errors import BrokerError
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from rmqnet.remoting.route import PERM_RW, BrokerData, QueueData, TopicRouteData


def route(masters: dict[str, str | None]) -> TopicRouteData:
    """Groups ``name -> master address`` (``None``: only its slave is registered), 2 queues each."""
    return TopicRouteData(
        [QueueData(name, 2, 2, PERM_RW, 0) for name in sorted(masters, reverse=True)],
        [
            BrokerData("C", name, {0: addr, 1: f"{name}-slave:1"} if addr else {1: f"{name}-slave:1"})
            for name, addr in masters.items()
        ],
    )


class ScriptedProducer(Producer):
    """Answers routes from a script (one per ask, the last repeated) and sends by address:
    ``dead`` addresses refuse the connection, ``slaves`` answer as a slave does, ``busy``
    answers SYSTEM_BUSY that many times first, ``duplicate`` answers as a replay."""

    def __init__(
        self,
        routes: list[TopicRouteData],
        dead: set[str] | frozenset[str] = frozenset(),
        slaves: frozenset[str] = frozenset(),
        busy: int = 0,
        duplicate: bool = False,
    ) -> None:
        super().__init__("PG", "127.0.0.1:1")
        self.script = routes
        self.dead = dead
        self.slaves = slaves
        self.busy = busy
        self.duplicate = duplicate
        self.asked = 0
        self.sent: list[str] = []
        self.commands: list[RemotingCommand] = []

    async def _route(self, topic: str) -> TopicRouteData:
        self.asked += 1
        return self.script[min(self.asked - 1, len(self.script) - 1)]

    async def invoke(
        self, addr: str, cmd: RemotingCommand, timeout_s: float | None = None, ok: Any = (ResponseCode.SUCCESS,)
    ) -> RemotingCommand:
        self.sent.append(addr)
        self.commands.append(cmd)
        if addr in self.dead:
            raise ConnectionRefusedError(addr)
        if addr in self.slaves:
            raise BrokerError(ResponseCode.SERVICE_NOT_AVAILABLE, "service not available now...", addr, cmd.code)
        if self.busy:
            self.busy -= 1
            raise BrokerError(ResponseCode.SYSTEM_BUSY, "too many requests", addr, cmd.code)
        ext = {"msgId": "AB", "queueId": cmd.ext_fields.get("e", 0), "queueOffset": "7"}
        if self.duplicate:
            ext["rmqlogDuplicate"] = "true"
        return cmd.reply(0, None, ext)


def send(p: ScriptedProducer, addr: str | None, wait_s: float, **kw: Any) -> SendResult:
    return asyncio.run(
        p.asend_encoded_batch("T", b"body", broker_name="b", queue_id=1, addr=addr, master_wait_s=wait_s, **kw)
    )


@pytest.fixture(autouse=True)
def short_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(producer_module, "MASTER_WAIT_PAUSE_S", 0.01)


def test_the_batch_goes_to_its_queue_with_the_marker() -> None:
    p = ScriptedProducer([route({"b": "b:1"})])
    result = send(p, "b:1", 0.0, marker=("job/3/abcd", 5))
    (cmd,) = p.commands
    ext = cmd.ext_fields
    assert cmd.code == RequestCode.SEND_BATCH_MESSAGE and bytes(cmd.body or b"") == b"body"
    # (SendMessageRequestHeaderV2's short names: b topic, e queueId, m batch, n brokerName; as
    # Java writes extFields, every value a string)
    assert (ext["b"], ext["e"], ext["m"], ext["n"]) == ("T", "1", "true", "b")
    assert (ext["rmqlogWriter"], ext["rmqlogSequence"]) == ("job/3/abcd", "5")
    assert p.sent == ["b:1"] and p.asked == 0  # the caller's address: no route asked
    assert (result.status, result.broker_name, result.queue_offset, result.duplicate) == ("SEND_OK", "b", 7, False)
    assert send(ScriptedProducer([route({"b": "b:1"})], duplicate=True), "b:1", 0.0, marker=("w", 1)).duplicate
    unmarked = ScriptedProducer([route({"b": "b:1"})])
    send(unmarked, None, 0.0)  # no address given: the group's master in the route
    assert unmarked.sent == ["b:1"] and "rmqlogWriter" not in unmarked.commands[0].ext_fields


def test_a_batch_waits_for_the_group_s_next_master() -> None:
    # the group had no master when the caller routed; its slave is promoted two asks later
    p = ScriptedProducer([route({"b": None}), route({"b": None}), route({"b": "b-slave:1"})])
    send(p, "", 5.0)
    assert p.sent == ["b-slave:1"] and p.asked == 3
    # the master dies under the send: the batch goes to the one the route names next; while a
    # group is missing from the route altogether (its slave restarting), its last address is kept
    p = ScriptedProducer([route({"a": "a:1"}), route({"b": None}), route({"b": "b-new:1"})], dead={"b:1"})
    send(p, "b:1", 5.0)
    assert p.sent == ["b:1", "b:1", "b-new:1"]


def test_a_batch_sent_to_what_is_now_a_slave_goes_to_the_group_s_master() -> None:
    """The old master came back as a slave under the address the caller's route named master:
    its SERVICE_NOT_AVAILABLE (nothing stored) sends the batch to the master the route names now."""
    p = ScriptedProducer([route({"b": "b-new:1"})], slaves=frozenset({"b:1"}))
    send(p, "b:1", 5.0)
    assert p.sent == ["b:1", "b-new:1"]


def test_a_busy_broker_is_asked_again() -> None:
    p = ScriptedProducer([route({"b": "b:1"})], busy=2)
    assert send(p, "b:1", 5.0).status == "SEND_OK"
    assert p.sent == ["b:1"] * 3 and p.asked == 0
    with pytest.raises(BrokerError) as err:  # without time to wait, the refusal is the answer
        send(ScriptedProducer([route({"b": "b:1"})], busy=1), "b:1", 0.0)
    assert err.value.code == ResponseCode.SYSTEM_BUSY


def test_no_master_within_the_wait_fails_the_send() -> None:
    p = ScriptedProducer([route({"b": None})])
    # (0.5 s of 0.01 s pauses: ~50 asks, so a loaded machine's stall cannot leave only two)
    with pytest.raises(NoRouteError, match="broker group 'b' has had no master for 0.5 s"):
        send(p, "", 0.5)
    assert p.sent == [] and p.asked > 2
    p = ScriptedProducer([route({"b": "b:1"})], dead={"b:1"})
    with pytest.raises(ConnectionRefusedError):
        send(p, "b:1", 0.1)
    with pytest.raises(BrokerError) as err:  # without time to wait, a slave's refusal is the answer
        send(ScriptedProducer([route({"b": "b:1"})], slaves=frozenset({"b:1"})), "b:1", 0.0)
    assert err.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
