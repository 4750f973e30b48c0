"""The transactions' kill -9 torture job (jobs/torture_transactions.py): one short trial in every
suite run, 50 trials opt-in (``RMQ_OPTIN=1``), and its checker shown to count each kind of
failure on histories made on purpose.

A trial: a broker process, 3 transactional producers committing, rolling back and leaving
transactions to the check-back, SIGKILL of the broker during all three, a restart, settling until
no half message is open; then every commit whose half was answered SEND_OK delivered exactly
once, every rollback never.
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

import torture_transactions as tt  # noqa: E402


def _run(tmp_path: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(JOBS / "torture_transactions.py"), "--root", str(tmp_path / "work"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(),
    )


def test_one_trial_kill_restart_commits_once_and_rolls_back(tmp_path: Path) -> None:
    res = _run(tmp_path, "--trials", "1", "--run-s", "0.3", "--seed", "7", timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    m = re.search(r"trial 1: 1 kills, (\d+) commits, (\d+) rollbacks", res.stdout)
    assert m is not None and int(m.group(1)) > 0 and int(m.group(2)) > 0, res.stdout
    assert "1 trials, 0 lost, 0 duplicated, 0 leaked, 0 bad" in res.stdout and "0 ENDs refused" in res.stdout


#: a mutant broker (loaded in the job's processes through ``sitecustomize``): every direct
#: END_TRANSACTION refused, the check-back's answered; the check-back then settles each
#: transaction, so nothing is lost or leaked: only the count of refused ENDs can see it
REFUSING_BROKER = """
from rmqnet.broker import transactions
from rmqnet.remoting import ResponseCode
from rmqnet.remoting.headers import EndTransactionHeader

_handle = transactions.TransactionService.handle

def handle(self, broker, peer, req):
    if not EndTransactionHeader.read(req.ext_fields).from_transaction_check:
        return req.reply(ResponseCode.SYSTEM_ERROR, "mutant: every direct END refused")
    return _handle(self, broker, peer, req)

transactions.TransactionService.handle = handle
"""


def test_a_broker_refusing_every_direct_end_fails_the_trial(tmp_path: Path) -> None:
    """A refused END counts as bad: the torture once reported "0 lost, 0 bad" against a broker refusing every
    direct END (the check-back settled them): a refused END is bad now."""
    mutant = tmp_path / "mutant"
    mutant.mkdir()
    (mutant / "sitecustomize.py").write_text(REFUSING_BROKER)
    env = subprocess_env()
    env["PYTHONPATH"] = f"{mutant}:{env['PYTHONPATH']}"
    res = subprocess.run(
        [
            sys.executable,
            str(JOBS / "torture_transactions.py"),
            "--root",
            str(tmp_path / "work"),
            "--trials",
            "1",
            "--run-s",
            "0.3",
            "--seed",
            "7",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert res.returncode == 1, res.stdout[-4000:] + res.stderr[-4000:]
    m = re.search(r"1 trials, 0 lost, 0 duplicated, 0 leaked, (\d+) bad", res.stdout)
    assert m is not None and int(m.group(1)) > 0, res.stdout[-4000:]
    assert "END_TRANSACTION refused by the broker" in res.stdout


@pytest.mark.optin
def test_fifty_trials_commit_once_and_never_leak(tmp_path: Path) -> None:
    res = _run(tmp_path, "--trials", "50", "--seed", "31", timeout=3600)
    assert res.returncode == 0, res.stdout[-8000:] + res.stderr[-4000:]
    assert "50 trials, 0 lost, 0 duplicated, 0 leaked, 0 bad" in res.stdout


def test_bad_options_are_refused(tmp_path: Path) -> None:
    res = _run(tmp_path, "--trials", "0", timeout=60)
    assert res.returncode == 2 and "--trials" in res.stderr


# ---- the checker on made-up histories ------------------------------------------------------------

SEED = 11


def _seqs(commit: bool, n: int = 2) -> list[int]:
    """The first ``n`` transactions of producer 0 whose decided outcome is ``commit``."""
    out = [s for s in range(200) if tt.decide(SEED, 0, s)[0] == commit]
    return out[:n]


def test_checker_counts_each_kind_of_failure() -> None:
    c1, c2 = _seqs(True)
    r1, r2 = _seqs(False)
    led = tt.Ledger(tried={c1, c2, r1, r2}, sent={c1, c2, r1})
    body = lambda s: tt.make_body(SEED, 0, s)  # noqa: E731
    ok = tt.Counts()
    tt.check(SEED, [led], [body(c1), body(c2)], ok)
    assert (ok.lost, ok.dup, ok.leaked, ok.bad) == (0, 0, 0, 0) and ok.failed_sends == 1
    bad = tt.Counts()
    tt.check(SEED, [led], [body(c1), body(c1), body(r2), b"tx:0:99999:x", body(c2)[:-1]], bad)
    # c2 lost (its only copy is not byte-exact), c1 twice, r2 rolled back but delivered, two bodies nobody sent
    assert (bad.lost, bad.dup, bad.leaked, bad.bad) == (1, 1, 1, 2), bad.problems


def test_checker_counts_a_refused_end_as_bad_and_splits_failed_halves() -> None:
    c1, c2 = _seqs(True)
    (r1,) = _seqs(False, 1)
    led = tt.Ledger(tried={c1, c2, r1}, sent={c1, r1}, refused={c1})
    counts = tt.Counts()
    tt.check(SEED, [led], [tt.make_body(SEED, 0, c1)], counts)
    assert (counts.lost, counts.dup, counts.leaked, counts.bad, counts.refused_ends) == (0, 0, 0, 1, 1), counts.problems
    assert (counts.commits, counts.rollbacks) == (1, 1)  # c1 and r1: a SEND_OK half
    assert (counts.failed_sends, counts.failed_commits, counts.failed_rollbacks) == (1, 1, 0)  # c2


def test_the_ledger_reads_refused_ends(tmp_path: Path) -> None:
    path = tmp_path / "p.ledger"
    path.write_text("T 0\nS 0\nX 0\nT 1\nS 1\nE 1\n")
    led = tt.Ledger.read(path)
    assert (led.tried, led.sent, led.refused, led.ended) == ({0, 1}, {0, 1}, {0}, 1)


def test_a_commit_whose_half_send_failed_may_be_delivered_once() -> None:
    (c1,) = _seqs(True, 1)
    led = tt.Ledger(tried={c1}, sent=set())
    for delivered in ([], [tt.make_body(SEED, 0, c1)]):
        counts = tt.Counts()
        tt.check(SEED, [led], delivered, counts)
        assert (counts.lost, counts.dup, counts.leaked, counts.bad) == (0, 0, 0, 0)
