"""rmqnet's layout rules (docs/architecture.md, "The network side"), checked on the source:

- its units stand on floors, lowest first: ``remoting`` (the wire, sans-I/O) < ``grpc`` (RocketMQ
  5's gRPC messages and their conversion, sans-I/O) < ``transport``
  (asyncio connections) < ``client``, ``namesrv``, ``ha`` < ``broker``, ``console`` (the web
  console) < ``commands`` (the network commands) < ``cli`` (the command's entry point,
  ``__main__``); a module imports from its own unit and lower floors only, and units of one
  floor do not import each other (type-only and function-local imports count);
- no import cycles among the imports that run: an import under ``if TYPE_CHECKING:`` may point
  back (the broker's services and handlers are typed with the ``Broker`` that holds them,
  docs/decisions.md), though it counts for the floors;
- the store is reached only through its public API (``rmqlog.__all__`` and
  ``rmqlog.PUBLIC_MODULES``), except by the command, which hands the store's commands to
  ``rmqlog.admin.cli`` unchanged, and prints and exits by the store command's rules
  (``rmqlog.admin.render``, ``rmqlog.admin.exits``) in every command;
- ``remoting`` and ``grpc`` import neither asyncio nor sockets nor grpc's transport nor the store
  (bytes or messages in, commands out);
- no module reads the time itself: services take ``now_ms`` from an injected clock
  (``rmqlog.Clock``), the transport asks its event loop;
- no module over 600 lines; every module is named in docs/architecture.md's rmqnet table.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_layout import (
    ARCHITECTURE,
    MAX_LINES,
    _circles,
    _cycles,
    _imports,
    _private_uses,
    _public_api,
    _time_reads,
)

ROOT = Path(__file__).resolve().parents[2]
NET = ROOT / "rmqnet"
FLOORS = (
    ("remoting",),
    ("grpc",),
    ("transport", "metrics"),
    ("client", "namesrv", "ha"),
    ("broker", "console"),
    ("commands",),
    ("cli",),
)
FLOOR = {unit: n for n, units in enumerate(FLOORS) for unit in units}
#: what the command may take from the store beyond its public API: the store's own command
COMMAND_HANDS_OVER = {"rmqlog.admin.cli"}
#: what the network commands share with the store's: the rendering and the one exit table
COMMAND_RULES = {"rmqlog.admin.render", "rmqlog.admin.exits"}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(NET.rglob("*.py")):
        parts = ["rmqnet", *path.relative_to(NET).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _unit(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (NET / parts[1]).is_dir()):
        return parts[1]
    return "cli"  # rmqnet, rmqnet.cli, rmqnet.__main__: the package and its command


def test_every_unit_stands_on_a_floor() -> None:
    units = {_unit(m) for m in _modules()}
    assert units - FLOOR.keys() == set(), "units without a floor (add them to FLOORS)"


def test_no_import_runs_up_a_floor_or_across() -> None:
    bad = []
    for mod, deps in _imports(_modules()).items():
        for dep in deps:
            if _unit(dep) != _unit(mod) and FLOOR[_unit(dep)] >= FLOOR[_unit(mod)]:
                bad.append(f"{mod} ({_unit(mod)}) -> {dep} ({_unit(dep)})")
    assert bad == [], "imports against rmqnet's floors: " + ", ".join(sorted(bad))


def test_no_import_cycles() -> None:
    circles = _circles(_imports(_modules(), type_only=False))
    assert circles == [], "import circles in rmqnet: " + "; ".join(circles)


def test_a_type_only_import_back_is_no_cycle_but_one_that_runs_is(tmp_path: Path) -> None:
    (tmp_path / "broker.py").write_text("from . import send\n")
    (tmp_path / "send.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .broker import Broker\n"
    )
    (tmp_path / "pull.py").write_text("def rerun():\n    from .broker import Broker\n")
    mods = {f"rmqnet.broker.{p.stem}": p for p in tmp_path.glob("*.py")}
    assert _cycles(_imports(mods, type_only=False)) == []
    assert _imports(mods)["rmqnet.broker.send"] == {"rmqnet.broker.broker"}  # (the floors count it)
    (tmp_path / "broker.py").write_text("from . import send, pull\n")
    assert len(_cycles(_imports(mods, type_only=False))) == 1  # pull's function-local import runs


def test_the_store_is_reached_through_its_public_api_only() -> None:
    public, modules = _public_api()
    bad = [
        f"{p.relative_to(ROOT)}: {b}"
        for p in sorted(NET.rglob("*.py"))
        for b in _private_uses(p, public, modules | _command_allowance(p))
    ]
    assert bad == [], "rmqnet reaching into the store: " + ", ".join(bad)


def _command_allowance(path: Path) -> set[str]:
    """The store modules beyond its public API that ``path`` may import."""
    if path == NET / "cli.py":
        return COMMAND_HANDS_OVER
    return COMMAND_RULES if path.parent == NET / "commands" else set()


def test_the_wire_codec_does_no_io() -> None:
    banned = {"asyncio", "socket", "selectors", "rmqlog", "threading", "grpc"}
    found = []
    for path in sorted([*(NET / "remoting").rglob("*.py"), *(NET / "grpc").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in banned]
    assert found == []


def test_no_module_reads_the_time_itself() -> None:
    reads = {str(p.relative_to(ROOT)): r for p in sorted(NET.rglob("*.py")) if (r := _time_reads(p.read_text()))}
    assert reads == {}, "rmqnet modules reading the time themselves (ask the injected clock): " + str(reads)


def test_no_module_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted(NET.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_architecture_table_names_every_module() -> None:
    text = ARCHITECTURE.read_text()
    section = text.split("\n## The network side", 1)[1].split("\n## ", 1)[0]
    named = re.findall(
        r"`([\w/]+\.py)`", "\n".join(line.split("|")[1] for line in section.splitlines() if line.startswith("| `"))
    )
    on_disk = sorted(str(p.relative_to(NET)) for p in NET.rglob("*.py"))
    assert sorted(set(on_disk) - set(named)) == [], "rmqnet modules missing from docs/architecture.md's table"
    assert sorted(set(named) - set(on_disk)) == [], "docs/architecture.md names rmqnet modules that do not exist"


SPARK = ROOT / "spark_rmq"
NAMES = NET / "remoting" / "names.py"
ADDRESS = NET / "remoting" / "address.py"
HEARTBEAT = NET / "remoting" / "heartbeat.py"


def _sources(*roots: Path) -> list[Path]:
    return [p for root in roots for p in sorted(root.rglob("*.py")) if "grpc/v2" not in p.as_posix()]


def _vocabulary_literals(path: Path, separators: bool = True) -> list[str]:
    """What ``path`` declares of RocketMQ's vocabulary itself: a retry or dead-letter topic
    spelled out, a permission bit assigned, a properties separator in a string (``separators``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith(("%RETRY%", "%DLQ%")):
                found.append(f"{path.name}:{node.lineno}: {node.value[:20]!r}")
            elif separators and ("\x01" in node.value or "\x02" in node.value):
                found.append(f"{path.name}:{node.lineno}: a properties separator")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            found += [f"{path.name}:{node.lineno}: {n} assigned" for n in names if n.startswith("PERM_")]
    return found


def test_rocketmq_names_are_declared_once() -> None:
    # (spark_rmq: the prefixes and perm bits; its separators go with its wire sink's move to the client)
    found = [f for p in _sources(NET, SPARK) if p != NAMES for f in _vocabulary_literals(p, p.is_relative_to(NET))]
    assert found == [], "RocketMQ's names declared outside rmqnet/remoting/names.py: " + ", ".join(found)


def test_the_names_rule_finds_each_kind(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        'PERM_READ = 4\nT = "%RETRY%" + g\nD = f"%DLQ%{g}"\nS = "TAGS\\x01a\\x02"\nB = b"\\x01"\nR = RETRY_PREFIX + g\n'
    )
    assert len(_vocabulary_literals(tmp_path / "m.py")) == 4  # (bytes and the imported prefix are no declaration)
    assert len(_vocabulary_literals(tmp_path / "m.py", separators=False)) == 3


def _address_parses(path: Path) -> list[str]:
    """``host:port`` cut by hand (``rsplit(":")``, ``rpartition(":")``) or by the store's
    parsers: rmqnet's commands and peers go through ``rmqnet.remoting.address``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("rsplit", "rpartition")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == ":"
        ):
            found.append(f"{path.name}:{node.lineno}: {node.func.attr}(':')")
        if isinstance(node, ast.ImportFrom) and node.module == "rmqlog.values":
            found += [
                f"{path.name}:{node.lineno}: rmqlog.values.{a.name}"
                for a in node.names
                if a.name in ("parse_host_port", "parse_addresses")
            ]
    return found


def test_addresses_are_parsed_in_one_module() -> None:
    found = [f for p in _sources(NET) if p != ADDRESS for f in _address_parses(p)]
    assert found == [], "host:port parsed outside rmqnet/remoting/address.py: " + ", ".join(found)


def test_the_address_rule_finds_each_kind(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        'from rmqlog.values import parse_host_port\nh, _, p = a.rpartition(":")\n'
        'h, p = a.rsplit(":", 1)\nk, v = line.partition(":")\n'
    )
    assert len(_address_parses(tmp_path / "m.py")) == 3


def test_the_heartbeat_body_is_read_in_one_module() -> None:
    found = [
        f"{p.relative_to(ROOT)}:{node.lineno}"
        for p in _sources(NET)
        if p != HEARTBEAT
        for node in ast.walk(ast.parse(p.read_text(), str(p)))
        if isinstance(node, ast.Call)
        and any(isinstance(a, ast.Constant) and a.value == "HeartbeatData" for a in node.args)
    ]
    assert found == [], "HeartbeatData parsed outside rmqnet/remoting/heartbeat.py: " + ", ".join(found)
