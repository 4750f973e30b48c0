"""The notebook's plots on a store of many topics (a legend per topic drowned them): each draws the ``TOP_N``
largest topics (queues, groups) and the rest as one "other", not a legend, a bar or a panel
per topic. The notebook's cells before its Spark section run here in this process, on the
Agg backend, against a store of 30 topics (``RMQ_STORE``); its full runs, Spark included, are
tests/spark/test_notebook.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import rmqlog

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "explore_store.ipynb"


def _cells_before_spark() -> list[str]:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    out = []
    for c in cells:
        text = "".join(c["source"])
        if c["cell_type"] == "markdown" and text.startswith("## The same data through Spark"):
            break
        if c["cell_type"] == "code":
            out.append(text)
    return out


@pytest.fixture
def many_topics(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    with rmqlog.MessageStore.open(root) as s:
        for i in range(30):
            topic = f"topic{i:02d}"
            s.create_topic(topic, 2)
            n = 3 + i
            s.put_batch(
                pa.table(
                    {
                        "topic": [topic] * n,
                        "body": [b"x" * (10 + i)] * n,
                        "tags": [f"tag{j % 3}" for j in range(n)],
                        "queueId": pa.array([j % 2 for j in range(n)], pa.int32()),
                    }
                )
            )
        s.dispatch()
        for g in range(12):
            for i in range(30):
                s.commit_offset(f"group{g:02d}", f"topic{i:02d}", 0, 1)
    return root


def test_the_plots_of_30_topics_draw_the_largest_and_other(many_topics: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQ_STORE", str(many_topics))
    monkeypatch.setattr(plt, "show", lambda *a, **k: None)  # Agg: the figures stay to be looked at
    plt.close("all")
    ns: dict[str, Any] = {}
    try:
        for cell in _cells_before_spark():
            exec(compile(cell, str(NOTEBOOK), "exec"), ns)  # noqa: S102  (the notebook's own code)
        top = ns.get("TOP_N", 8)  # (a notebook without it draws every topic: the defect)
        figures = [plt.figure(n) for n in plt.get_fignums()]
        assert len(figures) == 5
        rate, queues, lag, sizes, tags = figures
        for fig in (rate, sizes):
            labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
            assert len(labels) == top + 1 and labels[-1].startswith("other (22 topics)"), labels
            assert labels[0].startswith("topic29")  # the largest first
        bars = [t.get_text() for t in queues.axes[0].get_yticklabels()]
        assert len(bars) == 2 * top + 1 and bars[-1] == "other (22 topics, 44 queues)", bars
        groups = [t.get_text() for t in lag.axes[0].get_legend().get_texts()]
        assert len(groups) == top + 1 and groups[-1] == "other (4 groups)", groups
        assert len(lag.axes[0].get_xticklabels()) == top + 1
        assert [ax.get_title() for ax in tags.axes][-1] == "other (22 topics)" and len(tags.axes) == top + 1
    finally:
        if "s" in ns:
            ns["s"].close()
        plt.close("all")
