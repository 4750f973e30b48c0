"""The broker's declared shape: one table from request code to handler
(:mod:`rmqnet.broker.processors`) serving exactly the codes docs/broker.md lists, every service
a typed field of :class:`rmqnet.broker.broker.Broker`, and no part of the broker found by name
(no ``getattr``/``hasattr``/``setattr`` on a broker, no ``Any``-typed broker, no type-ignore
of a broker attribute), so that mypy follows a request from the transport to the store."""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

import rmqlog
from rmqnet.broker.broker import Broker
from rmqnet.broker.dispatch import ProcessorTable
from rmqnet.broker.registration import Registrar
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode

from .broker_helpers import FakePeer, make_broker

ROOT = Path(__file__).resolve().parents[2]
NET = ROOT / "rmqnet"
BROKER_DOC = ROOT / "docs" / "broker.md"
#: what the broker serves (docs/broker.md, "Request codes served"; RocketMQ 4.9.8's codes and
#: RocketMQ 5's POP codes; 200950 ours, the POP in-flight listing)
SERVED = [
    10,
    11,
    12,
    14,
    15,
    17,
    21,
    25,
    26,
    28,
    29,
    30,
    31,
    32,
    33,
    34,
    35,
    36,
    37,
    38,
    41,
    42,
    43,
    45,
    200,
    201,
    202,
    203,
    207,
    208,
    215,
    310,
    320,
    200050,
    200051,
    200053,
    200950,
]


def documented_codes() -> list[int]:
    """The codes of docs/broker.md's "Request codes served" table (first column; the codes the
    broker only sends, in parentheses, left out)."""
    section = BROKER_DOC.read_text().split("\n## Request codes served", 1)[1].split("\n## ", 1)[0]
    codes: list[int] = []
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| code"):
            first = re.sub(r"\(.*?\)", "", line.split("|")[1])
            codes += [int(c) for c in re.findall(r"\b\d+\b", first)]
    return sorted(codes)


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    with rmqlog.MessageStore.open(tmp_path / "store") as store:
        yield make_broker(store)


def test_the_table_serves_exactly_the_documented_codes(broker: Broker) -> None:
    assert documented_codes() == SERVED
    assert broker.table.codes() == SERVED


def test_every_served_code_reaches_its_handler_and_others_are_not_supported(broker: Broker) -> None:
    for code in SERVED:
        assert broker.table.handler(code) is not None
    req = RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, 7, 0, None, {}, b"", "JAVA")  # sent, not served
    res = broker.table.process(broker, FakePeer(), req)
    assert isinstance(res, RemotingCommand) and res.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert res.remark == f" request type {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED} not supported"


def test_two_handlers_for_one_code_stop_the_start() -> None:
    def one(broker: Broker, peer: Any, req: RemotingCommand) -> None:
        return None

    with pytest.raises(ValueError, match="request code 10 already has a processor"):
        ProcessorTable(
            [(RequestCode.SEND_MESSAGE, one), (RequestCode.PULL_MESSAGE, one), (RequestCode.SEND_MESSAGE, one)]
        )


def test_the_acl_hook_is_declared_with_the_table(broker: Broker) -> None:
    assert broker.acl is None and broker.table.before == []  # aclEnable=false: no hook


def test_every_service_is_a_field_of_the_broker(broker: Broker) -> None:
    """What the process runs each round is the broker's declared parts, nothing anonymous."""
    fields = {id(v) for v in vars(broker).values()}
    assert all(id(s) in fields for s in broker.services)
    assert [type(s).__name__ for s in broker.services] == [
        "StatePersistService",
        "TransactionCheckService",
        "ClientRegistry",
        "PullHoldService",
        "QueueLocks",
        "GetNums",
        "Replication",
        "PopHoldService",
        "PopService",
        "RateSampler",
    ]
    assert broker.slave_sync is None and broker.registrar is None


def test_a_slave_has_its_sync_and_a_registered_broker_its_registrar(tmp_path: Path) -> None:
    with rmqlog.MessageStore.open(tmp_path / "store") as store:
        slave = make_broker(store, broker_role="SLAVE", broker_id=1, namesrv_addr="127.0.0.1:9876")
        assert slave.slave_sync is not None and slave.services[-1] is slave.slave_sync
        registrar = Registrar(slave, invoke=_refusing)
        slave.add_registrar(registrar)
        assert slave.registrar is registrar and slave.services[-1] is registrar


async def _refusing(addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
    raise ConnectionRefusedError(addr)


def test_close_runs_every_services_close_even_after_one_fails(broker: Broker) -> None:
    """Broker.close (the process's clean stop): the state tables' persist first; a failing close
    does not keep the registrar from unregistering."""
    asked: list[int] = []

    async def invoke(addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
        asked.append(req.code)
        return req.reply(ResponseCode.SUCCESS)

    broker.config = broker.config.replace(namesrv_addr="127.0.0.1:9876")
    broker.add_registrar(Registrar(broker, invoke=invoke))
    broker.consumer_offsets.commit("G", "T", 0, 5)
    persisted: list[bool] = []

    def failing_close() -> None:
        persisted.append(broker.consumer_offsets.persist())
        raise OSError("disk gone")

    broker.state.close = failing_close  # type: ignore[method-assign]
    asyncio.run(broker.close())
    assert persisted == [True] and broker.store.committed_offset("G", "T", 0) == 5
    assert asked == [RequestCode.UNREGISTER_BROKER]


# ------------------------------------------------------------------ the source, read
def _broker_arg(node: ast.expr) -> bool:
    """Whether ``node`` is a broker: ``broker`` or ``<anything>.broker``."""
    return (isinstance(node, ast.Name) and node.id == "broker") or (
        isinstance(node, ast.Attribute) and node.attr == "broker"
    )


def _lookups(path: Path, params: bool = True) -> list[str]:
    """getattr/hasattr/setattr/delattr calls on a broker, ``install`` functions and (with
    ``params``: a module of the broker, where a ``broker`` is one) parameters named ``broker``
    typed other than ``Broker``, in one module."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and node.args
            and _broker_arg(node.args[0])
        ):
            found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name == "install":
                found.append(f"{path.name}:{node.lineno} def install")
            for arg in node.args.args + node.args.kwonlyargs if params else []:
                if arg.arg == "broker" and (
                    arg.annotation is None or ast.unparse(arg.annotation).strip("'\"") != "Broker"
                ):
                    found.append(
                        f"{path.name}:{node.lineno} {node.name}(broker: "
                        f"{None if arg.annotation is None else ast.unparse(arg.annotation)})"
                    )
    return found


def test_no_part_of_the_broker_is_found_by_name() -> None:
    found = [f for p in sorted(NET.rglob("*.py")) for f in _lookups(p, params=p.parent.name == "broker")]
    assert found == []


def test_no_type_ignore_on_a_broker_attribute() -> None:
    ignores = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted((NET / "broker").glob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "type: ignore[attr-defined]" in line
    ]
    assert ignores == []


def test_the_source_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The scan above, on the forms main had (its own check)."""
    src = tmp_path / "old.py"
    src.write_text(
        "from typing import Any\n"
        "def install(broker: Any) -> None:\n"
        "    broker.sender = 1  # type: ignore[attr-defined]\n"
        "class S:\n"
        "    def f(self) -> None:\n"
        "        r = getattr(self.broker, 'replication', None)\n"
        "def g(broker: Broker) -> None:\n"
        "    hasattr(broker, 'holds')\n"
    )
    assert sorted(f.split(" ", 1)[1] for f in _lookups(src)) == sorted(
        ["def install", "install(broker: Any)", "getattr(self.broker, 'replication', None)", "hasattr(broker, 'holds')"]
    )
