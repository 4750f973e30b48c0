"""Who may register a broker: an anonymous REGISTER_BROKER could re-point
``broker-a``'s route to another address, and producers followed it. Now a live registration's
name and id are not taken by another address (always), an unregistration comes over the
registering connection only, and a name server with ``aclEnable`` takes registrations signed
in the bound form with the cluster's credentials (an allow list without ACL). Driven with raw
frames on sockets against ``rmqlog namesrv -c namesrv.conf`` in a subprocess, and against the
core; the bound signature is computed here from its spec (docs: "Access control")."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import subprocess_env

from rmqlog import ManualClock, TopicConfig
from rmqnet.broker.registration import Registrar
from rmqnet.namesrv import NameServer
from rmqnet.namesrv.admission import RegistrationPolicy
from rmqnet.namesrv.config import NamesrvConfig, NamesrvConfigError
from rmqnet.remoting import (
    FrameDecoder,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode,
    encode_bytes,
)
from rmqnet.remoting.acl_address import address_pattern
from rmqnet.remoting.acl_sign import sign
from rmqnet.remoting.register import (
    RegisterBrokerBody,
    RegisterBrokerHeader,
    TopicConfigData,
    body_crc32,
)

REAL, FAKE = "127.0.0.1:10911", "127.0.0.1:6666"
CLUSTER_AK, CLUSTER_SK = "cluster-ak", "cluster-secret"
CREDS = json.dumps({"accessKey": CLUSTER_AK, "secretKey": CLUSTER_SK})


def bound_signature(code: int, ext: dict[str, str], body: bytes, secret: str) -> str:
    """The bound form written out from its spec: a constant, the code, each key and value
    length-prefixed (keys sorted, Signature left out), the body; base64(HmacSHA1)."""
    parts = [b"rmqlog-bound-1\n", str(code).encode(), b"\n"]
    for k in sorted(k for k in ext if k != "Signature"):
        kb, vb = k.encode(), str(ext[k]).encode()
        parts += [str(len(kb)).encode(), b":", kb, str(len(vb)).encode(), b":", vb]
    data = b"".join(parts) + body
    return base64.b64encode(hmac.new(secret.encode(), data, hashlib.sha1).digest()).decode()


def register_cmd(
    opaque: int,
    addr: str,
    *,
    name: str = "broker-a",
    broker_id: int = 0,
    topics: tuple[str, ...] = ("T1",),
    signed_by: tuple[str, str] | None = None,
) -> RemotingCommand:
    body = RegisterBrokerBody({t: TopicConfigData(t, 4, 4) for t in topics}).encode()
    ext = {
        k: str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in RegisterBrokerHeader(
            name, addr, "DefaultCluster", addr.replace("0911", "0912"), broker_id, False, body_crc32(body)
        )
        .to_ext()
        .items()
    }
    if signed_by is not None:
        ext["AccessKey"], ext["SignatureForm"] = signed_by[0], "bound-1"
        ext["Signature"] = bound_signature(RequestCode.REGISTER_BROKER, ext, body, signed_by[1])
    return RemotingCommand(RequestCode.REGISTER_BROKER, opaque, ext_fields=ext, body=body, language="JAVA")


def unregister_cmd(opaque: int, addr: str, broker_id: int = 0) -> RemotingCommand:
    ext = {"brokerName": "broker-a", "brokerAddr": addr, "clusterName": "DefaultCluster", "brokerId": str(broker_id)}
    return RemotingCommand(RequestCode.UNREGISTER_BROKER, opaque, ext_fields=ext, language="JAVA")


def route_cmd(opaque: int, topic: str = "T1") -> RemotingCommand:
    return RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque, ext_fields={"topic": topic}, language="JAVA")


class Wire:
    """A blocking socket speaking frames (from ``source``, an address of 127/8)."""

    def __init__(self, port: int, source: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
        self.decoder = FrameDecoder()
        self.pending: list[RemotingCommand] = []

    def call(self, cmd: RemotingCommand) -> RemotingCommand:
        self.sock.sendall(encode_bytes(cmd))
        while not self.pending:
            data = self.sock.recv(65536)
            assert data, "the name server closed the connection"
            self.pending += [decode(f) for f in self.decoder.feed(data)]
        res = self.pending.pop(0)
        assert res.is_response and res.opaque == cmd.opaque
        return res

    def addrs(self) -> dict[str, str]:
        res = self.call(route_cmd(99))
        assert res.code == ResponseCode.SUCCESS, res.remark
        return dict(json.loads(res.body_bytes())["brokerDatas"][0]["brokerAddrs"])

    def close(self) -> None:
        self.sock.close()


def _start(tmp_path: Path, conf: dict[str, str] | None) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "rmqnet", "namesrv", "--listen", "127.0.0.1:0"]
    if conf is not None:
        path = tmp_path / "namesrv.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        args += ["-c", str(path)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())


@pytest.fixture
def namesrv(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[int]:
    proc = _start(tmp_path, getattr(request, "param", None))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), (line, proc.stderr.read() if proc.poll() is not None else "")
        yield int(line.rsplit(":", 1)[1])
    finally:
        proc.kill()
        proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()


def test_an_anonymous_registration_does_not_repoint_a_live_brokers_route(namesrv: int) -> None:
    """Hole 6 (no configuration at all: the rule holds always)."""
    broker, attacker, client = Wire(namesrv), Wire(namesrv), Wire(namesrv)
    try:
        assert broker.call(register_cmd(1, REAL)).code == ResponseCode.SUCCESS
        res = attacker.call(register_cmd(2, FAKE))
        assert (
            res.code == ResponseCode.NO_PERMISSION and REAL in (res.remark or "") and "broker-a" in (res.remark or "")
        )
        assert client.addrs() == {"0": REAL}
        # an unregistration from another connection does not free it either
        res = attacker.call(unregister_cmd(3, REAL))
        assert res.code == ResponseCode.NO_PERMISSION
        assert client.addrs() == {"0": REAL}
        # nor one naming an address that does not hold the id
        assert attacker.call(unregister_cmd(4, FAKE)).code == ResponseCode.SUCCESS
        assert client.addrs() == {"0": REAL}
        # the holder itself re-registers, unregisters; then the name is free
        assert broker.call(register_cmd(5, REAL)).code == ResponseCode.SUCCESS
        assert broker.call(unregister_cmd(6, REAL)).code == ResponseCode.SUCCESS
        assert attacker.call(register_cmd(7, FAKE)).code == ResponseCode.SUCCESS
        assert client.addrs() == {"0": FAKE}
    finally:
        for w in (broker, attacker, client):
            w.close()


def test_the_core_keeps_a_live_registration_from_another_connection() -> None:
    """Hole 6 at the core (conn: the connection each request came on)."""
    ns = NameServer()
    assert ns.handle(register_cmd(1, REAL), 0, conn="broker").code == ResponseCode.SUCCESS  # type: ignore[union-attr]
    res = ns.handle(register_cmd(2, FAKE), 0, conn="attacker")
    assert res is not None and res.code == ResponseCode.NO_PERMISSION
    res = ns.handle(unregister_cmd(3, REAL), 0, conn="attacker")
    assert res is not None and res.code == ResponseCode.NO_PERMISSION
    assert ns.routes.holder("broker-a", 0) == REAL
    route = ns.handle(route_cmd(4), 0)
    assert route is not None and json.loads(route.body_bytes())["brokerDatas"][0]["brokerAddrs"] == {"0": REAL}


def test_a_closed_connection_frees_the_name_for_a_new_address(namesrv: int) -> None:
    """A failover: the old master's process dies (its connection closes), the new one takes the id."""
    old, new, client = Wire(namesrv), Wire(namesrv), Wire(namesrv)
    try:
        assert old.call(register_cmd(1, REAL)).code == ResponseCode.SUCCESS
        old.close()
        for opaque in range(2, 20_000):  # until the name server's loop saw the close (a hang guard only)
            res = new.call(register_cmd(opaque, FAKE))
            if res.code == ResponseCode.SUCCESS:
                break
            assert res.code == ResponseCode.NO_PERMISSION
        assert client.addrs() == {"0": FAKE}
    finally:
        new.close()
        client.close()


@pytest.mark.parametrize(
    "namesrv", [{"aclEnable": "true", "innerClientAuthenticationCredentials": CREDS}], indirect=True
)
def test_with_acl_only_a_registration_signed_with_the_cluster_credentials_is_taken(namesrv: int) -> None:
    w, client = Wire(namesrv), Wire(namesrv)
    try:
        res = w.call(register_cmd(1, REAL))
        assert res.code == ResponseCode.NO_PERMISSION and "not signed" in (res.remark or "")
        res = w.call(register_cmd(2, REAL, signed_by=("someone-else", CLUSTER_SK)))
        assert res.code == ResponseCode.NO_PERMISSION and "not the cluster's" in (res.remark or "")
        res = w.call(register_cmd(3, REAL, signed_by=(CLUSTER_AK, "wrong-secret")))
        assert res.code == ResponseCode.NO_PERMISSION and "does not verify" in (res.remark or "")
        four = register_cmd(4, REAL)
        sign(four, CLUSTER_AK, CLUSTER_SK)  # RocketMQ's 4.x form: binds neither the code nor the names
        res = w.call(four)
        assert res.code == ResponseCode.NO_PERMISSION and "bound form" in (res.remark or "")
        assert client.call(route_cmd(5)).code == ResponseCode.TOPIC_NOT_EXIST  # nothing was taken
        assert w.call(register_cmd(6, REAL, signed_by=(CLUSTER_AK, CLUSTER_SK))).code == ResponseCode.SUCCESS
        assert client.addrs() == {"0": REAL}
        res = w.call(unregister_cmd(7, REAL))  # unsigned: refused, even over its own connection
        assert res.code == ResponseCode.NO_PERMISSION
        assert client.addrs() == {"0": REAL}
    finally:
        w.close()
        client.close()


@pytest.mark.parametrize("namesrv", [{"registerBrokerAllowList": "127.0.0.2"}], indirect=True)
def test_without_acl_the_allow_list_names_who_registers(namesrv: int) -> None:
    outsider, listed, client = Wire(namesrv), Wire(namesrv, source="127.0.0.2"), Wire(namesrv)
    try:
        res = outsider.call(register_cmd(1, REAL))
        assert res.code == ResponseCode.NO_PERMISSION and "registerBrokerAllowList" in (res.remark or "")
        assert listed.call(register_cmd(2, REAL)).code == ResponseCode.SUCCESS
        assert client.addrs() == {"0": REAL}
    finally:
        for w in (outsider, listed, client):
            w.close()


def test_the_registrar_signs_with_the_cluster_credentials() -> None:
    """The broker's registrar against a core with ACL: signed (bound form), taken; the same
    broker without credentials: refused, the route unchanged."""
    clock = ManualClock(1_000_000)
    ns = NameServer(NamesrvConfig(True, CREDS).policy())

    async def invoke(addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
        res = ns.handle(req, clock.wall_ms(), conn=("broker", addr), remote="127.0.0.1:40000")
        assert res is not None
        return res

    def registrar(creds: tuple[str, str] | None, addr: str) -> Registrar:
        config = SimpleNamespace(
            broker_cluster_name="DefaultCluster",
            broker_name="broker-a",
            broker_id=0,
            namesrv_addr="127.0.0.1:9876",
            register_name_server_period=30_000,
            register_broker_timeout_mills=3000,
            inner_credentials=creds,
        )
        topics = SimpleNamespace(
            all=lambda: {"T1": TopicConfig("T1", 4, 4)}, data_version={"counter": 1, "timestamp": 5}
        )
        return Registrar(SimpleNamespace(config=config, address=addr, topics=topics), invoke=invoke)  # type: ignore[arg-type]

    async def body() -> None:
        assert await registrar((CLUSTER_AK, CLUSTER_SK), REAL).register_all() == 1
        assert await registrar(None, FAKE).register_all() == 0
        assert ns.routes.holder("broker-a", 0) == REAL

    asyncio.run(body())


def test_the_policy_checks_the_allow_list_before_anything() -> None:
    policy = RegistrationPolicy((CLUSTER_AK, CLUSTER_SK), address_pattern("10.0.0.*"))
    signed = register_cmd(1, REAL, signed_by=(CLUSTER_AK, CLUSTER_SK))
    assert policy.refusal(signed, "10.0.0.7:5000") is None
    assert "registerBrokerAllowList" in (policy.refusal(signed, "10.0.1.7:5000") or "")
    assert "registerBrokerAllowList" in (policy.refusal(signed, None) or "")
    # a registration signed for one code is refused under another (the code is bound)
    replay = RemotingCommand(RequestCode.UNREGISTER_BROKER, 2, ext_fields=dict(signed.ext_fields), body=signed.body)
    assert "does not verify" in (policy.refusal(replay, "10.0.0.7:5000") or "")


@pytest.mark.parametrize(
    "conf, error",
    [
        ({"aclEnable": "true"}, "needs innerClientAuthenticationCredentials"),
        ({"aclEnable": "yes"}, "is not true or false"),
        (
            {"aclEnable": "true", "innerClientAuthenticationCredentials": '{"accessKey": "a", "secretKey": ""}'},
            "needs accessKey and secretKey",
        ),
        ({"registerBrokerAllowList": "1.2.3.300"}, "registerBrokerAllowList"),
    ],
)
def test_a_wrong_namesrv_conf_fails_the_start_with_exit_2(tmp_path: Path, conf: dict[str, str], error: str) -> None:
    with pytest.raises(NamesrvConfigError, match=error):
        path = tmp_path / "n.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        NamesrvConfig.from_file(path)
    proc = _start(tmp_path, conf)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and error in err


def test_a_missing_namesrv_conf_is_named() -> None:
    with pytest.raises(NamesrvConfigError, match="nowhere.conf"):
        NamesrvConfig.from_file("/nonexistent/nowhere.conf")
