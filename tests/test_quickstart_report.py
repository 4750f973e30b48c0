"""What jobs/quickstart.py says it measured: Spark's warm-up in the first
micro-batch apart from the steady rate of the others (the whole run's rate was mostly Spark's
start). The run itself: tests/spark/test_quickstart.py."""

from __future__ import annotations

import sys
from pathlib import Path

# the job's module imported as the other job tests import theirs: jobs/ on sys.path, then a plain
# import (not loaded from its file by importlib: one way to reach a job, seen by grep and mypy)
JOBS = Path(__file__).resolve().parents[1] / "jobs"
sys.path.insert(0, str(JOBS))

from quickstart import steady  # noqa: E402


def test_the_first_micro_batch_is_apart_from_the_steady_rate() -> None:
    # 25,000 rows whose first batch took 6 s (Spark's warm-up), then 75,000 in 1.5 s
    text = steady([(25_000, 6_000), (25_000, 500), (25_000, 500), (25_000, 500)])
    assert text == (
        "first micro-batch 25,000 in 6.0s (with Spark's warm-up), then 75,000 in 1.5s: 50,000 messages/s steady"
    )
    assert steady([(10, 900)]).endswith("no further micro-batch to measure a steady rate on")
    assert steady([]) == "no micro-batch"
