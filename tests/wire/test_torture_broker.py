"""The broker's kill -9 torture job (jobs/torture_broker.py): one short trial in every suite run,
50 trials opt-in, and its checker shown to count each kind of failure on histories made on purpose.

A trial: a broker process under SYNC_FLUSH, 4 producer processes sending synchronously, SIGKILL of
the broker once every producer had a SEND_OK, a restart on the same root (recovery), then every
send answered SEND_OK must be at the queue offset its answer gave, with its body, read through
pulls and from the store directly; no body stored twice unless its producer retried it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import subprocess_env

JOBS = Path(__file__).resolve().parents[2] / "jobs"
sys.path.insert(0, str(JOBS))

import torture_broker as tb  # noqa: E402


def _run(tmp_path: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(JOBS / "torture_broker.py"), "--root", str(tmp_path / "work"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(),
    )


def test_one_trial_kill_restart_loses_nothing(tmp_path: Path) -> None:
    res = _run(tmp_path, "--trials", "1", "--run-s", "0.3", "--seed", "7", timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    m = re.search(r"trial 1: (\d+) SEND_OK \((\d+) after the restart\)", res.stdout)
    assert m is not None, res.stdout
    assert int(m.group(2)) >= 4 * tb.AFTER_RESTART  # every producer got answers from the restarted broker
    assert "1 trials, 0 lost" in res.stdout and "0 duplicated, 0 bad" in res.stdout


@pytest.mark.optin
def test_fifty_trials_lose_nothing(tmp_path: Path) -> None:
    res = _run(tmp_path, "--trials", "50", "--seed", "29", timeout=3600)
    assert res.returncode == 0, res.stdout[-8000:] + res.stderr[-4000:]
    assert "50 trials, 0 lost" in res.stdout


def test_bad_options_are_refused(tmp_path: Path) -> None:
    res = _run(tmp_path, "--trials", "0", timeout=60)
    assert res.returncode == 2 and "--trials" in res.stderr


# ---- the checker on made-up histories ------------------------------------------------------------

SEED = 5


def _history() -> tuple[list[tb.Ledger], tb.Stored]:
    """Producer 0 sent seq 0 (try 1, OK) and seq 1 (try 1 cut by the kill, try 2 OK), both tries of
    seq 1 stored; producer 1 sent seq 0 (OK)."""
    led0 = tb.Ledger(tries={0: 1, 1: 2}, oks=[(0, 1, _msg_id(0), 0, 0), (1, 2, _msg_id(300), 2, 1)])
    led1 = tb.Ledger(tries={0: 1}, oks=[(0, 1, _msg_id(600), 1, 0)])
    stored: tb.Stored = {
        (0, 0): (tb.make_body(SEED, 0, 0), 0, 1),
        (2, 0): (tb.make_body(SEED, 0, 1), 100, 1),  # the try cut by the kill, stored before it
        (2, 1): (tb.make_body(SEED, 0, 1), 300, 2),
        (1, 0): (tb.make_body(SEED, 1, 0), 600, 1),
    }
    return [led0, led1], stored


def _msg_id(offset: int) -> str:
    return f"7F000001{10911:08X}{offset:016X}"


def test_checker_accepts_a_retry_copy() -> None:
    ledgers, stored = _history()
    counts = tb.Counts()
    tb.check(SEED, ledgers, dict(stored), dict(stored), counts)
    assert (counts.ok, counts.lost, counts.dup, counts.bad) == (3, 0, 0, 0), counts.problems
    assert (counts.retried, counts.retry_copies) == (1, 1)


def test_checker_counts_a_lost_send() -> None:
    ledgers, stored = _history()
    del stored[(1, 0)]
    counts = tb.Counts()
    tb.check(SEED, ledgers, dict(stored), dict(stored), counts)
    assert counts.lost == 1 and "producer 1 seq 0" in counts.problems[0]


def test_checker_counts_a_wrong_body_offset_or_try_as_lost() -> None:
    for damaged in (
        (tb.make_body(SEED, 0, 7), 0, 1),
        (tb.make_body(SEED, 0, 0), 8, 1),
        (tb.make_body(SEED, 0, 0), 0, 2),
    ):
        ledgers, stored = _history()
        stored[(0, 0)] = damaged
        counts = tb.Counts()
        tb.check(SEED, ledgers, dict(stored), dict(stored), counts)
        assert counts.lost == 1, (damaged, counts.problems)


def test_checker_counts_a_duplicate_without_a_retry() -> None:
    ledgers, stored = _history()
    stored[(0, 1)] = (tb.make_body(SEED, 0, 0), 900, 1)  # the same try stored twice
    counts = tb.Counts()
    tb.check(SEED, ledgers, dict(stored), dict(stored), counts)
    assert counts.dup == 1 and counts.lost == 0


def test_checker_counts_a_foreign_body_and_views_that_differ() -> None:
    ledgers, stored = _history()
    pulled = dict(stored)
    stored[(3, 0)] = (b"tb:0:0:not the body", 1200, 1)
    counts = tb.Counts()
    tb.check(SEED, ledgers, pulled, stored, counts)
    assert counts.bad == 2  # in the store only, and not a body any producer sent
