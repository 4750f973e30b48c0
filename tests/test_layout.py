"""The store package's layout rules (docs/architecture.md, "Layout"), checked on the source.

- no import cycles between the store's modules (every import counts: type-only imports and
  imports inside functions too, since a cycle hidden in a function is still a circle a
  reader has to untangle);
- only the package itself and the terminal tools (the CLI, export) import the facade
  (``rmqlog.message_store``): services,
  recovery, verify and retention receive the parts (:mod:`rmqlog.parts`);
- each folder imports only the folders below it (foundation <- log <- queue, index <-
  retention <- durability; admin and the wiring modules may import anything), and
  :mod:`rmqlog.parts`, the type every service receives;
- no module over 600 lines, in the store or the Spark side.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "store"

#: folder -> the folders its modules may import ("foundation": the store's top-level modules
#: that hold no service: errors, paths, config, config files, file primitives...)
ALLOWED = {
    "foundation": {"foundation"},
    "log": {"foundation", "log"},
    "queue": {"foundation", "log", "queue"},
    "index": {"foundation", "log", "index"},
    "schedule": {"foundation", "log", "queue", "schedule"},
    "retention": {"foundation", "log", "queue", "retention"},
    "durability": {"foundation", "log", "queue", "index", "retention", "durability"},
}
#: top-level modules that wire the folders together (and the package itself)
WIRING = {"rmqlog", "rmqlog.__main__", "rmqlog.message_store", "rmqlog.parts", "rmqlog.catalog"}
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(STORE.rglob("*.py")):
        parts = ["rmqlog", *path.relative_to(STORE).with_suffix("").parts]  # the folder's import name
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the store modules it imports (anywhere in its source)."""
    edges: dict[str, set[str]] = {}
    for mod, path in mods.items():
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                name = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{name}.{alias.name}"
                    if full in mods:
                        deps.add(full)
                    elif name in mods and alias.name != "_native":  # a name defined in the module
                        deps.add(name)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in mods)
        deps.discard(mod)
        edges[mod] = deps
    return edges


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


def _folder(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (STORE / parts[1]).is_dir()) else "foundation"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    cycles = _cycles(_imports(_modules()))
    assert cycles == [], f"import cycles: {cycles}"


def test_only_the_package_and_the_terminal_tools_import_the_facade() -> None:
    importers = sorted(m for m, deps in _imports(_modules()).items() if "rmqlog.message_store" in deps)
    # the rmqlog command: its dispatch (cli), the reading and changing commands, export
    assert importers == ["rmqlog", "rmqlog.admin.changing", "rmqlog.admin.cli", "rmqlog.admin.export",
                         "rmqlog.admin.reading"]


def test_folders_import_only_the_folders_below_them() -> None:
    bad = []
    for mod, deps in _imports(_modules()).items():
        if mod in WIRING or _folder(mod) == "admin":
            continue
        allowed = ALLOWED.get(_folder(mod))
        assert allowed is not None, f"{mod}: folder {_folder(mod)!r} has no rule in ALLOWED (add one)"
        for dep in deps:
            if dep == "rmqlog.parts":  # what services receive (a type; it imports them, not the reverse)
                continue
            if dep in WIRING or _folder(dep) not in allowed:
                bad.append(f"{mod} -> {dep}")
    assert bad == [], "imports against the layering: " + ", ".join(sorted(bad))


@pytest.mark.parametrize("folder", ["store", "spark_rmq"])
def test_no_module_over_600_lines(folder: str) -> None:
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / folder).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"
