"""``grpcListenPort`` in broker.conf: read and checked, and the broker process (``rmqlog broker``)
serving RocketMQ 5's gRPC protocol beside its remoting port: the endpoint it prints answers, and a
SIGTERM stops it cleanly with a client's Telemetry stream open (the stream completed, exit 0)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import rmqlog
from rmqnet.broker.config import BrokerConfig
from rmqnet.grpc.convert import Code
from rmqnet.grpc.v2 import definition_pb2 as pb
from rmqnet.grpc.v2 import service_pb2 as svc
from wire.broker_helpers import read_until

RMQLOG = Path(sys.executable).with_name("rmqlog")
SERVICE = "/apache.rocketmq.v2.MessagingService/"


def test_grpc_listen_port_is_off_unless_set_and_checked(tmp_path: Path) -> None:
    assert BrokerConfig.from_properties(None).grpc_listen_port is None
    conf = tmp_path / "broker.conf"
    conf.write_text("grpcListenPort=8081\n")
    assert BrokerConfig.from_properties(conf).grpc_listen_port == 8081
    conf.write_text("grpcListenPort=0\n")
    assert BrokerConfig.from_properties(conf).grpc_listen_port == 0
    for bad in ("65536", "-1", "x"):
        conf.write_text(f"grpcListenPort={bad}\n")
        with pytest.raises(rmqlog.ConfigError, match="grpc"):
            BrokerConfig.from_properties(conf)


def test_the_broker_process_serves_grpc_and_stops_cleanly_with_a_stream_open(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-g\ngrpcListenPort=0\nautoCreateTopicEnable=true\n")
    proc = subprocess.Popen(
        [str(RMQLOG), "broker", str(tmp_path / "store"), "-c", str(conf), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
    )
    hold = threading.Event()  # the client's side of the Telemetry stream stays open until set

    def commands() -> Iterator[svc.TelemetryCommand]:
        yield svc.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER))
        hold.wait(60)

    try:
        assert proc.stdout is not None
        grpc_line = read_until(proc.stdout, "grpc at")
        read_until(proc.stdout, "ready at")
        address = grpc_line.rsplit(" ", 1)[1].strip()
        assert address.startswith("127.0.0.1:") and int(address.split(":")[1]) > 0
        with grpc.insecure_channel(address) as channel:
            route = channel.unary_unary(
                SERVICE + "QueryRoute",
                request_serializer=svc.QueryRouteRequest.SerializeToString,
                response_deserializer=svc.QueryRouteResponse.FromString,
            )
            r = route(svc.QueryRouteRequest(topic=pb.Resource(name="TBW102")), timeout=10)
            assert r.status.code == Code.OK and r.message_queues
            assert {(a.host, a.port) for a in r.message_queues[0].broker.endpoints.addresses} == {
                ("127.0.0.1", int(address.split(":")[1]))
            }
            telemetry = channel.stream_stream(
                SERVICE + "Telemetry",
                request_serializer=svc.TelemetryCommand.SerializeToString,
                response_deserializer=svc.TelemetryCommand.FromString,
            )
            stream = telemetry(commands(), timeout=60)
            first = next(stream)
            assert first.status.code == Code.OK
            proc.send_signal(signal.SIGTERM)
            assert list(stream) == []  # the server completed the stream
            assert stream.code() == grpc.StatusCode.OK
        assert proc.wait(30) == 0
    finally:
        hold.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_port_that_cannot_be_bound_stops_the_start_with_one_line(tmp_path: Path) -> None:
    """The remoting port or grpcListenPort taken: exit 3 (the name server's rule) and one line
    naming it on stderr, no traceback (the remoting port's case printed a traceback before)."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        conf = tmp_path / "broker.conf"
        conf.write_text(f"brokerName=broker-g\ngrpcListenPort={port}\n")
        for name, argv in (
            ("grpc", ["-c", str(conf), "--listen", "127.0.0.1:0"]),
            ("remoting", ["--listen", f"127.0.0.1:{port}"]),
        ):
            p = subprocess.run(
                [str(RMQLOG), "broker", str(tmp_path / name), *argv],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=tmp_path,
            )
            assert p.returncode == 3, (name, p.stderr)  # the name server's rule (docs/broker.md, "Running a broker")
            assert "Traceback" not in p.stderr and str(port) in p.stderr, (name, p.stderr)
            assert p.stderr.strip().splitlines()[-1].startswith(f"rmqlog broker: cannot listen on 127.0.0.1:{port}"), (
                p.stderr
            )
