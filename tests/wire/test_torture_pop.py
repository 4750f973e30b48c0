"""The POP kill -9 torture job (jobs/torture_pop.py): one short trial in every suite run, 50 trials
opt-in (``RMQ_OPTIN=1``). A trial: a broker process, messages sent, one consumer popping (200050)
and acking (200051) some of each delivery, SIGKILL and restart of the broker while it does; the
checker holds the history to at-least-once: no message without a confirmed ack at the end, no
delivery after a confirmed ack or while the previous one was invisible, ``reconsumeTimes`` and
the topic (``%RETRY%<group>_<topic>``) counting the deliveries whose invisible time ran out."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import subprocess_env

JOBS = Path(__file__).resolve().parents[2] / "jobs"


def _run(tmp_path: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(JOBS / "torture_pop.py"), "--root", str(tmp_path / "work"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(),
    )


def test_one_trial_kill_restart_nothing_lost_every_redelivery_explained(tmp_path: Path) -> None:
    res = _run(
        tmp_path, "--trials", "1", "--messages", "40", "--kills", "1", "--run-s", "0.5", "--seed", "5", timeout=300
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    m = re.search(
        r"trial 1: 1 kills, 40 sent, (\d+) deliveries \((\d+) redelivered\), (\d+) confirmed acks, "
        r"(\d+) acks of unknown outcome",
        res.stdout,
    )
    assert m is not None and int(m.group(1)) == 40 + int(m.group(2)), res.stdout
    assert int(m.group(3)) + int(m.group(4)) == 40, res.stdout  # every message acked, most of them confirmed
    assert "1 trials, 0 lost, 0 unexplained, 0 bad" in res.stdout


@pytest.mark.optin
def test_fifty_trials_nothing_lost_every_redelivery_explained(tmp_path: Path) -> None:
    res = _run(tmp_path, "--trials", "50", "--seed", "45", timeout=3600)
    assert res.returncode == 0, res.stdout[-8000:] + res.stderr[-4000:]
    assert "50 trials, 0 lost, 0 unexplained, 0 bad" in res.stdout


def test_bad_options_are_refused(tmp_path: Path) -> None:
    res = _run(tmp_path, "--kills", "0", timeout=60)
    assert res.returncode == 2 and "--kills" in res.stderr
