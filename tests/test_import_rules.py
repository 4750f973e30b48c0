"""How the packages (``store``, ``spark_rmq``, ``rmqnet``) import, checked on the source:

- a module is loaded by an import statement, never by name through ``importlib`` (or
  ``__import__``, ``runpy``): a reader, ``grep``, the type checker and the layout rules see every
  dependency where it is written. An optional part (the C helper) is a plain import in
  ``try``/``except ImportError``. ``importlib.metadata`` and ``importlib.resources`` read
  installed data, not modules, and stay allowed;
- no import circle across the three packages, among the imports that run (function-local ones
  count; one under ``if TYPE_CHECKING:`` may point back, as rmqnet's layout test allows). Each
  package's own circles are checked by its layout test (tests/test_layout.py,
  tests/wire/test_rmqnet_layout.py), which prints the circle it finds.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_layout import ROOT, _circles, _imports
from test_layout import _modules as _store_modules

#: the packages by folder: their import names
PACKAGES = {"store": "rmqlog", "spark_rmq": "spark_rmq", "rmqnet": "rmqnet"}
#: what of ``importlib`` reads installed data rather than loading a module
DATA_ONLY = {"metadata", "resources"}


def _loads_by_name(path: Path) -> list[str]:
    """The places in the source at ``path`` that load a module other than by an import statement."""
    found: list[tuple[int, str]] = []

    def loader(module: str) -> bool:  # runpy, or a part of importlib other than its data readers
        top, *rest = module.split(".")
        return top == "runpy" or (top == "importlib" and bool(rest) and rest[0] not in DATA_ONLY)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if loader(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [a.name for a in node.names]
            if loader(node.module) or (node.module == "importlib" and set(names) - DATA_ONLY):
                found.append((node.lineno, f"from {node.module} import {', '.join(names)}"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "importlib":
            if node.attr not in DATA_ONLY:
                found.append((node.lineno, f"importlib.{node.attr}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
            found.append((node.lineno, "__import__()"))
    return [f"line {n}: {what}" for n, what in sorted(found)]


def test_the_by_name_check_finds_each_kind(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "import importlib\nimport importlib.util\nfrom importlib import import_module, metadata\n"
        "from importlib.machinery import SourceFileLoader\nimport runpy\n"
        "m = importlib.import_module('rmqnet.transport')\nn = __import__('rmqlog')\n"
        "from importlib import resources\nfrom importlib.metadata import version\nimport importlib.metadata\n"
        "v = importlib.metadata.version('x')\nfrom . import _native\n"
    )
    assert _loads_by_name(src) == [
        "line 2: import importlib.util",
        "line 3: from importlib import import_module, metadata",
        "line 4: from importlib.machinery import SourceFileLoader",
        "line 5: import runpy",
        "line 6: importlib.import_module",
        "line 7: __import__()",
    ]


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_no_module_is_loaded_by_name(folder: str) -> None:
    found = {str(p.relative_to(ROOT)): f for p in sorted((ROOT / folder).rglob("*.py")) if (f := _loads_by_name(p))}
    assert found == {}, f"modules loaded by name in {folder}/ (write an import statement): {found}"


def _project_modules() -> dict[str, Path]:
    """Every module of the three packages by import name (``rmqlog.log.scan``, ``rmqnet``...),
    the C helper among the store's (:func:`test_layout._modules`)."""
    mods = _store_modules()
    for folder, name in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")) if folder != "store" else []:
            parts = [name, *path.relative_to(ROOT / folder).with_suffix("").parts]
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def test_no_import_circle_across_the_packages() -> None:
    circles = _circles(_imports(_project_modules(), type_only=False))
    assert circles == [], "import circles: " + "; ".join(circles)


def test_the_circle_check_sees_a_circle_across_packages(tmp_path: Path) -> None:
    (tmp_path / "cli.py").write_text("def main():\n    from rmqnet.cli import run\n")
    (tmp_path / "net_cli.py").write_text("from rmqlog.admin.cli import main\n")
    (tmp_path / "source.py").write_text("from rmqnet.client import Producer\n")
    mods = {"rmqlog.admin.cli": tmp_path / "cli.py", "rmqnet.cli": tmp_path / "net_cli.py"}
    mods["spark_rmq.source"] = tmp_path / "source.py"
    assert _circles(_imports(mods, type_only=False)) == ["rmqlog.admin.cli -> rmqnet.cli -> rmqlog.admin.cli"]
