"""Regenerate the gRPC message modules ``rmqnet/grpc/v2/*_pb2.py`` (+ ``.pyi``) from the
protocol definitions in ``proto/apache/rocketmq/v2/`` (RocketMQ 5's ``apache.rocketmq.v2``,
copied verbatim from apache/rocketmq-apis; see ``proto/README.md``).

``make protos`` runs it with the project's environment (grpcio-tools is a dev dependency).
protoc writes ``from apache.rocketmq.v2 import definition_pb2``: rewritten to a relative
import, so no top-level ``apache`` package is needed (the descriptors keep their file names,
``apache/rocketmq/v2/*.proto``, and their package ``apache.rocketmq.v2``: what the wire names).
``tests/wire/test_grpc_protos.py`` checks that the committed modules are what this produces.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO = ROOT / "proto"
OUT = ROOT / "rmqnet" / "grpc" / "v2"
FILES = ("definition", "service")


def generate(out: Path) -> list[Path]:
    """Compile the .proto files into ``out`` (the modules, rewritten as above); their paths."""
    from grpc_tools import protoc  # (dev dependency: only this job and its test need it)

    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"-I{PROTO}",
            f"-I{Path(protoc.__file__).parent / '_proto'}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            *(str(PROTO / "apache" / "rocketmq" / "v2" / f"{name}.proto") for name in FILES),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        written = []
        for name in FILES:
            for ext in (".py", ".pyi"):
                src = Path(tmp) / "apache" / "rocketmq" / "v2" / f"{name}_pb2{ext}"
                text = src.read_text().replace("from apache.rocketmq.v2 import ", "from . import ")
                dst = out / src.name
                dst.write_text(text)
                written.append(dst)
    return written


if __name__ == "__main__":
    for path in generate(OUT if len(sys.argv) < 2 else Path(sys.argv[1])):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
