"""The retries' kill -9 torture job (jobs/torture_send_back.py): one short trial in every suite run,
50 trials opt-in (``RMQ_OPTIN=1``), and its checker shown to count each kind of failure on
histories made on purpose.

A trial: a broker process (SYNC_FLUSH, 1 s delay levels), messages sent, 3 worker processes
sending them back (CONSUMER_SEND_MSG_BACK 36: retries, dead letters by ``maxReconsumeTimes`` and
by a negative delay level), SIGKILL of the broker during the send-backs, a restart, settling until
the scheduler delivered every retry; then every answered send-back in ``%RETRY%<group>`` or
``%DLQ%<group>`` once, with ``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID`` and ``reconsumeTimes`` 1.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import subprocess_env

JOBS = Path(__file__).resolve().parents[2] / "jobs"
sys.path.insert(0, str(JOBS))

import torture_send_back as tsb  # noqa: E402


def _run(tmp_path: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(JOBS / "torture_send_back.py"), "--root", str(tmp_path / "work"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(),
    )


def test_one_trial_kill_restart_retries_and_dead_letters_once(tmp_path: Path) -> None:
    res = _run(tmp_path, "--trials", "1", "--messages", "40", "--run-s", "0.3", "--seed", "7", timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    m = re.search(r"trial 1: 1 kills, 120 send-backs answered \(retry (\d+), max (\d+), negative (\d+)\)", res.stdout)
    assert m is not None and all(int(g) > 0 for g in m.groups()), res.stdout
    assert "1 trials, 0 lost, 0 duplicated, 0 bad (120 answered send-backs" in res.stdout
    assert re.search(r"^mode max: \d+ answered send-backs to %DLQ%RT_CG", res.stdout, re.M), res.stdout


@pytest.mark.optin
def test_fifty_trials_every_send_back_once(tmp_path: Path) -> None:
    res = _run(tmp_path, "--trials", "50", "--seed", "31", timeout=3600)
    assert res.returncode == 0, res.stdout[-8000:] + res.stderr[-4000:]
    assert "50 trials, 0 lost, 0 duplicated, 0 bad" in res.stdout


def test_bad_options_are_refused(tmp_path: Path) -> None:
    res = _run(tmp_path, "--messages", "0", timeout=60)
    assert res.returncode == 2 and "--messages" in res.stderr


# ---- the checker on made-up histories ------------------------------------------------------------

SEED = 11
TOTAL = 60


def _first(mode: str, n: int = 2) -> list[int]:
    return [i for i in range(TOTAL) if tsb.decide(SEED, i).mode == mode][:n]


def _origin(i: int) -> str:
    return f"7F00000100002A9F{i:016X}"


def _copy(i: int, **change: object) -> tsb.Copy:
    props = {"RETRY_TOPIC": tsb.TOPIC, "ORIGIN_MESSAGE_ID": _origin(i), "UNIQ_KEY": f"u{i}"}
    props.update({k: v for k, v in change.items() if k != "reconsume" and isinstance(v, str)})
    reconsume = change.get("reconsume", 1)
    assert isinstance(reconsume, int)
    return tsb.make_body(SEED, i), props, reconsume


def _history(answered: set[int], tries: dict[int, int] | None = None) -> tsb.Ledger:
    tries = tries or {}
    return tsb.Ledger(tries=Counter({i: tries.get(i, 1) for i in range(TOTAL)}), answered=answered)


def _good() -> dict[str, list[tsb.Copy]]:
    stored: dict[str, list[tsb.Copy]] = {tsb.RETRY: [], tsb.DLQ: []}
    for i in range(TOTAL):
        stored[tsb.decide(SEED, i).topic].append(_copy(i))
    return stored


def test_the_modes_route_as_the_broker_does() -> None:
    plans = [tsb.decide(SEED, i) for i in range(TOTAL)]
    assert {p.mode for p in plans} == set(tsb.MODES)
    for p in plans:
        if p.mode == "retry":
            assert p.delay_level >= 0 and (p.max_reconsume is None or p.max_reconsume > 0) and p.topic == tsb.RETRY
        elif p.mode == "max":
            assert p.max_reconsume == 0 and p.topic == tsb.DLQ  # reconsumeTimes 0 >= 0
        else:
            assert p.delay_level < 0 and p.topic == tsb.DLQ


def test_checker_passes_a_clean_history() -> None:
    counts = tsb.Counts()
    tsb.check(SEED, TOTAL, {i: _origin(i) for i in range(TOTAL)}, _history(set(range(TOTAL))), _good(), counts)
    assert (counts.lost, counts.dup, counts.bad) == (0, 0, 0), counts.problems
    assert sum(counts.answered.values()) == TOTAL and sum(counts.retry_copies.values()) == 0


def test_checker_counts_each_kind_of_failure() -> None:
    r1, r2 = _first("retry")
    m1, m2 = _first("max")
    n1, n2 = _first("negative")
    stored = _good()
    stored[tsb.RETRY] = [c for c in stored[tsb.RETRY] if tsb.body_id(c[0]) != r1]  # r1 lost
    stored[tsb.DLQ].append(_copy(m1))  # m1 twice from one try
    stored[tsb.RETRY].append(_copy(n1))  # n1 also in the wrong topic
    stored[tsb.DLQ] = [c if tsb.body_id(c[0]) != m2 else _copy(m2, reconsume=0) for c in stored[tsb.DLQ]]
    stored[tsb.DLQ] = [c if tsb.body_id(c[0]) != n2 else _copy(n2, ORIGIN_MESSAGE_ID="x") for c in stored[tsb.DLQ]]
    stored[tsb.RETRY] = [
        c if tsb.body_id(c[0]) != r2 else _copy(r2, RETRY_TOPIC="%RETRY%RT_CG") for c in stored[tsb.RETRY]
    ]
    stored[tsb.DLQ].append((b"rb:9999:x", {}, 1))  # a body no one sent
    counts = tsb.Counts()
    tsb.check(SEED, TOTAL, {i: _origin(i) for i in range(TOTAL)}, _history(set(range(TOTAL))), stored, counts)
    # r1 lost; m1 duplicated; bad: n1 misrouted, m2 reconsumeTimes, n2 origin, r2 RETRY_TOPIC, the unknown body
    assert (counts.lost, counts.dup, counts.bad) == (1, 1, 5), counts.problems


def test_an_unanswered_try_may_leave_one_more_copy() -> None:
    r1, r2 = _first("retry")
    stored = _good()
    stored[tsb.RETRY].append(_copy(r1))  # tried twice (the first reply cut): two copies allowed
    stored[tsb.RETRY] += [_copy(r2), _copy(r2)]  # tried twice: three copies are one too many
    counts = tsb.Counts()
    tsb.check(
        SEED, TOTAL, {i: _origin(i) for i in range(TOTAL)}, _history(set(range(TOTAL)), {r1: 2, r2: 2}), stored, counts
    )
    assert (counts.lost, counts.dup, counts.bad) == (0, 1, 0), counts.problems
    assert counts.retry_copies["retry"] == 1 and counts.retried["retry"] == 2


def test_a_send_back_never_answered_is_bad_and_may_be_absent() -> None:
    (m1,) = _first("max", 1)
    stored = _good()
    stored[tsb.DLQ] = [c for c in stored[tsb.DLQ] if tsb.body_id(c[0]) != m1]
    counts = tsb.Counts()
    tsb.check(
        SEED, TOTAL, {i: _origin(i) for i in range(TOTAL)}, _history(set(range(TOTAL)) - {m1}, {m1: 3}), stored, counts
    )
    assert (counts.lost, counts.dup, counts.bad) == (0, 0, 1), counts.problems
