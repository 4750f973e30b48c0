"""The store package's layout rules (docs/architecture.md, "Layers"), checked on the source.

- the store's modules stand on floors, a total order (:data:`FLOORS`): the leaves (modules
  that hold no service, and the C helper) < log < queue, index < durability < parts (the
  wiring) < the put and read paths < the services (scheduler, retention) < recovery < the
  facade < the package and the terminal tools. No import runs up a floor, and units that
  share a floor do not import each other: every import counts, type-only ones (``if
  TYPE_CHECKING``) and imports inside functions too, since an import that runs up is a
  dependency a reader has to know about wherever it is written;
- no import cycles between the store's modules (the same imports count);
- only the package itself and the terminal tools (the CLI, export) import the facade
  (``rmqlog.message_store``), and the facade only wires: it holds no loop and no data work
  of its own;
- one module loads the C helper (``rmqlog._native``): :mod:`rmqlog.native`, a leaf;
- one module reads the time (:mod:`rmqlog.clock`, a leaf): every other module of the store
  and of the Spark side asks a clock it is given (``time.sleep`` is no reading);
- no module over 600 lines, in the store or the Spark side;
- docs/architecture.md's module tables name every module of the store and of the Spark side
  in exactly one row, and a store row's floor column names the units of its modules;
- the Spark side imports from the store only its public API: the names of ``rmqlog.__all__``
  and the modules of ``rmqlog.PUBLIC_MODULES``.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "store"

#: The floors, lowest first; each holds units (a folder of the store, or a top-level module
#: named in :data:`TOP_LEVEL`). A module imports from its own unit and from lower floors only.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("leaves",),  # top-level modules that hold no service (errors, paths, config...), the C helper
    ("log",),  # the commitlog: records, codecs, segments, appends
    ("queue", "index", "filter"),  # consume queues and the dispatcher; index files (fed through a hook); SQL92 filters
    ("durability",),  # flush, checkpoint, lock/abort/owner files
    ("parts",),  # StoreParts: the parts of one store, wired
    ("access", "catalog", "read_only"),  # the put and read paths; topics and offsets; read-only opens
    ("schedule", "retention"),  # services that run on the parts and paths
    ("recovery",),  # opening, recovery, queue repair, survey, verify
    ("facade",),  # MessageStore
    ("package", "admin"),  # `import rmqlog`; the terminal tools (CLI, export)
)
#: the store's top-level modules that are a unit of their own (every other one is a leaf)
TOP_LEVEL = {
    "rmqlog": "package",
    "rmqlog.__main__": "admin",
    "rmqlog.message_store": "facade",
    "rmqlog.parts": "parts",
    "rmqlog.catalog": "catalog",
    "rmqlog.read_only": "read_only",
}
FLOOR = {unit: n for n, units in enumerate(FLOORS) for unit in units}
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(STORE.rglob("*.py")):
        parts = ["rmqlog", *path.relative_to(STORE).with_suffix("").parts]  # the folder's import name
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    mods["rmqlog._native"] = STORE / "_native.c"  # the C helper: a leaf (it imports no store module)
    return mods


def _imports(mods: dict[str, Path], *, type_only: bool = True) -> dict[str, set[str]]:
    """module -> the store modules it imports (anywhere in its source; with ``type_only=False``
    the imports under ``if TYPE_CHECKING:`` left out: those that run)."""
    edges: dict[str, set[str]] = {}
    for mod, path in mods.items():
        if path.suffix != ".py":
            edges[mod] = set()
            continue
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        deps: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        if not type_only:
            tree = _WithoutTypeChecking().visit(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                name = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{name}.{alias.name}"
                    if full in mods:
                        deps.add(full)
                    elif name in mods:  # a name defined in the module
                        deps.add(name)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in mods)
        deps.discard(mod)
        edges[mod] = deps
    return edges


class _WithoutTypeChecking(ast.NodeTransformer):
    """A module's tree without the bodies of its ``if TYPE_CHECKING:`` blocks."""

    def visit_If(self, node: ast.If) -> ast.AST:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            node.body = [ast.Pass()]
        self.generic_visit(node)
        return node


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _circles(edges: dict[str, set[str]]) -> list[str]:
    """One circle through each of :func:`_cycles`' components, spelled ``a -> b -> ... -> a``:
    the imports a reader follows round, not just the set of modules caught in them."""
    out = []
    for comp in _cycles(edges):
        start, members = comp[0], set(comp)
        back: dict[str, str] = {}
        frontier, path = [start], None
        while frontier and path is None:  # breadth first: the shortest circle through start
            nxt = []
            for v in frontier:
                for w in sorted(edges[v] & members):
                    if w == start:
                        path = [v]
                        while path[-1] != start:
                            path.append(back[path[-1]])
                        break
                    if w not in back:
                        back[w] = v
                        nxt.append(w)
                if path is not None:
                    break
            frontier = nxt
        out.append(" -> ".join([*reversed(path or [start]), start]))
    return out


def _unit(mod: str) -> str:
    """The unit of ``mod``: its folder below ``store/``, else its own name (:data:`TOP_LEVEL`) or a leaf."""
    parts = mod.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (STORE / parts[1]).is_dir()):
        return parts[1]
    return TOP_LEVEL.get(mod, "leaves")


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    assert _circles({"a": {"b", "d"}, "b": {"c"}, "c": {"a"}, "d": {"c"}}) == ["a -> b -> c -> a"]
    assert _circles({"a": {"a2"}, "a2": {"a"}, "b": set()}) == ["a -> a2 -> a"]


def test_no_import_cycles() -> None:
    circles = _circles(_imports(_modules()))
    assert circles == [], "import circles in the store: " + "; ".join(circles)


def test_only_the_package_and_the_terminal_tools_import_the_facade() -> None:
    importers = sorted(m for m, deps in _imports(_modules()).items() if "rmqlog.message_store" in deps)
    # the rmqlog command: its dispatch (cli), the reading and changing commands, export, dead letters
    assert importers == [
        "rmqlog",
        "rmqlog.admin.changing",
        "rmqlog.admin.cli",
        "rmqlog.admin.dead_letters",
        "rmqlog.admin.export",
        "rmqlog.admin.reading",
    ]


def _upward(edges: dict[str, set[str]]) -> list[str]:
    """The imports that run up a floor or across to another unit of the same floor."""
    bad = []
    for mod, deps in edges.items():
        unit = _unit(mod)
        for dep in deps:
            if _unit(dep) != unit and FLOOR[_unit(dep)] >= FLOOR[unit]:
                bad.append(f"{mod} ({unit}) -> {dep} ({_unit(dep)})")
    return sorted(bad)


def test_every_unit_stands_on_a_floor() -> None:
    units = {_unit(m) for m in _modules()}
    assert units - FLOOR.keys() == set(), "units without a floor (add them to FLOORS)"
    assert FLOOR.keys() - units == set(), "floors naming units that do not exist"


def test_the_floor_check_finds_imports_that_run_up() -> None:
    edges = {
        "rmqlog.log.scan": {"rmqlog.errors"},  # down: fine
        "rmqlog.queue.dispatcher": {"rmqlog.index.feed"},  # to another unit of its floor: refused
        "rmqlog.log.decode": {"rmqlog.parts"},  # up: refused
        "rmqlog.parts": {"rmqlog.log.decode"},  # down: fine
    }
    assert _upward(edges) == [
        "rmqlog.log.decode (log) -> rmqlog.parts (parts)",
        "rmqlog.queue.dispatcher (queue) -> rmqlog.index.feed (index)",
    ]


def test_type_only_and_function_local_imports_count(tmp_path: Path) -> None:
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "appender.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..parts import StoreParts\n"
        "def put():\n    from .. import message_store\n"
    )
    (tmp_path / "parts.py").write_text("")
    (tmp_path / "message_store.py").write_text("")
    edges = _imports(
        {
            "rmqlog.log.appender": tmp_path / "log" / "appender.py",
            "rmqlog.parts": tmp_path / "parts.py",
            "rmqlog.message_store": tmp_path / "message_store.py",
        }
    )
    assert edges["rmqlog.log.appender"] == {"rmqlog.parts", "rmqlog.message_store"}


def test_no_import_runs_up_a_floor() -> None:
    bad = _upward(_imports(_modules()))
    assert bad == [], "imports against the floors: " + ", ".join(bad)


def _loads_helper(path: Path) -> bool:
    """Whether the source at ``path`` imports the C helper: an import statement naming
    ``_native``, or ``importlib.import_module`` given a string that ends so."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name.split(".")[-1] for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
        from_helper = isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "_native"
        by_name = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and any(
                isinstance(c, ast.Constant) and str(c.value).endswith("_native") for a in node.args for c in ast.walk(a)
            )
        )
        if from_helper or "_native" in names or by_name:
            return True
    return False


def test_one_module_loads_the_c_helper() -> None:
    importers = sorted(m for m, p in _modules().items() if p.suffix == ".py" and _loads_helper(p))
    assert importers == ["rmqlog.native"]
    assert _unit("rmqlog.native") == "leaves"


#: the ``time`` module's functions that read a clock (``sleep`` waits, conversions convert)
_TIME_READS = {
    "time",
    "time_ns",
    "monotonic",
    "monotonic_ns",
    "perf_counter",
    "perf_counter_ns",
    "process_time",
    "process_time_ns",
    "thread_time",
    "thread_time_ns",
    "clock_gettime",
    "clock_gettime_ns",
}
#: conversions that read the clock when given no time (``time.localtime()``...): name -> arguments then
_TIME_NOW_DEFAULTS = {"localtime": 0, "gmtime": 0, "ctime": 0, "asctime": 0, "strftime": 1}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _time_reads(source: str) -> list[str]:
    """The places in ``source`` that read a clock themselves: a ``time`` function of
    :data:`_TIME_READS` (called or passed on), imported by name or through the module (any
    alias), a conversion of :data:`_TIME_NOW_DEFAULTS` given no time, or ``datetime.now()``,
    ``utcnow()``, ``date.today()``."""
    tree = ast.parse(source)
    time_modules = {
        a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names if a.name == "time"
    }
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            found += [
                (node.lineno, f"from time import {a.name}")
                for a in node.names
                if a.name in _TIME_READS or a.name in _TIME_NOW_DEFAULTS or a.name == "*"
            ]
        on_time = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in time_modules
        if isinstance(node, ast.Attribute) and on_time and node.attr in _TIME_READS:
            found.append((node.lineno, _dotted(node)))
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("now", "utcnow", "today")
            and _dotted(node.value).split(".")[-1] in ("datetime", "date")
        ):
            found.append((node.lineno, _dotted(node)))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in time_modules
            and node.func.attr in _TIME_NOW_DEFAULTS
            and len(node.args) <= _TIME_NOW_DEFAULTS[node.func.attr]
            and not node.keywords
        ):
            found.append((node.lineno, f"{_dotted(node.func)}() of now"))
    return [f"line {n}: {what}" for n, what in sorted(found)]


def test_the_time_check_finds_clock_reads() -> None:
    reads = """import time as t, datetime as dt
from time import monotonic
from datetime import date
a = t.time()
b = sorted([], key=t.time_ns)
c = dt.datetime.now(dt.UTC)
d = date.today()
e = t.localtime()
"""
    assert _time_reads(reads) == [
        "line 2: from time import monotonic",
        "line 4: t.time",
        "line 5: t.time_ns",
        "line 6: dt.datetime.now",
        "line 7: date.today",
        "line 8: t.localtime() of now",
    ]
    no_reads = """import time, datetime
time.sleep(0.1)
x = time.localtime(1_700_000_000)
y = datetime.datetime.fromtimestamp(1.0)
clock.now()
"""
    assert _time_reads(no_reads) == []


@pytest.mark.parametrize("folder", ["store", "spark_rmq"])
def test_only_the_clock_reads_the_time(folder: str) -> None:
    allowed = {STORE / "clock.py"}
    reads = {
        str(p.relative_to(ROOT)): r
        for p in sorted((ROOT / folder).rglob("*.py"))
        if p not in allowed and (r := _time_reads(p.read_text()))
    }
    assert reads == {}, "modules reading the time themselves (ask the store's clock, rmqlog.clock): " + str(reads)
    assert _unit("rmqlog.clock") == "leaves"


@pytest.mark.parametrize("folder", ["store", "spark_rmq"])
def test_no_module_over_600_lines(folder: str) -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted((ROOT / folder).rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"


ARCHITECTURE = ROOT / "docs" / "architecture.md"
#: the section of docs/architecture.md whose table lists each folder's modules
TABLES = {"store": "The store's modules", "spark_rmq": "The Spark data source"}


def _table_rows(section: str) -> list[tuple[list[str], str]]:
    """The rows of the module table in the section of docs/architecture.md headed ``section``:
    the module paths named in each row's first cell, and its last cell."""
    text = ARCHITECTURE.read_text()
    assert "\n## " + section in text, f"docs/architecture.md has no section '{section}'"
    body = text.split("\n## " + section, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 2:
            rows.append((re.findall(r"`([\w/]+\.(?:py|c))`", cells[0]), cells[-1]))
    return rows


def _module_name(path: str) -> str:
    """``log/encode/batch.py`` -> ``rmqlog.log.encode.batch`` (a path below ``store/``)."""
    parts = ["rmqlog", *Path(path).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("folder", sorted(TABLES))
def test_the_architecture_table_names_every_module_once(folder: str) -> None:
    listed = Counter(p for paths, _ in _table_rows(TABLES[folder]) for p in paths)
    on_disk = {
        str(p.relative_to(ROOT / folder))
        for p in (ROOT / folder).rglob("*")
        if p.suffix in (".py", ".c") and "__pycache__" not in p.parts
    }
    assert sorted(on_disk - listed.keys()) == [], f"modules of {folder}/ missing from docs/architecture.md"
    assert sorted(listed.keys() - on_disk) == [], "docs/architecture.md names modules that do not exist"
    assert {p: n for p, n in listed.items() if n > 1} == {}, "modules in more than one row"


def test_the_architecture_table_gives_each_store_module_its_floor() -> None:
    wrong = {}
    for paths, floor in _table_rows(TABLES["store"]):
        units = {_unit(_module_name(p)) for p in paths}
        if units != set(floor.split(", ")):
            wrong[", ".join(paths)] = (floor, sorted(units))
    assert wrong == {}, f"rows whose floor column is not their modules' units: {wrong}"


def test_the_table_check_reads_rows_and_floors() -> None:
    assert _module_name("log/encode/batch.py") == "rmqlog.log.encode.batch"
    assert _module_name("__init__.py") == "rmqlog" and _module_name("queue/__init__.py") == "rmqlog.queue"
    assert _module_name("_native.c") == "rmqlog._native"
    rows = _table_rows(TABLES["store"])
    assert (["parts.py"], "parts") in rows


def _private_uses(path: Path, public: set[str], modules: set[str]) -> list[str]:
    """What the source at ``path`` takes from ``rmqlog`` outside its public API: a name not in
    ``rmqlog.__all__`` (imported, or read as ``rmqlog.<name>``), or a module not public."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "rmqlog":
            if node.module == "rmqlog":
                bad += [
                    f"rmqlog.{a.name}" for a in node.names if a.name not in public and f"rmqlog.{a.name}" not in modules
                ]
            elif node.module not in modules:
                bad.append(str(node.module))
        elif isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.startswith("rmqlog.") and a.name not in modules]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "rmqlog"
            and node.attr not in public
            and f"rmqlog.{node.attr}" not in modules
        ):
            bad.append(f"rmqlog.{node.attr}")
    return bad


def _public_api() -> tuple[set[str], set[str]]:
    import rmqlog

    return set(rmqlog.__all__), set(rmqlog.PUBLIC_MODULES)


def test_the_spark_side_uses_only_the_public_api() -> None:
    """The Spark source and sink import from the store only its public API: the names of
    ``rmqlog.__all__`` and the modules of ``rmqlog.PUBLIC_MODULES`` (docs/store-api.md)."""
    public, modules = _public_api()
    bad = [
        f"{p.relative_to(ROOT)}: {b}"
        for p in sorted((ROOT / "spark_rmq").rglob("*.py"))
        for b in _private_uses(p, public, modules)
    ]
    assert bad == [], "private store imports: " + ", ".join(bad)


def test_the_public_api_check_finds_private_uses(tmp_path: Path) -> None:
    public, modules = _public_api()
    src = tmp_path / "m.py"
    src.write_text(
        "import rmqlog\nimport rmqlog.errors\nimport rmqlog.log.decode\n"
        "from rmqlog import MessageStore, safe_open, parts\nfrom rmqlog.queue.consume_queue import FILLER_SIZE\n"
        "from rmqlog.paths import validate_topic\nx = rmqlog.GetMessageStatus.FOUND\ny = rmqlog.hashing\n"
    )
    assert _private_uses(src, public, modules) == [
        "rmqlog.log.decode",
        "rmqlog.parts",
        "rmqlog.queue.consume_queue",
        "rmqlog.hashing",
    ]


def _spark_modules(root: Path = ROOT / "spark_rmq") -> dict[str, Path]:
    """The Spark side's modules by import name (``spark_rmq``, ``spark_rmq.source``, ...)."""
    return {"spark_rmq" if p.stem == "__init__" else f"spark_rmq.{p.stem}": p for p in sorted(root.glob("*.py"))}


def test_no_import_cycles_in_the_spark_side() -> None:
    """No circle anywhere in ``spark_rmq`` (function-local and type-only imports count, as in
    the store): the readers, the queue sources and the data source import one way."""
    circles = _circles(_imports(_spark_modules()))
    assert circles == [], "import circles in spark_rmq: " + "; ".join(circles)


def test_the_spark_cycle_check_finds_a_function_local_circle(tmp_path: Path) -> None:
    (tmp_path / "source.py").write_text("from .readers import Reader\n")
    (tmp_path / "readers.py").write_text("def make():\n    from .source import DataSource\n")
    (tmp_path / "other.py").write_text("from . import source\n")
    assert _cycles(_imports(_spark_modules(tmp_path))) == [["spark_rmq.readers", "spark_rmq.source"]]


def _network_uses(path: Path, public: set[str]) -> list[str]:
    """What the source at ``path`` takes from ``rmqnet`` other than ``from rmqnet.client import``
    of a name in ``rmqnet.client.__all__``."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "rmqnet":
            if node.module != "rmqnet.client":
                bad.append(str(node.module))
            else:
                bad += [f"rmqnet.client.{a.name}" for a in node.names if a.name not in public]
        elif isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] == "rmqnet"]
    return bad


def test_the_spark_side_reaches_the_network_through_the_client_only() -> None:
    """``spark_rmq`` imports from ``rmqnet`` only ``from rmqnet.client import <public name>``
    (``rmqnet.client.__all__``): the wire is the client's, not a second copy in the data source."""
    import rmqnet.client

    public = set(rmqnet.client.__all__)
    bad = [
        f"{p.relative_to(ROOT)}: {b}"
        for p in sorted((ROOT / "spark_rmq").rglob("*.py"))
        for b in _network_uses(p, public)
    ]
    assert bad == [], "network imports past rmqnet.client's public names: " + ", ".join(bad)


def test_the_network_check_finds_other_imports(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "import rmqnet.client\nfrom rmqnet.client import Producer, _private\nfrom rmqnet.client.loop import call\n"
        "from rmqnet.remoting import RemotingCommand\nfrom rmqnet import client\nimport rmqlog\n"
    )
    assert _network_uses(src, {"Producer"}) == [
        "rmqnet.client",
        "rmqnet.client._private",
        "rmqnet.client.loop",
        "rmqnet.remoting",
        "rmqnet",
    ]
