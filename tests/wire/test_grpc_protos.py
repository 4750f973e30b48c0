"""The committed gRPC message modules (rmqnet/grpc/v2/*_pb2.py) are what protoc makes of the
definitions in proto/ (jobs/gen_grpc.py, ``make protos``): their file descriptors are compared
with a fresh compile's, field for field, so an edit of either side without the other fails."""

from __future__ import annotations

import sys
from pathlib import Path

from google.protobuf import descriptor_pb2

from rmqnet.grpc.v2 import definition_pb2, service_pb2

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "jobs"))
import gen_grpc  # noqa: E402  (the job, from jobs/)


def _compiled(tmp: Path) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    from grpc_tools import protoc

    out = tmp / "set.pb"
    args = [
        "protoc",
        f"-I{gen_grpc.PROTO}",
        f"-I{Path(protoc.__file__).parent / '_proto'}",
        f"--descriptor_set_out={out}",
        *(str(gen_grpc.PROTO / "apache" / "rocketmq" / "v2" / f"{n}.proto") for n in gen_grpc.FILES),
    ]
    assert protoc.main(args) == 0
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    for f in files:  # (a descriptor set names each field's JSON name; the generated code leaves it out)
        _drop_json_names(f.message_type)
    return {f.name: f for f in files}


def _drop_json_names(messages: object) -> None:
    for m in messages:  # type: ignore[attr-defined]
        for f in m.field:
            f.ClearField("json_name")
        _drop_json_names(m.nested_type)


def test_the_committed_modules_match_the_definitions(tmp_path: Path) -> None:
    compiled = _compiled(tmp_path)
    for module in (definition_pb2, service_pb2):
        committed = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        assert committed == compiled[committed.name], (
            f"{module.__name__} differs from {committed.name}: run `make protos`"
        )


def test_the_modules_import_each_other_relatively_and_keep_the_wire_names() -> None:
    for path in (ROOT / "rmqnet" / "grpc" / "v2").glob("*_pb2.py*"):
        assert "from apache" not in path.read_text(), path
    assert (
        service_pb2.DESCRIPTOR.services_by_name["MessagingService"].full_name == "apache.rocketmq.v2.MessagingService"
    )
    assert definition_pb2.DESCRIPTOR.name == "apache/rocketmq/v2/definition.proto"


def test_the_job_regenerates_the_same_modules(tmp_path: Path) -> None:
    written = gen_grpc.generate(tmp_path)
    assert sorted(p.name for p in written) == sorted(
        p.name for p in (ROOT / "rmqnet" / "grpc" / "v2").glob("*_pb2.py*")
    )
    for path in written:
        if path.suffix == ".pyi":  # the stubs carry no version line: byte for byte
            assert path.read_text() == (ROOT / "rmqnet" / "grpc" / "v2" / path.name).read_text()
