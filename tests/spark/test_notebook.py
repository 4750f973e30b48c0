"""notebooks/explore_store.ipynb runs top to bottom (its code cells, in order, in one namespace).

No Jupyter is needed: the cells are plain Python. The notebook's Spark cells get the suite's
session (``local_session`` returns the active one).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "explore_store.ipynb"


def _code_cells() -> list[str]:
    nb = json.loads(NOTEBOOK.read_text())
    assert nb["nbformat"] == 4
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def test_notebook_runs_on_a_sample_store(spark: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQ_STORE", str(tmp_path / "nb-store"))
    namespace: dict[str, object] = {"__name__": "__notebook__"}
    for i, source in enumerate(_code_cells()):
        try:
            exec(compile(source, f"{NOTEBOOK.name}[cell {i}]", "exec"), namespace)  # noqa: S102
        except Exception as exc:  # name the cell that broke
            raise AssertionError(f"cell {i} failed: {exc!r}\n{source}") from exc
    assert (tmp_path / "nb-store" / "commitlog").is_dir()
    assert namespace["per_queue"] and sum(namespace["per_queue"].values()) == 2000  # type: ignore[attr-defined]
